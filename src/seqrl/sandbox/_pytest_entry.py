"""Start of a sandboxed pytest run (stdlib + pytest only; no seqrl imports).

Run by `seqrl.rewards.code_agent` inside the sandbox, as the unprivileged uid, as
``python -I -S -B _pytest_entry.py CONFIG PYTEST_ARGS...`` with the repository copy as the
working directory and a report pipe on fd 3. ``CONFIG`` is JSON, or ``@FILE`` (run mode: read and
unlinked before any project code is imported, so the nonce is never in argv) holding ``mode``
(``collect`` or ``run``), ``paths`` (the staged harness: first on ``sys.path``, and the only
directories harness modules may come from), ``nonce``, ``conftests`` (the snapshot's own conftest
files, relative paths) and ``observe`` (where ``__seqrl_observe__`` appends observed values).
pytest, its plugins and the stdlib modules it uses are imported before the work tree is appended
to ``sys.path`` (last).

- ``collect``: ``pytest --collect-only`` on the *pristine* snapshot; writes one JSON object to fd 3:
  the collected node ids with their JUnit ``(classname, name)``, item kind and the identity of the
  function each runs (file, ``co_qualname``: as collected, and unwrapped through ``__wrapped__``),
  the node ids that failed to collect, and the work-tree modules loaded.
- ``pristine``: the same, but the pristine tests are *run*: it also records where each failing test's
  assertion was raised (innermost work-tree frame and its caller) and which work-tree files were
  opened, by which work-tree file (an audit hook), so the parent can protect checking helpers and
  test data that sit outside the protected names.
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

import array
import builtins
import collections
import dataclasses
import datetime
import decimal
import enum
import fractions
import importlib
import json
import os
import sys
import types
import unittest.mock as _mock
import uuid


def _load_codec():
    """`seqrl.sandbox.value_codec`, loaded by path from beside this file (the run has no seqrl to import;
    the reward copies both files) and kept out of ``sys.modules``."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("_seqrl_value_codec", os.path.join(here, "value_codec.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_codec = _load_codec()
_encode_stdlib, _bigint, _escape_tuple = _codec.encode_stdlib, _codec.bigint, _codec.escape_tuple

REPORT = "/dev/fd/3"
_APPROX = None  # pytest's ApproxBase, set in main() once the staged pytest is importable
WATCHED_PREFIXES = ("pytest", "_pytest", "pluggy")  # every loaded module of these packages is watched
WATCHED_EXTRA = ("xml.etree.ElementTree", "doctest", "unittest.case")  # the report writer; how doctests
# and unittest assertions decide
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
        if name not in _MODULE_RECORDS:  # the import system sets those (six's importer sets builtins.__spec__)
            table[("builtins", name)] = (value, None)
    return table


_MODULE_RECORDS = ("__spec__", "__loader__", "__package__", "__doc__", "__name__")


def stdlib_functions() -> dict:
    """``(module, name) → function`` of every function of the loaded standard-library modules (and their
    classes' methods): the tests compute expected values with them (``statistics.mean(xs)``,
    ``json.dumps(obj, sort_keys=True)``), so the code under test must not rebind them."""
    names = set(getattr(sys, "stdlib_module_names", ()))
    out = {}
    for modname, mod in list(sys.modules.items()):
        if mod is None or modname.split(".")[0] not in names or modname in ("__main__", "builtins"):
            continue
        for name, value in list(vars(mod).items()):
            if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
                out[(modname, name)] = value
            elif isinstance(value, type) and getattr(value, "__module__", None) == modname:
                for attr, f in list(vars(value).items()):
                    if isinstance(f, types.FunctionType):
                        out[(modname, f"{name}.{attr}")] = f
    return out


_SIMPLE = (bool, int, float, complex, str, bytes, type(None))


def stdlib_data() -> dict:
    """``(module, name) → value`` of the constants tests compute expected values with: every simple value
    (number, string, None, tuple of those) of ``math``, ``cmath`` and ``string``, upper-case ones of any
    loaded standard-library module, and class attributes of the standard library's Python classes
    (``json.JSONEncoder.item_separator``)."""
    names = set(getattr(sys, "stdlib_module_names", ()))
    out = {}

    def simple(v):
        return type(v) in _SIMPLE or (type(v) is tuple and len(v) < 64 and all(type(x) in _SIMPLE for x in v))

    for modname, mod in list(sys.modules.items()):
        if mod is None or modname.split(".")[0] not in names or modname in ("__main__", "builtins", "sys"):
            continue
        for name, value in list(vars(mod).items()):
            if simple(value) and (modname in ("math", "cmath", "string") or (name.isupper() and name[:1] != "_")):
                out[(modname, name)] = value
            elif isinstance(value, type) and getattr(value, "__module__", None) == modname:
                for attr, v in list(dict(type.__getattribute__(value, "__dict__")).items()):
                    if simple(v) and not attr.startswith("_"):  # public settings only (private state moves)
                        out[(modname, f"{name}.{attr}")] = v
    return out


def stdlib_data_changed(table: dict) -> list[str]:
    out = []
    for (modname, name), was in table.items():
        now = _resolve(sys.modules.get(modname), name)
        if now is _MISSING or type(now) is not type(was) or (now != was and not (now != now and was != was)):
            out.append(f"{modname}.{name} changed")
    return out


def _from_work_tree(value, root: str, before: dict | None = None) -> bool:
    """Whether a value in a standard-library namespace was made by the work tree: a function (or a
    partial, bound method, static/class method of one) compiled there, or an object or class whose
    class's methods were (methods it added to a standard-library class, `_added`, aside)."""
    import functools

    for _ in range(8):
        if isinstance(value, functools.partial):
            value = value.func
        elif isinstance(value, (types.MethodType, staticmethod, classmethod)):
            value = value.__func__
        else:
            break
    if isinstance(value, types.FunctionType):
        f = value.__code__.co_filename
        return os.path.isabs(f) and os.path.realpath(f).startswith(root)
    cls = value if isinstance(value, type) else type(value)
    try:
        members = dict(type.__getattribute__(cls, "__dict__"))
        key = (type.__getattribute__(cls, "__module__"), type.__getattribute__(cls, "__qualname__"))
    except (TypeError, AttributeError):
        return False
    members = [m for name, m in members.items() if not _added(before, key, name)]
    for m in members:
        m = getattr(m, "__func__", m) if isinstance(m, (staticmethod, classmethod)) else m
        if isinstance(m, types.FunctionType):
            f = m.__code__.co_filename
            if os.path.isabs(f) and os.path.realpath(f).startswith(root):
                return True
    return False


def _work_tree_code(value, root: str) -> bool:
    """Whether a callable's code comes from the work tree, or cannot be placed (no code and no builtin):
    what a patch planting a replacement for a standard-library function would leave."""
    if isinstance(value, (types.BuiltinFunctionType, types.BuiltinMethodType)) or value is _MISSING:
        return False
    import functools

    for _ in range(8):
        if isinstance(value, functools.partial):
            inner = value.func
        elif isinstance(value, types.MethodType):
            inner = value.__func__
        else:
            inner = value.__dict__.get("__wrapped__") if isinstance(getattr(value, "__dict__", None), dict) else None
        code = value.__code__ if isinstance(value, types.FunctionType) else None
        if code is not None:  # frozen modules have a relative "<frozen …>" name: never the work tree
            return os.path.isabs(code.co_filename) and os.path.realpath(code.co_filename).startswith(root)
        if inner is None or inner is value:
            return True
        value = inner
    return True


HOOKS = frozenset({"sys.excepthook", "sys.displayhook", "sys.unraisablehook", "sys.breakpointhook",
                   "threading.excepthook", "warnings.showwarning", "warnings.formatwarning"})
"""Standard-library attributes that exist to be set by applications (a package may install its own)."""


def stdlib_names() -> dict:
    """The names each loaded standard-library module, and each of its classes, holds now: a name added
    later is an addition (``logging.Logger.trace``), one that existed is a replacement."""
    std = set(getattr(sys, "stdlib_module_names", ()))
    out: dict = {}
    for modname, mod in list(sys.modules.items()):
        if mod is None or modname.split(".")[0] not in std:
            continue
        out[modname] = frozenset(vars(mod))
        for name, value in list(vars(mod).items()):
            if isinstance(value, type) and getattr(value, "__module__", None) == modname:
                out[(modname, name)] = frozenset(dict(type.__getattribute__(value, "__dict__")))
    return out


def _added(names: dict | None, key, attr: str) -> bool:
    """A name that was not there when the names were taken (and not a dunder, which changes how the
    existing objects behave)."""
    return names is not None and key in names and attr not in names[key] \
        and not (attr.startswith("__") and attr.endswith("__"))


def stdlib_changed(table: dict, root: str, before: dict | None = None) -> list[str]:
    """Standard-library functions replaced by code from the work tree (or by something without code);
    with ``before`` (`stdlib_names`, taken at the start), names the work tree added are not replacements."""
    root = os.path.realpath(root) + os.sep
    out = []
    for (modname, name), orig in table.items():
        if f"{modname}.{name}" in HOOKS:
            continue
        now = _resolve(sys.modules.get(modname), name)
        if now is not orig and now is not _MISSING and _work_tree_code(now, root) and not _test_side_code(now, root):
            out.append(f"{modname}.{name} replaced")
    names = set(getattr(sys, "stdlib_module_names", ()))
    for modname, mod in list(sys.modules.items()):  # modules imported later: no original, but a work-tree
        if mod is None or modname.split(".")[0] not in names or modname in ("__main__", "builtins"):  # function
            continue  # in a standard-library namespace never belongs there
        for name, value in list(vars(mod).items()):
            if (modname, name) not in table and _from_work_tree(value, root, before):
                if not _added(before, modname, name) and f"{modname}.{name}" not in HOOKS:
                    out.append(f"{modname}.{name} replaced")
            elif isinstance(value, type) and getattr(value, "__module__", None) == modname:
                for attr, v in list(dict(type.__getattribute__(value, "__dict__")).items()):
                    if (modname, f"{name}.{attr}") not in table and _from_work_tree(v, root) \
                            and not isinstance(v, type) and not _added(before, (modname, name), attr):
                        out.append(f"{modname}.{name}.{attr} replaced")
    return out


def _resolve(obj, path: str):
    """``obj.a.b`` read through namespaces (``vars``), never through a property or ``__getattr__``."""
    for part in path.split("."):
        try:
            ns = type.__getattribute__(obj, "__dict__") if isinstance(obj, type) else vars(obj)
        except TypeError:
            return _MISSING
        obj = ns.get(part, _MISSING)
        if obj is _MISSING:
            return _MISSING
    return obj


_NO_EARLY_IMPORT = ("antigravity", "this", "idlelib", "turtle", "turtledemo", "tkinter")


def stdlib_used(uses) -> dict:
    """``(module, path) → (value, code)`` of the standard-library callables the test sources read
    (``[module, attribute path]`` from the parent's parse), their modules imported first: taken before
    any project code runs, so whatever the code under test puts there later is seen as a change."""
    names = set(getattr(sys, "stdlib_module_names", ()))
    out = {}
    for mod, path in uses:
        if not isinstance(mod, str) or not isinstance(path, str) or mod.split(".")[0] not in names \
                or mod.split(".")[0] in _NO_EARLY_IMPORT:
            continue
        try:
            m = importlib.import_module(mod)
        except Exception:  # noqa: BLE001 — a module this interpreter lacks: the test fails on it itself
            continue
        v = _resolve(m, path)
        if v is _MISSING or isinstance(v, types.ModuleType) or not (callable(v) or isinstance(v, (classmethod,
                                                                                                 staticmethod))):
            continue  # data (sys.stdout, os.environ) is the harness's to swap; submodules are checked by name
        out[(mod, path)] = (v, v.__code__ if isinstance(v, types.FunctionType) else None)
    return out


def _test_side_code(value, root: str) -> bool:
    """A function compiled from one of the test-side files (`OWN_FILES`, restored from the snapshot): a
    replacement the tests themselves made (a conftest that stubs ``time.sleep``), not the package."""
    code = value.__code__ if isinstance(value, types.FunctionType) else None
    if code is None:
        return False
    real = os.path.realpath(code.co_filename)
    if not (real.startswith(root) and real[len(root):] in OWN_FILES):
        return False
    home = value.__globals__  # a file name is only a string: the function must live in that module too
    f = home.get("__file__") if type(home) is dict else None
    return isinstance(f, str) and os.path.realpath(f) == real and any(
        vars(m) is home for m in list(sys.modules.values()) if m is not None)


def stdlib_used_changed(table: dict, root: str = "") -> list[str]:
    root = os.path.realpath(root or os.getcwd()) + os.sep
    out = []
    for (mod, path), (was, code) in table.items():
        if f"{mod}.{path}" in HOOKS:  # set by applications: a package may install its own
            continue
        now = _resolve(sys.modules.get(mod, _MISSING), path) if sys.modules.get(mod) is not None else _MISSING
        if (now is not was or (code is not None and now.__code__ is not code)) and not _test_side_code(now, root):
            out.append(f"{mod}.{path} (read by the tests) replaced")
    return out


def bindings_changed(bindings: dict, root: str) -> list[str]:
    """Test-side modules whose module-level functions — defined there, or imported by name from another
    test-side file — are no longer those functions (``{file: {name: [file, function, decorated]}}``).
    A decorated one is checked only for presence: a decorator may return anything."""
    root = os.path.realpath(root) + os.sep
    out = []
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if not isinstance(f, str):
            continue
        real = os.path.realpath(f)
        rel = real[len(root):] if real.startswith(root) else None
        if rel not in bindings:
            continue
        for name, (src, fname, decorated) in bindings[rel].items():
            value = _resolve(mod, name)
            value = getattr(value, "__func__", value) if isinstance(value, (staticmethod, classmethod)) else value
            if value is _MISSING:
                out.append(f"test helper {rel}:{name} removed")
                continue
            if decorated:
                continue
            code = getattr(value, "__code__", None) if isinstance(value, types.FunctionType) else None
            if (code is None or os.path.realpath(code.co_filename) != root + src or code.co_qualname != fname) \
                    and not _test_side_code(value, root):
                out.append(f"test helper {rel}:{name} is not the function {src} defines")
    return out


def modules_moved(module_files: dict, root: str) -> list[str]:
    """Modules (test-side ones, and all outside the work tree) that resolve to another file than on
    the snapshot: ``sys.path`` or ``sys.modules`` changed under the tests' imports."""
    root = os.path.realpath(root) + os.sep
    out = []
    for name, want in module_files.items():
        m = sys.modules.get(name)
        if m is None:
            continue
        f = getattr(m, "__file__", None)
        real = os.path.realpath(f) if isinstance(f, str) else "<no file>"
        now = real[len(root):] if real.startswith(root) else real
        if now != want:
            out.append(f"module {name} resolves to {now}, not {want} as on the snapshot")
    return out


HARNESS_DIRS: tuple[str, ...] = ()  # set by main() from the trusted config, never from module attributes
# stdlib modules pytest imports lazily (debugging, doctest, unittest support, config files): imported
# before the work tree is on sys.path, so a same-named file in the patch can never be the one loaded
PREIMPORT = ("argparse", "atexit", "bdb", "code", "codeop", "collections.abc", "contextlib", "dataclasses",
             "datetime", "decimal", "difflib", "doctest", "enum", "errno", "faulthandler", "fnmatch",
             "functools", "gc", "getpass", "glob", "hashlib", "importlib.machinery", "importlib.metadata",
             "importlib.util", "inspect", "io", "itertools", "json", "linecache", "locale", "logging", "math",
             "numbers", "pdb", "pkgutil", "platform", "posixpath", "pprint", "re", "shlex", "shutil", "signal",
             "stat", "string", "subprocess", "tempfile", "textwrap", "threading", "time", "tokenize",
             "tomllib", "traceback", "tracemalloc", "types", "unittest", "unittest.mock", "uuid", "warnings",
             "weakref", "xml.etree.ElementTree")
HARNESS_TOP = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py", "exceptiongroup", "tomli")


def _harness_dirs() -> tuple[str, ...]:
    return HARNESS_DIRS


def preimport() -> None:
    for name in PREIMPORT:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def foreign_modules(root: str) -> list[str]:
    """Loaded stdlib / harness modules whose file is not where the trusted interpreter and the staged
    harness keep them (e.g. a ``textwrap.py`` or ``_pytest/`` from the work tree)."""
    names = set(getattr(sys, "stdlib_module_names", ())) | set(HARNESS_TOP)
    root = os.path.realpath(root) + os.sep
    out = []
    for name, mod in list(sys.modules.items()):
        if name.split(".")[0] not in names or mod is None:
            continue
        f = getattr(mod, "__file__", None)
        spec = getattr(mod, "__spec__", None)
        origin = getattr(spec, "origin", None)
        for path in (f, origin):
            if isinstance(path, str) and os.path.isabs(path) and os.path.realpath(path).startswith(root):
                out.append(f"module {name} loaded from the work tree")
                break
        else:
            if name.split(".")[0] in HARNESS_TOP and isinstance(f, str) \
                    and not os.path.realpath(f).startswith(HARNESS_DIRS):
                out.append(f"module {name} loaded from outside the harness")
    return out


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


def _code_identity(fn, root: str):
    """``[file relative to root, co_qualname]`` of a function's code, or None (no code, or compiled
    outside the work tree)."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None or not isinstance(getattr(code, "co_filename", None), str):
        return None
    path = os.path.realpath(code.co_filename)
    if not path.startswith(os.path.realpath(root) + os.sep):
        return None
    return [os.path.relpath(path, os.path.realpath(root)), code.co_qualname]


def _doctest_digest(item) -> str | None:
    """sha256 of a doctest item's examples (source and expected output) as collected: a module that
    rewrites its own ``__doc__`` at import changes them."""
    import hashlib

    try:
        examples = [(ex.source, ex.want) for ex in item.dtest.examples]
    except Exception:  # noqa: BLE001
        return None
    return hashlib.sha256(repr(examples).encode("utf-8", "backslashreplace")).hexdigest()


def _unwrapped(fn):
    """The function a decorator wrapped (``functools.wraps`` chain), else ``fn``."""
    for _ in range(32):
        fn = getattr(fn, "__func__", fn)
        inner = getattr(fn, "__wrapped__", None)
        if inner is None or inner is fn:
            break
        fn = inner
    return fn


class Guard:
    """The pytest plugin that checks the harness at session finish and stamps the report."""

    def __init__(self, nonce: str, conftests: list[str], table: dict, root: str = "",
                 identities: dict | None = None, doctests: dict | None = None, watch: dict | None = None,
                 baseline=None):
        self.nonce, self.table = nonce, table
        self.baseline = {str(p) for p in baseline or ()}  # what the pristine run's guard found: the snapshot's own
        self.found: list[str] = []
        watch = dict(watch or {})
        self.bindings = {str(k): dict(v) for k, v in dict(watch.get("bindings") or {}).items()}
        self.module_files = {str(k): str(v) for k, v in dict(watch.get("module_files") or {}).items()}
        self.used = stdlib_used(watch.get("stdlib_uses") or [])  # now: before any project code runs
        self.late: list[str] = []  # what the checks after each test found (a change undone later still counts)
        self.entry = {k: id(v) for k, v in vars(sys.modules[__name__]).items()}  # this script's own names
        self.identities = dict(identities or {})  # node id -> pristine [file, qualname] of item.obj
        self.doctests = dict(doctests or {})  # node id -> digest of its pristine examples
        self.root = root or os.getcwd()
        self.conftests = {os.path.realpath(os.path.join(self.root, c)) for c in conftests}
        self.codes = {id(code) for _, code in table.values() if code is not None}
        self.modules = {id(obj) for (kind, _), (obj, _) in table.items() if kind == "module"}
        self.classes = {id(obj) for (kind, _), (obj, _) in table.items() if kind != "builtins" and isinstance(obj, type)}
        self.meta_path, self.path_hooks = list(sys.meta_path), list(sys.path_hooks)
        self.items: dict[str, tuple] = {}

    def _allowed_plugin(self, plugin) -> bool:
        """The guard, a pytest/pluggy module recorded before any project code ran, a class recorded
        then or an instance of one (pytest < 9.2 registers its ``legacypath-tmpdir`` plugin as the class
        itself), or one of the snapshot's own conftest modules."""
        if plugin is self:
            return True
        if isinstance(plugin, type(sys)):
            return id(plugin) in self.modules or self._is_conftest(plugin)
        return id(plugin) in self.classes or id(type(plugin)) in self.classes

    def _hooks_changed(self) -> list[str]:
        from _pytest.assertion.rewrite import AssertionRewritingHook

        out = []
        base = {id(f) for f in self.meta_path}
        for f in sys.meta_path:
            if id(f) not in base and not (type(f) is AssertionRewritingHook and id(type(f)) in self.classes) \
                    and not self._installed_library(type(f)):
                out.append(f"sys.meta_path gained {type(f).__name__}")
        if [id(h) for h in sys.path_hooks] != [id(h) for h in self.path_hooks]:
            out.append("sys.path_hooks changed")
        return out

    def pytest_collection_finish(self, session):
        for it in session.items:
            self.items[it.nodeid] = self._item_identity(it)
        if OWN_FILES:
            record_own_classes()
        self._watch()

    def _watch(self) -> None:
        """What the tests rely on and a test may change for a while: their helpers, the standard-library
        functions they read, the files their imports resolve to. Checked after collection and after
        every test; a change seen once fails the run."""
        try:
            found = bindings_changed(self.bindings, self.root) + stdlib_used_changed(self.used, self.root) \
                + modules_moved(self.module_files, self.root)
        except Exception as e:  # noqa: BLE001 — a check that cannot run is a failed one
            found = [f"watch failed: {type(e).__name__}: {e}"]
        self.late += [p for p in found if p not in self.late]

    def pytest_runtest_logfinish(self, nodeid, location):
        self._watch()

    def _installed_library(self, cls) -> bool:
        """A finder class compiled from files outside the work tree (an installed dependency, e.g.
        transformers' module-alias finder), not one the patch wrote."""
        root = os.path.realpath(self.root) + os.sep
        codes = [getattr(v, "__code__", None) for v in vars(cls).values()]
        files = [c.co_filename for c in codes if c is not None]
        return bool(files) and all(os.path.isabs(f) and not os.path.realpath(f).startswith(root) for f in files)

    def pytest_runtest_logstart(self, nodeid, location):
        CURRENT_TEST[0] = nodeid
        if OBSERVE_FILE and not self._channel_ok():
            self.channel_broken = True

    def _channel_ok(self) -> bool:
        """The observation descriptor still refers to the file opened for it (not /dev/null dup2'ed
        over it by the code under test)."""
        fd, ident = OBSERVE_FILE
        try:
            st = os.fstat(fd)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == ident

    def watch_observer(self, obs) -> None:
        self.observer = (obs, obs.func, obs.func.__code__, obs.func.__defaults__, obs.args,
                         _plain.__code__, _plain.__defaults__)

    def _observer_changed(self) -> list[str]:
        if not getattr(self, "observer", None):
            return []
        obs, func, code, defaults, args, pcode, pdefaults = self.observer
        now = (getattr(builtins, "__seqrl_observe__", None), obs.func, obs.func.__code__, obs.func.__defaults__,
               obs.args, _plain.__code__, _plain.__defaults__)
        was = (obs, func, code, defaults, args, pcode, pdefaults)
        out = [] if all(a is b for a, b in zip(now, was)) else ["the observer was changed"]
        if getattr(self, "channel_broken", False) or (OBSERVE_FILE and not self._channel_ok()):
            out.append("the observation file was replaced")
        return out

    def _item_identity(self, item):
        fn = getattr(item, "obj", None)
        fn = getattr(fn, "__func__", fn)
        code = getattr(fn, "__code__", None)
        return fn, code

    def _items_changed(self, session) -> list[str]:
        from _pytest.python import Function

        out = []
        for it in session.items:
            if type(it).__name__ == "DoctestItem" and it.nodeid in self.doctests:
                if _doctest_digest(it) != self.doctests[it.nodeid]:
                    out.append(f"doctest {it.nodeid}: examples differ from the pristine docstring's")
                continue
            if not isinstance(it, Function):  # other items come from the snapshot's own conftests
                continue
            fn, code = self._item_identity(it)
            shadowed = [k for k, v in vars(it).items() if callable(v) and callable(getattr(type(it), k, None))]
            if shadowed:
                out.append(f"test {it.nodeid}: {', '.join(shadowed[:3])} overridden on the item")
            pristine = self.identities.get(it.nodeid)
            path = os.path.realpath(str(getattr(it, "path", "")))
            if pristine is not None:  # the function the pristine collection found (aliases, inherited tests)
                if _code_identity(fn, self.root) != pristine:
                    out.append(f"test {it.nodeid}: not the function the pristine tests define")
                elif (fn, code) != self.items.get(it.nodeid, (fn, code)):
                    out.append(f"test {it.nodeid}: function replaced after collection")
            elif code is None or os.path.realpath(code.co_filename) != path:
                out.append(f"test {it.nodeid}: function not defined in its test file")
            elif (fn, code) != self.items.get(it.nodeid, (fn, code)):
                out.append(f"test {it.nodeid}: function replaced after collection")
            elif code.co_name != getattr(it, "originalname", code.co_name):
                out.append(f"test {it.nodeid}: function renamed")
        return out

    def check(self, session) -> list[str]:
        self._watch()
        problems = list(self.late)
        now = {k: id(v) for k, v in vars(sys.modules[__name__]).items()}
        problems += [f"the entry's {k} was rebound" for k in sorted(set(now) | set(self.entry))
                     if now.get(k) != self.entry.get(k) and not k.startswith(("pytest_", "__"))][:3]
        problems += changed(self.table)
        problems += stdlib_changed(self.stdlib, self.root, getattr(self, "stdlib_names", None)) \
            if getattr(self, "stdlib", None) else []
        problems += stdlib_data_changed(self.stdlib_data) if getattr(self, "stdlib_data", None) else []
        problems += self._observer_changed()
        problems += foreign_modules(self.root)
        problems += self._hooks_changed()
        problems += self._items_changed(session)
        pm = session.config.pluginmanager
        import pluggy._callers as callers

        if getattr(pm, "_inner_hookexec", None) is not callers._multicall:
            problems.append("pluginmanager._inner_hookexec")
        for plugin in pm.get_plugins():
            if not self._allowed_plugin(plugin):
                problems.append(f"plugin {pm.get_name(plugin)!r} registered")
        for name, hook in list(vars(pm.hook).items()):
            if not hasattr(hook, "get_hookimpls"):
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
            problems = [p for p in self.check(session) if p not in self.baseline]
        except Exception as e:  # noqa: BLE001 — a broken harness is a tampered one
            problems = [f"guard failed: {type(e).__name__}: {e}"]
        self.found = problems
        from _pytest.junitxml import xml_key

        xml = session.config.stash.get(xml_key, None)
        if xml is not None:
            value = f"ok {self.nonce}" if not problems else "tampered: " + "; ".join(problems[:5])
            xml.add_global_property("seqrl_integrity", value)
        if OBSERVE_FILE:  # the end record: without it (or with another count) the parent fails the run
            os.write(OBSERVE_FILE[0], f"end\t{self.nonce}\t{OBSERVED[0]}\n".encode())


class Collector:
    """Collect-only (or pristine-run) plugin: node ids with their JUnit names, kind and function
    identity; what failed to collect; the work-tree modules loaded; when ``record``, the raise sites of
    failing assertions and the files the run opened."""

    def __init__(self, root: str = "", record: bool = False):
        self.root = os.path.realpath(root or os.getcwd())
        self.record = record
        self.items: list[list] = []
        self.errors: list[list[str]] = []
        self.raises: list[list] = []
        self.reads: set[tuple[str, str]] = set()
        self.imports: set[tuple[str, str]] = set()
        self.outcomes: dict[str, str] = {}
        """node id → ``passed``, ``failed`` (any phase) or ``skipped`` (an xfail too), of a pristine run."""

    def pytest_runtest_logreport(self, report):
        was = self.outcomes.get(report.nodeid)
        now = "failed" if report.failed else "skipped" if report.skipped else "passed"
        if was != "failed" and not (was == "skipped" and now == "passed"):  # teardown passes after a skip
            self.outcomes[report.nodeid] = now

    def _rel(self, path) -> str | None:
        if not isinstance(path, str):
            return None
        full = os.path.realpath(path)
        return os.path.relpath(full, self.root) if full.startswith(self.root + os.sep) else None

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors.append([report.nodeid, _junit_names(report.nodeid)[0]])

    def pytest_collection_finish(self, session):
        from _pytest.python import Function

        for it in session.items:
            raw = dfn = None
            if isinstance(it, Function):
                try:
                    obj = it.obj
                    raw, dfn = _code_identity(obj, self.root), _code_identity(_unwrapped(obj), self.root)
                except Exception:  # noqa: BLE001 — an item whose function cannot be read has no identity
                    pass
            doc = _doctest_digest(it) if type(it).__name__ == "DoctestItem" else None
            self.items.append([it.nodeid, *_junit_names(it.nodeid), type(it).__name__, raw, dfn, doc])

    def pytest_runtest_makereport(self, item, call):
        """The work-tree frames (file, line; outermost first) of a failing test's exception: where a
        checking helper decided the failure."""
        if not self.record or call.excinfo is None or call.excinfo.errisinstance(
                (KeyboardInterrupt, SystemExit)) or type(call.excinfo.value).__name__ == "Skipped":
            return
        try:
            frames = [(self._rel(str(e.path)), e.lineno + 1) for e in call.excinfo.traceback]
        except Exception:  # noqa: BLE001
            return
        mine = [[f, line] for f, line in frames if f is not None]
        if mine:
            self.raises.append(mine[-40:])

    def install_read_recorder(self) -> None:
        """An audit hook: every file under the work tree opened (other than source and byte-code),
        with the innermost work-tree file on the stack that opened it."""
        rel, reads, getframe = self._rel, self.reads, sys._getframe
        root = self.root + os.sep

        imports = self.imports

        def hook(event, args):
            if event == "import":
                try:
                    f = getframe(1)
                    while f is not None and (f.f_code.co_filename.startswith("<frozen")
                                             or "importlib" in f.f_code.co_filename):
                        f = f.f_back
                    name = f.f_code.co_filename if f is not None else ""
                    imports.add((str(args[0]), (rel(name) or "") if name.startswith(root) else ""))
                except Exception:  # noqa: BLE001
                    pass
                return
            if event != "open":
                return
            try:
                path = args[0]
                if not isinstance(path, str) or path.endswith((".py", ".pyc")):
                    return
                target = rel(os.path.join(os.getcwd(), path))
                if target is None:
                    return
                f, opener = getframe(1), ""
                while f is not None:
                    name = f.f_code.co_filename
                    if name.startswith(root):
                        opener = rel(name) or ""
                        break
                    f = f.f_back
                reads.add((target, opener))
            except Exception:  # noqa: BLE001 — recording must never change what the tests see
                return

        sys.addaudithook(hook)

    def imported(self) -> list[list[str]]:
        """``[module file, importing work-tree file ("" when pytest or a library imported it)]``."""
        out = set()
        for name, importer in self.imports:
            r = self._rel(getattr(sys.modules.get(name), "__file__", None))
            if r is not None:
                out.add((r, importer))
        return [list(x) for x in sorted(out)]

    def module_files(self) -> dict[str, str]:
        """Every loaded module's file: relative inside the work tree, absolute outside (``__main__``,
        the entry script, left out)."""
        out = {}
        for name, m in list(sys.modules.items()):
            f = getattr(m, "__file__", None)
            if name.startswith("__") or not isinstance(f, str):  # __main__, __mp_main__: the entry itself
                continue
            out[name] = self._rel(f) or os.path.realpath(f)
        return out

    def modules(self) -> list[str]:
        out = set()
        for m in list(sys.modules.values()):
            r = self._rel(getattr(m, "__file__", None))
            if r is not None:
                out.add(r)
        return sorted(out)


def _junit_names(nodeid: str) -> tuple[str, str]:
    """The ``(classname, name)`` pytest's junitxml writes for a node id (prefix = classname of a
    file node's tests)."""
    from _pytest.junitxml import bin_xml_escape, mangle_test_address

    names = mangle_test_address(nodeid)
    if len(names) == 1:  # a file or directory node: its tests' classnames start with this
        return bin_xml_escape(names[0]), ""
    return bin_xml_escape(".".join(names[:-1])), bin_xml_escape(names[-1])


def _plain(x, depth: int = 0):
    """A plain copy of an observed value, else TypeError. Read through the base types' own methods
    (``float.__float__``, ``list.__iter__`` …) on ``type(x)``, never the value's overridable ones, so a
    subclass with a forged ``__eq__`` / ``__float__`` / ``__iter__`` hands out its real contents.
    Subclasses of the plain types (str/int enums, named tuples, numpy numbers) become their base
    type, as ``==`` would mostly treat them; other enums, dataclasses and a few stdlib value types
    become tagged tuples. Whatever a conversion returns, only the expected value — which is not here
    — can make it count."""
    if depth > 100:
        raise TypeError("too deep")
    t = type(x)
    if t is _mock._Call:  # a mock call: its name, arguments and keywords as plain data, rebuilt by the parent
        parts = tuple.__iter__(x)
        parts = list(parts)
        name, args, kwargs = (parts if len(parts) == 3 else ["", *parts]) if len(parts) in (2, 3) else (None, (), {})
        if name is None or not isinstance(args, tuple) or not isinstance(kwargs, dict):
            raise TypeError("call")
        return ("<call>", str(name), _plain(args, depth + 1), _plain(dict(kwargs), depth + 1))
    if t is _mock._CallList:  # sub-list containment (`[call.a(), call.b()] in m.mock_calls`): rebuilt as one
        return ("<calllist>", [_plain(v, depth + 1) for v in list.__iter__(x)])
    if str(t.__module__).startswith("unittest.mock"):  # Mock objects, sentinels: by identity where they
        if _identity_only(t):  # compare by identity; a configured MagicMock (__eq__ …) is not plain
            return ("<id>", id(x))
        raise TypeError(t.__name__)
    if _APPROX is not None and issubclass(t, _APPROX):  # pytest.approx objects the tests made (recorded)
        if id(x) not in APPROX_MADE:
            raise TypeError("an approx object the tests did not make")
        return ("<approx>", _plain(x.expected, depth + 1), _plain(x.rel, depth + 1), _plain(x.abs, depth + 1),
                bool(x.nan_ok))
    if t not in (bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset) and _own_comparison(t):
        raise TypeError(f"{t.__qualname__}: a test class with its own comparison")  # the test's to decide
    if t not in _PLAIN_EXACT and _package_comparison(t):  # boltons' OrderedMultiDict(dict): its __eq__ is its own
        raise TypeError(f"{t.__qualname__}: a subclass of a plain type with its own comparison")
    if issubclass(t, int) and (big := _bigint(x)) is not None:  # past repr's digit limit: hex (linear), tagged
        return big
    if x is None or t in (bool, int, float, complex, str, bytes):
        return x
    if issubclass(t, int):  # bool cannot be subclassed; IntEnum, IntFlag …
        return int.__index__(x)
    if issubclass(t, float):
        return float.__float__(x)
    if issubclass(t, complex):
        return complex.__complex__(x)
    if issubclass(t, str):
        return str.__str__(x)
    if issubclass(t, (bytes, bytearray)):
        return bytes.__bytes__(x) if issubclass(t, bytes) else bytes(bytearray.__iter__(x))
    if issubclass(t, type):  # `type(x) == int`, `excinfo.type == ValueError`
        return ("<type>", str(type.__getattribute__(x, "__module__")), str(type.__getattribute__(x, "__qualname__")),
                id(x))  # identity: a class named like int is not int (ids compare within this one run)
    if issubclass(t, enum.Enum):
        return ("<enum>", t.__module__, t.__qualname__, id(x))  # members are singletons: identity is equality
    if issubclass(t, (list, tuple)):
        items = [_plain(v, depth + 1) for v in (list.__iter__(x) if issubclass(t, list) else tuple.__iter__(x))]
        return items if issubclass(t, list) else _escape_tuple(items)
    if dataclasses.is_dataclass(t) and type.__getattribute__(t, "__eq__") is not object.__eq__:
        fields = _dataclass_fields(t)
        if fields is None:
            raise TypeError(f"dataclass {t.__qualname__}: its field table differs from its source")
        return ("<dataclass>", t.__module__, t.__qualname__,
                tuple((n, _plain(object.__getattribute__(x, n), depth + 1)) for n in fields))
    got = _encode_stdlib(x, t, lambda v: _plain(v, depth + 1))  # sets, ordered dicts, dates, decimals …
    if got is not None:
        return got
    if issubclass(t, dict):
        return {_plain(k, depth + 1): _plain(v, depth + 1) for k, v in dict.items(x)}
    if t in (type({}.values()), array.array, collections.UserList) or issubclass(t, collections.UserList):
        return [_plain(v, depth + 1) for v in list(x)]
    if issubclass(t, (collections.UserDict, collections.ChainMap)):
        return {_plain(k, depth + 1): _plain(v, depth + 1) for k, v in dict(x).items()}
    if issubclass(t, memoryview):
        return bytes(x)
    np = sys.modules.get("numpy")
    if np is not None and not _from_work_tree(np.ndarray, os.getcwd()) and issubclass(t, (np.ndarray, np.generic)) \
            and str(type.__getattribute__(t, "__module__")).split(".")[0] == "numpy":
        # numpy's own types only (a class registered as a number, or named numpy, converts as it likes)
        return _plain(np.ndarray.tolist(x) if issubclass(t, np.ndarray) else np.generic.item(x), depth + 1)
    if _identity_only(t):  # compared by identity (sentinels, exceptions, classes without comparisons)
        return ("<id>", id(x))
    raise TypeError(t.__name__)


DATACLASS_FIELDS: dict = {}
"""``"file:qualname"`` → the compared field names of the dataclasses the snapshot's sources define (the
parent's parse): the field table an instance is read by, not the class's own, which code can change."""


def _dataclass_fields(t) -> list[str] | None:
    """The compared fields of dataclass `t` (``compare=False`` ones are the class's to leave out): from
    the snapshot's source where it defines the class, else from the class's table (a class the patch
    adds); None when the table disagrees with the source."""
    mod = sys.modules.get(str(type.__getattribute__(t, "__module__")))
    f = getattr(mod, "__file__", None) if mod is not None else None
    root = os.path.realpath(os.getcwd()) + os.sep
    real = os.path.realpath(f) if isinstance(f, str) else ""
    key = f"{real[len(root):]}:{type.__getattribute__(t, '__qualname__')}" if real.startswith(root) else None
    table = type.__getattribute__(t, "__dict__").get("__dataclass_fields__")
    if not isinstance(table, dict):
        table = getattr(t, "__dataclass_fields__", None)
    if type(table) is not dict:
        return None
    runtime = [n for n, fd in dict.items(table) if type(fd) is dataclasses.Field
               and fd._field_type is dataclasses._FIELD and fd.compare]
    source = DATACLASS_FIELDS.get(key) if key else None
    if source is None:
        return runtime
    return list(source) if set(source) <= set(dict.keys(table)) else None


_COMPARING = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__contains__", "__iter__", "__len__",
              "__getitem__")


def _identity_only(t) -> bool:
    """Whether instances of `t` compare by identity and nothing else: ``==`` is object's, and no order,
    containment or iteration (an id says nothing about those)."""
    for name in _COMPARING:
        try:
            v = type.__getattribute__(t, name)
        except AttributeError:
            continue
        if v is not getattr(object, name, None):
            return False
    return True


OBSERVED = [0]
"""Observation lines written: the guard's end record says how many, so a cut channel is seen outside."""
OBSERVE_FILE: list = []
"""The observation file's descriptor and (device, inode): the guard checks it still points there."""
CURRENT_TEST = [""]
"""Node id of the test running now (set by the guard at each test's start): observations carry it."""


_OPS = {"Eq": lambda a, b: a == b, "NotEq": lambda a, b: a != b, "Lt": lambda a, b: a < b,
        "LtE": lambda a, b: a <= b, "Gt": lambda a, b: a > b, "GtE": lambda a, b: a >= b,
        "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b}
MAX_PAIRS = 100_000


def _observe(fd, write, plain, rep, current, ops, own, honest, nearby, written, k, value, check=None,
             fallback=None, quant=None, pool=()):
    """One observation line ``K<TAB>NODE<TAB>LEN<TAB>TEXT``: TEXT is the repr of the leaves' plain
    values; ``!`` when one is not plain data; ``~True``/``~False`` — pytest's own verdict, `check`
    evaluated here — only where the parent allowed it (`fallback`: every leaf, or an ``in``'s container,
    is not plain data) and every such value's class is one the test modules define (`own`: recorded
    after collection, never the package's); for ``all()``/``any()`` (`quant`: mode and operator) the
    pairs consumed, lazily, until the answer is known, and whether the iterable ran out; ``~R`` where the
    comparison raised what pytest's own would have raised into the test (`_Propagate`), which is then
    raised there."""
    propagate = None
    try:
        if quant is not None:
            mode, op = quant
            fn, pairs, done = ops[op], [], True
            for a, b in value[0]:  # the generator of (left, right) pairs
                pa, pb = plain(a), plain(b)
                pairs.append((pa, pb))
                # any(): stop at the first pair equal as plain values; all() reads to the end (a tag
                # compared here, e.g. approx or Decimal, could look false where the parent finds it true)
                if (mode == "any" and bool(fn(pa, pb))) or len(pairs) >= MAX_PAIRS:
                    done = False
                    break
            text = rep(((pairs, done),))
        else:
            leaves, opaque = [], []
            for v in value:
                try:
                    leaves.append(plain(v))
                except Exception:  # noqa: BLE001
                    leaves.append(None)
                    opaque.append(True)
                    continue
                opaque.append(False)
            if not any(opaque):
                text = rep(tuple(leaves))
            elif check is not None and isinstance(fallback, str) and fallback.startswith("cand"):
                side = check(value)  # compared with a literal this run never sees: answers for the whole pool
                text = "~C" + rep(_candidates(side, pool, fallback[4] == "L", fallback[5] == "<")) \
                    if own(side) or honest(side) else "!"
            elif check is not None and isinstance(fallback, str) and fallback.startswith("pair"):
                op, negated = fallback[4:].rstrip("!"), fallback.endswith("!")
                got = _pair_verdict(*check(value), plain, own, honest, nearby, op)  # computed once
                text = "!" if got is None else "~True" if got != negated else "~False"
            elif check is not None and isinstance(fallback, str) and fallback.startswith(("in", "notin")):
                negated = fallback.startswith("notin")
                index = int(fallback[5 if negated else 2:])  # the container's leaf
                if not check(value):
                    text = "~False"
                elif negated:
                    text = "~True"  # a claim of non-membership needs no probe (as one of inequality)
                else:
                    text = "~True" if _verdict_allowed(value, opaque, index, own, honest, nearby) else "!"
            elif check is not None and fallback is not None and _verdict_allowed(value, opaque, fallback, own,
                                                                                  honest, nearby):
                text = "~True" if check(value) else "~False"
            else:
                text = "!"
    except _Propagate as p:
        text, propagate = "~R", p.original
    except Exception:  # noqa: BLE001 — an unrepresentable value equals nothing
        text = "!"
    node = current[0].replace("\t", " ").replace("\n", " ")
    write(fd, f"{int(k)}\t{node}\t{len(text)}\t{text}\n".encode("utf-8", "backslashreplace"))
    written[0] += 1
    if propagate is not None:
        raise propagate


class _Propagate(Exception):
    """A comparison's own exception that the test must see, as the assert pytest ran would have raised it."""

    def __init__(self, original: BaseException):
        super().__init__(original)
        self.original = original


_CONTAINERS = (list, tuple, dict, set, frozenset)


def _cyclic_plain(value, limit: int = 100_000) -> bool:
    """Whether `value` is a structure of exact built-in containers that holds itself (a list appended to
    itself) and whose other leaves are all plain data: comparing two such structures recurses in the
    built-in comparison alone, so its RecursionError is the structures' own."""
    cyclic, on_path, done, steps = False, set(), set(), 0
    stack = [(value, False)]
    while stack:
        x, leaving = stack.pop()
        if leaving:
            on_path.discard(id(x))
            done.add(id(x))
            continue
        steps += 1
        if steps > limit:
            return False
        if type(x) not in _CONTAINERS:
            try:
                _plain(x)
            except Exception:  # noqa: BLE001 — an object whose comparison is its own
                return False
            continue
        if id(x) in on_path:
            cyclic = True
            continue
        if id(x) in done:
            continue
        on_path.add(id(x))
        stack.append((x, True))
        stack.extend((v, False) for v in _base_elements(x))
    return cyclic


_PROBE = type(f"_{uuid.uuid4().hex}", (), {"__slots__": ()})
"""A class made for this run alone: nothing the code under test wrote can know it."""


def _base_elements(value) -> list | None:
    """The elements of a value on a built-in container base, read through the base type's own methods
    (a dict's keys and values, flat), or None for any other value."""
    t = type(value)
    if issubclass(t, (list, tuple)):
        return list(list.__iter__(value) if issubclass(t, list) else tuple.__iter__(value))
    if issubclass(t, (set, frozenset)):
        return list(set.__iter__(value) if issubclass(t, set) else frozenset.__iter__(value))
    if issubclass(t, dict):
        return [x for kv in dict.items(value) for x in kv]
    return None


def _honest(value, depth: int = 0) -> bool:
    """Whether a value's comparisons pass the probes a lying ``__eq__`` fails: not equal, and not
    ``!=``-equal, to a fresh object of an unrelated class (raising there counts as not equal); a
    built-in container's elements that are not plain data pass them too (a list compares its elements
    with their own ``__eq__``). Where they pass, a comparison of such values (``Version("1.0") ==
    parse("1.0")``) is pytest's to decide. Equality with itself is not asked: an ``__eq__`` that reads
    both sides (a file-like comparing its lines) or a tracing proxy is honestly not reflexive, and a
    claim of inequality needs no probe."""
    items = _base_elements(value)
    if items is not None:
        if depth > 20 or len(items) > 10_000:
            return False
        for x in items:
            try:
                _plain(x)
            except Exception:  # noqa: BLE001
                if not _honest(x, depth + 1):
                    return False
    probe = _PROBE()
    for test in (lambda: value == probe, lambda: probe == value):
        try:
            if test() is not False:
                return False
        except Exception:  # noqa: BLE001 — an __eq__ that reads the other's fields: not a lie
            continue
    try:
        return (value != probe) is not False
    except Exception:  # noqa: BLE001
        return True


def _verdict_allowed(value, opaque, fallback, own, honest, nearby) -> bool:
    """Whether pytest's verdict may stand for a check whose leaves are not all plain data (`fallback`, the
    parent's policy): ``all`` — every leaf an object of the tests' classes or passing the probes; an
    index — an ``in``'s container, of the tests' classes only."""
    if fallback == "all":
        return all(opaque) and all(own(v) or honest(v) for v, o in zip(value, opaque) if o)
    if not isinstance(fallback, int) or not opaque[fallback]:
        return False
    box = value[fallback]  # an `in`'s container: its own class's, or holding no fresh unrelated object
    if not (own(box) or (_contains_honestly(box) and (type(box) not in (list, tuple, set, frozenset, dict)
                                                      or honest(box)))):
        return False
    return all(own(v) or honest(v) for i, (v, o) in enumerate(zip(value, opaque)) if o and i != fallback)


def _contains_honestly(container) -> bool:
    """A container whose class defines ``__contains__`` (``in`` then iterates nothing) and that does not
    contain a fresh object of an unrelated class (raising there counts as not containing it)."""
    try:
        type.__getattribute__(type(container), "__contains__")
    except AttributeError:
        return False
    try:
        return (_PROBE() in container) is False
    except Exception:  # noqa: BLE001 — a sorted container that cannot order the probe
        return True


_VALUE_TYPES = (datetime.timedelta, datetime.date, datetime.datetime, decimal.Decimal, fractions.Fraction)
"""Standard-library value types the observer tags (their plain copy is a tagged tuple): compared as
themselves, with `_nearby`'s values next to them."""

_SYMBOL_OPS = {"==": lambda a, b: a == b, "!=": lambda a, b: not (a == b), "<": lambda a, b: a < b,
               "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def _pair_verdict(a, b, plain, own, honest, nearby, op="=="):
    """``a OP b`` decided in the run, or None where pytest's verdict may not stand: an object that is not
    plain data must be of the tests' classes or pass the probes; one compared with a plain value (the
    test's literal, or a value it computed) must pass `nearby`'s probes against that value, which also
    makes the comparison itself among them; an order that says it holds must say exactly one of <, ==, >. A plain side is
    replaced by its plain copy (its class's own methods never run); a tagged one is itself where its type
    is exactly a standard-library value type (a ``timedelta``: its methods are the library's), else not
    compared."""
    def copy(v):
        try:
            p = plain(v)
        except Exception:  # noqa: BLE001
            return _MISSING
        if isinstance(p, tuple) and p and isinstance(p[0], str) and p[0].startswith("<"):
            return v if type(v) in _VALUE_TYPES else _MISSING
        return p

    ca, cb = copy(a), copy(b)
    order = op not in ("==", "!=")
    if ca is not _MISSING and cb is not _MISSING:
        sides = (ca, cb)
    elif ca is _MISSING and cb is _MISSING:
        sides = (a, b)
        if not order:  # a claim of inequality needs no probe; one of equality needs both sides' probes
            try:
                equal = (a == b) is True
            except RecursionError as e:  # two self-holding lists: the test's own pytest.raises awaits it
                if _cyclic_plain(a) and _cyclic_plain(b):
                    raise _Propagate(e) from None
                return None
            except Exception:  # noqa: BLE001
                return None
            if equal and not ((own(a) or honest(a)) and (own(b) or honest(b))):
                return None
            return equal != (op == "!=")
        if not ((own(a) or honest(a)) and (own(b) or honest(b))):
            return None
    else:
        value, w, left = (a, cb, True) if ca is _MISSING else (b, ca, False)
        if not own(value):
            return nearby(value, w, op, left) if honest(value) else None
        sides = (a, cb) if left else (ca, b)
    if order:
        return _order_verdict(op, _order3(*sides))
    return bool(_SYMBOL_OPS[op](*sides))


def _nearby(w) -> list:
    """Plain values of ``w``'s exact type next to it: an honest object equal to ``w`` equals none of
    them, one that equals every value of the type (or every value shaped like ``w``) does. Never a
    prefix of ``w``: packages let ``Version(1, 0, 0) == (1, 0)``."""
    t = type(w)
    out = []
    try:
        if t is bool:
            out = [not w]
        elif t in (int, decimal.Decimal, fractions.Fraction) or (t is float and w - w == 0):
            out = [w + 1, w - 1]
        elif t is complex:
            out = [w + 1, w - 1j]
        elif t in (str, bytes):
            z = "\x00" if t is str else b"\x00"
            out = [w + z, z + w]
        elif t in (list, tuple):  # one element more; the first one replaced by an object of no known class
            out = [w + t([_PROBE()])] + ([t([_PROBE()]) + w[1:]] if w else [])
        elif t is dict:
            out = [{**w, _PROBE(): 0}]  # a key more (a mapping's equality may read keys alone)
        elif t in (set, frozenset):
            out = [w | {_PROBE()}]
        elif t in (datetime.timedelta, datetime.date, datetime.datetime):  # a day either way
            day = datetime.timedelta(days=1)
            out = [w + day, w - day] if t is datetime.timedelta or 1 < w.year < 9999 else \
                [w - day if w.year > 1 else w + day]
    except Exception:  # noqa: BLE001
        return []
    return out


_URANDOM = os.urandom
"""Bound before any project code runs: the probes' order comes from the kernel, not from state the
code under test can seed."""


def _shuffle(items: list) -> None:
    """Fisher-Yates from ``os.urandom`` as bound at import."""
    for i in range(len(items) - 1, 0, -1):
        j = int.from_bytes(_URANDOM(4), "little") % (i + 1)
        items[i], items[j] = items[j], items[i]


def _order3(x, y) -> tuple[bool, bool, bool] | None:
    """(``x < y``, ``x == y``, ``x > y``), each ``is True``; None where one raised."""
    try:
        return (x < y) is True, (x == y) is True, (x > y) is True
    except Exception:  # noqa: BLE001
        return None


def _order_verdict(op: str, got: tuple[bool, bool, bool] | None) -> bool | None:
    """``OP`` from `_order3`'s answers, or None where one raised or the order says it holds without
    saying exactly one of ``<``, ``==``, ``>`` (an order that says yes to everything); a claim that it
    does not hold needs nothing more (sets are not totally ordered)."""
    if got is None:
        return None
    lt, eq, gt = got
    r = {"<": lt, "<=": lt or eq, ">": gt, ">=": gt or eq}[op]
    return None if r and sum(got) != 1 else r


def _equal(value, x, value_left: bool) -> bool:
    """``value == x`` in the test's own order (``x == value`` unless `value_left`); raising counts as not
    equal."""
    try:
        return (value == x) is True if value_left else (x == value) is True
    except Exception:  # noqa: BLE001
        return False


def _distinguishes_nearby(value, w, op="==", value_left=True):
    """``value OP w`` (``w OP value`` unless `value_left`) for a `value` that is not plain data and a
    plain `w` the run computed, or None where `value` equals ``w`` and a value next to it too
    (``_nearby``; raising counts as not equal) or, for an order, not exactly one of ``<``, ``==``,
    ``>`` holds. The
    comparison itself is one of the calls, made in a random order from one place."""
    near = _nearby(w)
    if not near:
        return None
    calls = [(False, x) for x in near] + [(True, w)]
    _shuffle(calls)
    real = got = None
    near_equal = False
    for is_real, x in calls:
        if is_real and op not in ("==", "!="):
            got = _order3(value, x) if value_left else _order3(x, value)  # the test's left against its right
            continue
        eq = _equal(value, x, value_left)
        if is_real:
            real = eq
        else:
            near_equal = near_equal or eq
    if (real or (got is not None and got[1])) and near_equal:  # a claim of equality stands on the probes
        return None
    if op in ("==", "!="):
        return real != (op == "!=")
    return _order_verdict(op, got)


def _candidates(value, pool, value_left: bool, order: bool) -> list:
    """``[(equal, order, near)...]`` per pool entry — `value` (not plain data) against each entry and the
    values next to it, every call made in one random order from one place: the literal is one of the
    entries, and which one is known only outside (`Candidates`). ``order`` is `_order3` of the test's
    left side against its right (orders only; None where a comparison raised)."""
    entries = list(pool) if type(pool) is tuple else []
    calls = [(i, "eq", x) for i, x in enumerate(entries)]
    calls += [(i, "near", n) for i, x in enumerate(entries) for n in _nearby(x)]
    if order:
        calls += [(i, "sign", x) for i, x in enumerate(entries)]
    _shuffle(calls)
    answers = [[False, None, []] for _ in entries]
    for i, kind, x in calls:
        if kind == "eq":
            answers[i][0] = _equal(value, x, value_left)
        elif kind == "near":
            answers[i][2].append(_equal(value, x, value_left))
        else:  # the test's left side against its right
            answers[i][1] = _order3(value, x) if value_left else _order3(x, value)
    return [(a, o, tuple(n)) for a, o, n in answers]


OWN_CLASSES: dict = {}
"""id → (class, its comparison methods) of the classes the test modules define, recorded by the guard
once collection imported them: the only non-plain values whose comparison pytest decides."""
OWN_FILES: list = []
APPROX_MADE: dict = {}
"""id → approx object of the ``pytest.approx`` objects test-side code made (the only ones rebuilt here)."""


OWN_NAMES: dict = {}
"""test file (relative) → qualnames of the classes its source defines (from the parent's parse)."""
OWN_MODULES: dict = {}
"""id(module) → (module, {name: id(value)}) of the test modules at collection: rebinding a name there
(a helper the tests' __eq__ calls, an expected value) withdraws pytest's verdict."""


def _class_state(cls) -> tuple:
    """Everything a class's comparisons could depend on: its namespace (values by identity) and metaclass."""
    return (type(cls), tuple(sorted((k, id(v)) for k, v in dict(type.__getattribute__(cls, "__dict__")).items())))


def record_own_classes() -> None:
    """The classes the loaded test-side modules define — named in the file's own source (`OWN_NAMES`),
    their methods compiled from that file — with their namespaces as they are now."""
    root = os.path.realpath(os.getcwd()) + os.sep
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if not isinstance(f, str):
            continue
        path = os.path.realpath(f)
        rel = os.path.relpath(path, root) if path.startswith(root) else None
        if rel not in OWN_NAMES:
            continue
        names = set(OWN_NAMES[rel])
        OWN_MODULES[id(mod)] = (mod, {k: id(v) for k, v in list(vars(mod).items())})

        def add(cls, depth=0):
            if id(cls) in OWN_CLASSES or depth > 5:
                return
            ns = dict(type.__getattribute__(cls, "__dict__"))
            if type.__getattribute__(cls, "__module__") != mod.__name__ \
                    or type.__getattribute__(cls, "__qualname__") not in names:
                return
            for v in ns.values():
                fn = getattr(v, "__func__", v)
                code = getattr(fn, "__code__", None) if isinstance(fn, types.FunctionType) else None
                if code is not None and os.path.realpath(code.co_filename) != path:
                    return  # a method compiled elsewhere: not the test file's class
            OWN_CLASSES[id(cls)] = (cls, _class_state(cls), id(mod))
            for v in ns.values():
                if isinstance(v, type):
                    add(v, depth + 1)

        for v in list(vars(mod).values()):
            if isinstance(v, type):
                add(v)


def _own_class(cls) -> bool:
    """Every class of `cls`'s MRO (but object) is a recorded test class whose namespace, and whose
    module's names, are unchanged since collection (a test class on a package base, a patched
    ``__eq__`` / ``__getattribute__`` / helper, is the package's to decide)."""
    for base in type.__getattribute__(cls, "__mro__"):
        if base is object or (base is not cls and _IMMUTABLE_TYPE & type.__getattribute__(base, "__flags__")
                              and base.__module__ in _BUILTIN_HOMES):
            continue  # a built-in base nothing can patch (a test's own dict or defaultdict subclass)
        rec = OWN_CLASSES.get(id(base))
        if rec is None or rec[0] is not base or _class_state(base) != rec[1]:
            return False
        mod, names = OWN_MODULES.get(rec[2], (None, None))
        if mod is None or {k: id(v) for k, v in list(vars(mod).items())} != names:
            return False
    return True


_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: a C type whose methods cannot be replaced
_BUILTIN_HOMES = ("builtins", "collections")


def _own_comparison(t) -> bool:
    """Whether a class the tests define gives itself a comparison (``__eq__`` …) on a built-in base: its
    values are the test's to compare, not the base type's plain data."""
    for base in type.__getattribute__(t, "__mro__")[:-1]:
        if id(base) in OWN_CLASSES and any(n in type.__getattribute__(base, "__dict__") for n in _COMPARING[:6]):
            return _own_class(t)
    return False


_PLAIN_EXACT = frozenset({bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset,
                          type(None)})
_PLAIN_BASES = (int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset)


def _package_comparison(t) -> bool:
    """A class outside the standard library (numpy's own aside) on a plain base that defines a comparison
    of its own: its contents are not what it compares (a multi-dict storing lists), so it is not plain
    data — its comparisons stand on the probes like any package object's."""
    if not issubclass(t, _PLAIN_BASES):
        return False
    for base in type.__getattribute__(t, "__mro__"):
        if base in _PLAIN_EXACT or base is object:
            return False
        module = str(type.__getattribute__(base, "__module__")).split(".")[0]
        if module in sys.stdlib_module_names or module == "numpy":
            continue
        if any(n in type.__getattribute__(base, "__dict__") for n in _COMPARING[:6]):
            return True
    return False


def _own(value, depth: int = 0) -> bool:
    """A value of a recorded test class whose fields (and, on a built-in container base, whose items)
    are exact plain values or such values again: pytest's own verdict on it cannot be bent by an
    always-equal field the package put there."""
    if depth > 20 or not _own_class(type(value)):
        return False
    items = _base_elements(value) or []
    if len(items) > 10_000 or not all(_exact_plain(x, depth + 1) for x in items):
        return False
    try:
        fields = list(dict.values(object.__getattribute__(value, "__dict__")))
    except (AttributeError, TypeError):
        fields = []
    for base in type.__getattribute__(type(value), "__mro__"):  # __slots__ fields too
        slots = dict(type.__getattribute__(base, "__dict__")).get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            try:
                fields.append(object.__getattribute__(value, name))
            except AttributeError:
                continue
    return all(_exact_plain(v, depth + 1) for v in fields)


def _exact_plain(v, depth: int) -> bool:
    t = type(v)
    if v is None or t in (bool, int, float, complex, str, bytes):
        return True
    if t in (list, tuple, set, frozenset):
        return len(v) <= 10_000 and all(_exact_plain(x, depth + 1) for x in v)
    if t is dict:
        return len(v) <= 10_000 and all(_exact_plain(k, depth + 1) and _exact_plain(x, depth + 1) for k, x in v.items())
    return _own(v, depth)


def wrap_approx() -> None:
    """``pytest.approx`` records the objects that test-side code makes (its caller's file is one of
    `OWN_FILES`): an approx object the code under test builds or returns is not one of them."""
    import _pytest.approx as _approx_module

    real = getattr(_approx_module, "approx", None)
    if real is None:
        return
    root = os.path.realpath(os.getcwd()) + os.sep

    def approx(*args, **kwargs):
        made = real(*args, **kwargs)
        caller = sys._getframe(1).f_code.co_filename
        rel = os.path.relpath(os.path.realpath(caller), root) if os.path.realpath(caller).startswith(root) else ""
        if rel in OWN_FILES:
            APPROX_MADE[id(made)] = made  # kept alive: the id is never reused
        return made

    approx.__doc__, approx.__wrapped__ = real.__doc__, real
    import pytest as _pytest_pkg

    _approx_module.approx = approx
    _pytest_pkg.approx = approx


def install_observer(path: str, own_files: list[str] = (), own_names: dict | None = None):
    """``__seqrl_observe__(k, value)`` (the rewritten test files call it): one ``K<TAB>NODE<TAB>repr``
    line per observation, appended to a file the parent reads and checks against what it kept. A
    ``functools.partial`` whose function and bound helpers are fixed now (a partial's ``func`` and
    ``args`` cannot be reassigned); the guard checks at session finish that the function's code and
    defaults are still the ones installed. Returns the observer."""
    import functools

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    OWN_FILES[:] = list(own_files)
    OWN_NAMES.update({str(k): list(v) for k, v in dict(own_names or {}).items()})
    obs = functools.partial(_observe, fd, os.write, _plain, repr, CURRENT_TEST, dict(_OPS), _own, _honest,
                            _distinguishes_nearby, OBSERVED)
    st = os.fstat(fd)
    OBSERVE_FILE[:] = [fd, (st.st_dev, st.st_ino)]
    builtins.__seqrl_observe__ = obs
    return obs


def read_config(arg: str) -> dict:
    """The run's configuration: inline JSON (collect mode) or ``@FILE``, a file the sandbox uid owns,
    read and unlinked here before any project code is imported (so the nonce is not in argv)."""
    if not arg.startswith("@"):
        return json.loads(arg)
    with open(arg[1:], encoding="utf-8") as f:
        cfg = json.load(f)
    os.unlink(arg[1:])
    return cfg


def main(argv: list[str]) -> int:
    global HARNESS_DIRS
    cfg = read_config(argv[1])
    argv[1] = "@"
    args = argv[2:]
    HARNESS_DIRS = tuple(os.path.realpath(p) + os.sep for p in cfg["paths"])
    sys.path[:0] = list(cfg["paths"])  # the harness before anything else
    import pytest

    preimport()
    watched_modules()
    global _APPROX
    try:  # the base class of pytest.approx's objects (pytest.Approx; ApproxBase before pytest 9)
        _APPROX = getattr(pytest, "Approx", None) or importlib.import_module("_pytest.python_api").ApproxBase
    except (ImportError, AttributeError):
        _APPROX = None
    DATACLASS_FIELDS.update({str(k): [str(n) for n in v] for k, v in dict(cfg.get("dataclass_fields") or {}).items()})
    observer = install_observer(cfg["observe"], cfg.get("own_files", []), cfg.get("own_names")) \
        if cfg.get("observe") else None
    if observer is not None:
        wrap_approx()  # before the guard's snapshot: the wrapper is what it watches
    sys.path.append(os.getcwd())  # the work tree last: it can add modules, never shadow one

    table = snapshot()  # before pytest imports any conftest or test module (and so the code under test)
    Guard.pytest_sessionfinish = pytest.hookimpl(tryfirst=True)(Guard.pytest_sessionfinish)
    Guard.pytest_collection_finish = pytest.hookimpl(tryfirst=True)(Guard.pytest_collection_finish)
    Guard.pytest_runtest_logstart = pytest.hookimpl(tryfirst=True)(Guard.pytest_runtest_logstart)
    Guard.pytest_runtest_logfinish = pytest.hookimpl(tryfirst=True)(Guard.pytest_runtest_logfinish)
    guard = Guard(cfg["nonce"], cfg.get("conftests", []), table, identities=cfg.get("identities"),
                  doctests=cfg.get("doctests"), watch=cfg.get("watch"), baseline=cfg.get("baseline"))
    guard.stdlib = stdlib_functions()  # before the tests' modules (and the code under test) are imported
    guard.stdlib_data = stdlib_data()
    guard.stdlib_names = stdlib_names()
    if cfg["mode"] in ("collect", "pristine"):  # the guard too: what the snapshot's own code trips is its baseline
        pristine = cfg["mode"] == "pristine"
        col = Collector(os.getcwd(), record=pristine)
        if pristine:
            col.install_read_recorder()
        rc = pytest.main([*([] if pristine else ["--collect-only"]), "-q", *args], plugins=[col, guard])
        with open(REPORT, "w", encoding="utf-8") as f:
            json.dump({"rc": int(rc), "items": col.items, "errors": col.errors, "modules": col.modules(),
                       "raises": col.raises, "reads": sorted(col.reads), "imports": col.imported(),
                       "ran": pristine, "module_files": col.module_files(), "guard": guard.found,
                       "outcomes": col.outcomes if pristine else {}}, f)
        return int(rc)
    if observer is not None:
        guard.watch_observer(observer)
    del cfg
    return int(pytest.main([*args, f"--junitxml={REPORT}"], plugins=[guard]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
