"""Start of a sandboxed pytest run (stdlib + pytest only; no seqrl imports).

Run by `seqrl.rewards.code_agent` inside the sandbox, as the unprivileged uid, as
``python -I -S -B _pytest_entry.py CONFIG_JSON PYTEST_ARGS...`` with the repository copy as the
working directory and a report pipe on fd 3. ``CONFIG_JSON`` holds ``mode`` (``collect`` or
``run``), ``paths`` (directories holding pytest and its dependencies, appended to ``sys.path``),
``nonce`` and ``conftests`` (the snapshot's own conftest files, relative paths).

- ``collect``: ``pytest --collect-only`` on the *pristine* snapshot; writes one JSON object to fd 3:
  the collected node ids with their JUnit ``(classname, name)`` and the node ids that failed to
  collect.
- ``run``: ``pytest ... --junitxml=/dev/fd/3`` on the patched copy, with an integrity guard.

The guard is **best effort**: the code under test runs in this same process (the tests import it),
so it can in principle rewrite anything here. What the guard adds is that the cheap, generic ways to
forge a pass are caught: before pytest starts, it records the functions and classes of every
module of pytest (its builtin plugins imported first) and pluggy, of ElementTree and ``builtins``;
at session finish (before the XML is written)
it checks that none was replaced, that pluggy still dispatches through its own ``_multicall``, and
that every implementation of the result-carrying hooks comes from pytest, the guard or one of the
snapshot's conftest files. It then stamps the report with a ``seqrl_integrity`` property: ``ok
NONCE`` or ``tampered: WHAT``. A report without ``ok NONCE`` earns no test reward (the parent checks;
``docs/sandbox.md`` says what remains possible).
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import sys

REPORT = "/dev/fd/3"
WATCHED_PREFIXES = ("_pytest", "pluggy")  # every loaded module of these packages is watched
WATCHED_EXTRA = ("xml.etree.ElementTree",)
RESULT_HOOKS = (
    "pytest_runtest_protocol", "pytest_runtest_makereport", "pytest_runtest_logreport",
    "pytest_runtest_setup", "pytest_runtest_call", "pytest_runtest_teardown", "pytest_pyfunc_call",
    "pytest_report_teststatus", "pytest_collection_modifyitems", "pytest_make_collect_report",
    "pytest_collectreport", "pytest_itemcollected", "pytest_deselected", "pytest_sessionfinish",
)


def _functions_of(obj):
    """(attribute, function) pairs of a module or class namespace, unwrapping class/static methods
    and properties."""
    for name, value in list(vars(obj).items()):
        if isinstance(value, (classmethod, staticmethod)):
            value = value.__func__
        if isinstance(value, property):
            for part, f in (("fget", value.fget), ("fset", value.fset)):
                if f is not None:
                    yield f"{name}.{part}", f
        elif callable(value):
            yield name, value


def watched_modules() -> list[str]:
    """pytest's builtin plugins imported now (pytest would import them while configuring), then every
    loaded ``_pytest*`` / ``pluggy*`` module, plus ElementTree (the report writer)."""
    from _pytest.config import builtin_plugins

    for name in sorted(builtin_plugins):
        try:
            importlib.import_module(f"_pytest.{name}")
        except ImportError:
            pass
    for name in WATCHED_EXTRA:
        importlib.import_module(name)
    return sorted(m for m in list(sys.modules) if m.split(".")[0] in WATCHED_PREFIXES or m in WATCHED_EXTRA)


def snapshot() -> dict:
    """Identity (and code object) of every watched function and class."""
    table = {}
    for modname in watched_modules():
        mod = sys.modules[modname]
        table[("module", modname)] = (mod, None)
        for name, value in _functions_of(mod):
            table[(modname, name)] = (value, getattr(value, "__code__", None))
            if isinstance(value, type) and getattr(value, "__module__", None) == modname:
                for attr, f in _functions_of(value):
                    table[(modname, f"{name}.{attr}")] = (f, getattr(f, "__code__", None))
    for name, value in list(vars(builtins).items()):
        table[("builtins", name)] = (value, None)
    return table


def _harness_dirs() -> tuple[str, ...]:
    import _pytest
    import pluggy

    return tuple(os.path.realpath(os.path.dirname(m.__file__)) + os.sep for m in (_pytest, pluggy))


def _harness_owned(obj, dirs: tuple[str, ...]) -> bool:
    """Whether ``obj`` is a function (or a property of functions) compiled from pytest's or pluggy's
    own files — pytest monkeypatches a few of its classes itself (the legacypath plugin)."""
    funcs = [f for f in (obj.fget, obj.fset) if f is not None] if isinstance(obj, property) else [obj]
    for f in funcs:
        code = getattr(f, "__code__", None)
        if code is None or not os.path.realpath(code.co_filename).startswith(dirs):
            return False
    return bool(funcs)


def changed(table: dict) -> list[str]:
    out = []
    dirs = _harness_dirs()
    for key, (obj, code) in table.items():
        kind, name = key
        if kind == "module":
            now = sys.modules.get(name)
        else:
            ns = builtins if kind == "builtins" else sys.modules.get(kind)
            now = ns
            for part in name.split("."):
                if part in ("fget", "fset") and isinstance(now, property):
                    now = getattr(now, part)
                    continue
                now = vars(now).get(part, _MISSING) if hasattr(now, "__dict__") else _MISSING
                if isinstance(now, (classmethod, staticmethod)):
                    now = now.__func__
        if now is not obj or (code is not None and getattr(now, "__code__", None) is not code):
            if kind not in ("module", "builtins") and _harness_owned(now, dirs):
                continue
            out.append(f"{kind}.{name}" if kind != "module" else f"sys.modules[{name!r}]")
    return out


_MISSING = object()


class Guard:
    """The pytest plugin that checks the harness at session finish and stamps the report."""

    def __init__(self, nonce: str, conftests: list[str], table: dict):
        self.nonce, self.table = nonce, table
        root = os.getcwd()
        self.conftests = {os.path.realpath(os.path.join(root, c)) for c in conftests}
        self.codes = {id(code) for _, code in table.values() if code is not None}

    def _allowed_plugin(self, plugin) -> bool:
        if plugin is self:
            return True
        modname = plugin.__name__ if isinstance(plugin, type(sys)) else type(plugin).__module__
        if isinstance(modname, str) and (modname.startswith("_pytest.") or modname in ("pytest", "_pytest")):
            return True
        f = getattr(plugin, "__file__", None) if isinstance(plugin, type(sys)) else None
        return isinstance(f, str) and os.path.realpath(f) in self.conftests

    def check(self, session) -> list[str]:
        problems = changed(self.table)
        pm = session.config.pluginmanager
        import pluggy._callers as callers

        if getattr(pm, "_inner_hookexec", None) is not callers._multicall:
            problems.append("pluginmanager._inner_hookexec")
        for name in RESULT_HOOKS:
            hook = getattr(pm.hook, name, None)
            if hook is None:
                continue
            for impl in hook.get_hookimpls():
                fn = getattr(impl.function, "__func__", impl.function)
                if not self._allowed_plugin(impl.plugin):
                    problems.append(f"{name} implemented by {impl.plugin_name!r}")
                elif impl.plugin is not self and not self._is_conftest(impl.plugin) \
                        and id(getattr(fn, "__code__", None)) not in self.codes:
                    problems.append(f"{name} implementation of {impl.plugin_name!r} replaced")
        return problems

    def _is_conftest(self, plugin) -> bool:
        f = getattr(plugin, "__file__", None) if isinstance(plugin, type(sys)) else None
        return isinstance(f, str) and os.path.realpath(f) in self.conftests

    def pytest_sessionfinish(self, session):  # tryfirst: before junitxml writes the report
        try:
            problems = self.check(session)
        except Exception as e:  # noqa: BLE001 — a broken harness is a tampered one
            problems = [f"guard failed: {type(e).__name__}: {e}"]
        from _pytest.junitxml import xml_key

        xml = session.config.stash.get(xml_key, None)
        if xml is not None:
            value = f"ok {self.nonce}" if not problems else "tampered: " + "; ".join(problems[:5])
            xml.add_global_property("seqrl_integrity", value)


class Collector:
    """Collect-only plugin: node ids with their JUnit names, and what failed to collect."""

    def __init__(self):
        self.items: list[list[str]] = []
        self.errors: list[list[str]] = []

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors.append([report.nodeid, _junit_names(report.nodeid)[0]])

    def pytest_collection_finish(self, session):
        self.items = [[it.nodeid, *_junit_names(it.nodeid)] for it in session.items]


def _junit_names(nodeid: str) -> tuple[str, str]:
    """The ``(classname, name)`` pytest's junitxml writes for a node id (prefix = classname of a
    file node's tests)."""
    from _pytest.junitxml import bin_xml_escape, mangle_test_address

    names = mangle_test_address(nodeid)
    if len(names) == 1:  # a file or directory node: its tests' classnames start with this
        return bin_xml_escape(names[0]), ""
    return bin_xml_escape(".".join(names[:-1])), bin_xml_escape(names[-1])


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[1])
    args = argv[2:]
    sys.path[:0] = [os.getcwd()]  # as `python -m pytest`: the repository root first
    sys.path.extend(cfg["paths"])
    import pytest

    if cfg["mode"] == "collect":
        col = Collector()
        rc = pytest.main(["--collect-only", "-q", *args], plugins=[col])
        with open(REPORT, "w", encoding="utf-8") as f:
            json.dump({"rc": int(rc), "items": col.items, "errors": col.errors}, f)
        return int(rc)
    table = snapshot()  # before pytest imports any conftest or test module (and so the code under test)
    Guard.pytest_sessionfinish = pytest.hookimpl(tryfirst=True)(Guard.pytest_sessionfinish)
    guard = Guard(cfg["nonce"], cfg.get("conftests", []), table)
    return int(pytest.main([*args, f"--junitxml={REPORT}"], plugins=[guard]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
