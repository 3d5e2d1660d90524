"""What counts as the tests beyond the protected names, from the pristine run: files defining collected
tests, checking helpers, test-support modules, test data, doctest examples."""

from __future__ import annotations

import ast
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from .records import Pristine
from .tree import _walk_files


def _ident(x) -> tuple[str, str] | None:
    """A ``[file, qualname]`` identity from the collection report, checked to be two strings."""
    if isinstance(x, (list, tuple)) and len(x) == 2 and all(isinstance(v, str) for v in x):
        return (x[0], x[1])
    return None


TEST_FRAMEWORKS = ("pytest", "_pytest", "unittest", "hypothesis", "nose", "nose2")


_HELPER_NAME = re.compile(r"^_*(testing|testutils?|test_?utils?|test_?helpers?|test_?support|testlib|test_?tools)(\.py)?$", re.I)
"""Module or package names that are test-support code by convention (``calc/_testing.py``,
``pkg/testutils/``): protected wherever they are, like ``tests/``."""


def _imports_test_framework(tree: ast.Module) -> bool:
    """Whether a module imports a test framework at import time (module level, outside an
    ``if __name__ == "__main__":`` block; ``unittest.mock`` is not one)."""
    def top(body):
        for node in body:
            if isinstance(node, ast.If):
                t = node.test
                if isinstance(t, ast.Compare) and isinstance(t.left, ast.Name) and t.left.id == "__name__":
                    continue
                yield from top(node.body + node.orelse)
            elif isinstance(node, ast.Try):
                yield from top(node.body + [x for h in node.handlers for x in h.body] + node.orelse + node.finalbody)
            else:
                yield node

    for node in top(tree.body):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module + "." + a.name for a in node.names]
        else:
            continue
        for n in names:
            parts = n.split(".")
            if parts[0] in TEST_FRAMEWORKS and parts[:2] != ["unittest", "mock"] or n.endswith(".testing"):
                return True
    return False


def _own_nodes(fn: ast.AST):
    """The nodes of a function's body, nested functions and classes left out."""
    stack = list(fn.body)
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(n))


def _checks_its_arguments(tree: ast.AST, line: int) -> bool:
    """Whether the statement at ``line`` — an ``assert``, a call, or a ``raise`` under an ``if`` —
    compares values derived from two or more parameters of the function it is in, a function that returns
    no value: a checking helper
    (``assert_close(got, want)``, ``got = f(items); assert got == want``), not an invariant of the code
    under test (``assert n >= 0``) nor a precondition of and-ed facts."""
    best = None
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.lineno <= line <= (fn.end_lineno or 0):
            if best is None or fn.lineno >= best.lineno:
                best = fn
    if best is None or any(isinstance(n, ast.Return) and n.value is not None for n in _own_nodes(best)):
        return False  # it computes a value: code under test with an internal check, not a checking helper
    a = best.args
    roots: dict[str, set[str]] = {x.arg: {x.arg} for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                                  if x is not None and x.arg not in ("self", "cls")}
    for node in ast.walk(best):  # locals computed from parameters carry their roots
        if isinstance(node, ast.Assign):
            r = set().union(*[roots.get(n.id, set()) for n in ast.walk(node.value) if isinstance(n, ast.Name)])
            for t in node.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and r:
                        roots[n.id] = roots.get(n.id, set()) | r

    def rooted(expr) -> set[str]:
        return set().union(*[roots.get(n.id, set()) for n in ast.walk(expr) if isinstance(n, ast.Name)])

    def compares_two(expr) -> bool:
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return compares_two(expr.operand)
        if isinstance(expr, ast.Compare):
            return len(rooted(expr)) >= 2
        if isinstance(expr, ast.Call):
            return any(compares_two(x) for x in expr.args) or len(rooted(expr)) >= 2 and bool(expr.args)
        return False

    for node in ast.walk(best):
        if not isinstance(node, ast.stmt) or not (node.lineno <= line <= (node.end_lineno or node.lineno)):
            continue
        if isinstance(node, ast.Assert) and compares_two(node.test):
            return True
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and node.lineno == line \
                and compares_two(node.value):
            return True
        if isinstance(node, (ast.If, ast.While)) and node.lineno != line and compares_two(node.test):
            return True
    return False


def _doctest_texts(path: Path) -> list[str] | None:
    """Every doctest example (source and expected output) in a module's docstrings, or None if it does
    not parse: what an edit to the doctests changes (prose around them is free to change)."""
    import doctest

    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, OSError, RecursionError, MemoryError):
        return None
    out = []
    parser = doctest.DocTestParser()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc and ">>>" in doc:
                try:
                    out += [repr((ex.source, ex.want)) for ex in parser.get_examples(doc)]
                except ValueError:
                    out.append(doc)
    return sorted(out)


def _protect_named_data(snapshot: Path, files: Mapping, test_side, add) -> None:
    """Data files whose name a test source spells out (``load_json("data/expected.json")``, whoever
    opens it): test data — outside package directories and documentation, which a fix may change.
    Static, so it holds when the pristine run did not finish too. `files`: `_walk_files` of the snapshot."""
    sources = []
    for rel, st in files.items():
        if rel.endswith(".py") and test_side(rel) and stat.S_ISREG(st.st_mode) and st.st_size < 2_000_000:
            sources.append((snapshot / rel).read_text(encoding="utf-8", errors="replace"))
    text = "\n".join(sources)
    if not text:
        return
    seen = 0
    for rel, st in sorted(files.items()):
        name = rel.rsplit("/", 1)[-1]
        if rel.endswith((".py", ".pyc", ".md", ".rst")) or not stat.S_ISREG(st.st_mode) or len(name) < 5:
            continue
        if _in_package(snapshot, rel) or test_side(rel):
            continue
        seen += 1
        if seen > 5000:
            break
        if name in text:
            add(rel, "test data: named in the tests")


def _imported_names(path: Path) -> set[str]:
    """The last component of every module a source imports, and every name it imports from one."""
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, OSError, RecursionError, MemoryError):
        return set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[-1] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.add((node.module or "").split(".")[-1])
            out.update(a.name for a in node.names)
    return out


def _imported_by_package(snapshot: Path, files: Mapping, rel: str, test_side, cache: dict) -> bool:
    """Whether a non-test source of the snapshot imports the module at `rel` (``from shop.constants
    import X``, ``from . import constants``): the audit hook sees only a module's first import, which the
    tests may make. `cache`: each source's `_imported_names`, parsed once per snapshot."""
    stem = rel[:-3].rsplit("/", 1)[-1]
    for other, st in files.items():
        if not other.endswith(".py") or other == rel or test_side(other) or st.st_size > 2_000_000:
            continue
        if other not in cache:
            cache[other] = _imported_names(snapshot / other)
        if stem in cache[other]:
            return True
    return False


def _in_package(snapshot: Path, rel: str) -> bool:
    """Whether a file sits in a Python package (any ancestor directory with ``__init__.py``) or a
    ``src/`` layout: package data, which a fix may change."""
    parts = rel.split("/")
    if parts[0] == "src":
        return True
    return any((snapshot.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts)))


def _is_data_module(path: Path) -> bool:
    """A module of values only (assignments, imports, a docstring; no function or class): a table of
    expected values when only the tests import it. A package's ``__init__.py`` is package code, and so is
    a module without an assignment (one that only re-exports names)."""
    if path.name == "__init__.py":
        return False
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, OSError, RecursionError, MemoryError):
        return False
    ok = (ast.Assign, ast.AnnAssign, ast.Import, ast.ImportFrom, ast.Expr)
    return any(isinstance(n, (ast.Assign, ast.AnnAssign)) for n in tree.body) and all(isinstance(n, ok) for n in tree.body) and not any(
        isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)) for n in ast.walk(tree))


def pristine_protections(snapshot: Path, rows, errors, data: Mapping, protected) -> tuple[dict[str, str],
                                                                                          dict[str, list[str]]]:
    """Files outside the protected names that belong to the tests, from the pristine collection/run:
    ``({path: why}, {module with doctests: its doctest docstrings})``. A patch's edits to these files
    are undone like edits to ``tests/`` (doctests are checked in place instead: their module is the
    code under test too).

    - every file that defines a collected test (node files, the functions' defining files, files that
      failed to collect): ``python_files = tests.py``, a base class in ``calc/_base.py`` …;
    - a module where a pristine test's assertion failed, called from the tests, whose failing check
      tests two or more of the function's parameters, and that no package source imports (a checking
      helper, not an internal check of the code under test);
    - a work-tree module loaded by the tests that imports a test framework or is named like test
      support (``_HELPER_NAME``);
    - data files the tests read (opened from a test-side file) and the package itself does not.
    """
    out: dict[str, str] = {}
    doctests: dict[str, list[str]] = {}

    def is_file(rel):
        f = snapshot / rel
        return f.is_file() and not f.is_symlink()

    def add(rel, why):
        if rel and not protected(rel) and rel not in out and is_file(rel):
            out[rel] = why

    for nodeid, _c, _n, kind, raw, dfn, *_ in rows:
        rel = nodeid.split("::", 1)[0]
        if kind == "DoctestItem" and rel.endswith(".py"):
            if rel not in doctests and is_file(rel):
                doctests[rel] = _doctest_texts(snapshot / rel) or []
            continue
        add(rel, "defines collected tests")
        name = re.sub(r"\[.*\]$", "", nodeid.rsplit("::", 1)[-1])
        if dfn and dfn[1].rsplit(".", 1)[-1] == name:  # a decorator's wrapper (no functools.wraps) is not it
            add(dfn[0], "defines a collected test function")
    for nodeid, _pfx in errors:
        add(nodeid.split("::", 1)[0], "a test file that does not collect on the snapshot")

    def test_side(rel):
        return bool(rel) and (protected(rel) or rel in out)

    tree_files = _walk_files(snapshot)
    parsed: dict[str, set[str]] = {}
    for chain in data.get("raises", []) or []:  # the work-tree frames of a failing test, outermost first
        try:
            frames = [(str(f[0]), int(f[1])) for f in chain]
        except (TypeError, ValueError, IndexError):
            continue
        last_test = max((i for i, (rel, _) in enumerate(frames) if test_side(rel)), default=None)
        tail = frames[last_test + 1:] if last_test is not None else []
        files = {rel for rel, _ in tail}
        if len(files) != 1:  # the check must sit in one module called from the tests
            continue
        rel = tail[0][0]
        if not rel.endswith(".py") or rel.rsplit("/", 1)[-1] == "__init__.py" or not is_file(rel):
            continue  # a package's __init__ is package code
        try:
            tree = ast.parse((snapshot / rel).read_bytes())
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        if any(_checks_its_arguments(tree, line) for _, line in tail) \
                and not _imported_by_package(snapshot, tree_files, rel, test_side, parsed):
            add(rel, "checking helper: a pristine test failed in it, on a comparison of its arguments")
    for rel in data.get("modules", []) or []:
        rel = str(rel)
        if test_side(rel) or not rel.endswith(".py") or not is_file(rel):
            continue
        parts = rel.split("/")
        named = any(_HELPER_NAME.match(p) for p in parts[:-1]) or bool(_HELPER_NAME.match(parts[-1]))
        try:
            framework = not named and _imports_test_framework(ast.parse((snapshot / rel).read_bytes()))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            framework = False
        if named or framework:
            add(rel, "test support module" if named else "imports a test framework")
    _protect_named_data(snapshot, tree_files, test_side, add)
    importers: dict[str, set[str]] = {}
    for pair in data.get("imports", []) or []:
        try:
            importers.setdefault(str(pair[0]), set()).add(str(pair[1]))
        except (TypeError, IndexError):
            continue
    for rel, who in sorted(importers.items()):
        if test_side(rel) or not rel.endswith(".py") or not is_file(rel) or not who:
            continue
        if all(test_side(o) for o in who) and _is_data_module(snapshot / rel) \
                and not _imported_by_package(snapshot, tree_files, rel, test_side, parsed):
            add(rel, "test data module: only values, imported by the tests alone")
    by_target: dict[str, set[str]] = {}
    for pair in data.get("reads", []) or []:
        try:
            target, opener = str(pair[0]), str(pair[1])
        except (TypeError, IndexError):
            continue
        by_target.setdefault(target, set()).add(opener)
    for target, openers in sorted(by_target.items()):
        if target.lower().endswith((".md", ".rst")) or _in_package(snapshot, target):
            continue  # documentation, package data: what a fix may change
        if any(test_side(o) for o in openers) and all(test_side(o) or not o for o in openers):
            add(target, "test data: read by the tests, not by the package")
    return out, doctests


def edited_doctests(snapshot: Path, work: Path, collected: Pristine) -> dict[str, str]:
    """``{doctest node id: its module}`` for modules whose pristine doctest docstrings the patch changed
    or removed (adding doctests is fine): those doctests fail whatever the run reports."""
    out = {}
    for rel, before in collected.doctests.items():
        now = _doctest_texts(work / rel) if (work / rel).is_file() else []
        remaining = list(now or [])
        ok = True
        for doc in before:
            if doc in remaining:
                remaining.remove(doc)
            else:
                ok = False
                break
        if not ok:
            out.update({n: rel for n in collected.doctest_ids if n.split("::", 1)[0] == rel})
    return out
