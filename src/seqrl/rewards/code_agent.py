"""Code-agent trajectory reward: apply the agent's final diff to a repository snapshot in the
sandbox, run the snapshot's own tests there, score tests + patch quality − an action penalty.

Inputs (`CodeAgentReward.score`): a repository snapshot (a directory, never modified), the issue
text, the agent's actions (a list, or their count), the final unified diff, and the test command
(``pytest ARGS`` or ``python -m pytest ARGS``). Steps, each in a fresh throwaway directory:

1. **Screen the diff** in this process (never raises): text, at most ``max_patch_bytes``, not
   empty, no NUL bytes, no ``GIT binary patch``, has a file header. Anything else scores 0 with
   the reason.
2. **Run the pristine tests** once per (snapshot contents, test command), in the sandbox: the
   collected node ids are the tests that count (a test the patched run does not report has
   failed), each with the identity of the function it runs; failing assertions' raise sites and
   the files the tests opened say which other files are test sources (`pristine_protections`). A
   run that does not finish falls back to ``pytest --collect-only``.
3. **Apply** the diff with ``git apply`` *inside the sandbox* (an unprivileged uid, no network) on
   a fresh copy (``.git`` and byte-code left out); it does not apply → 0 with git's message.
4. **Sanitise** (here, as root, with nothing running in the tree): a patch that creates a symlink
   or a compiled file (``*.pyc``, ``*.so``, ``__pycache__``) is rejected (0); every file is made
   root-owned and not writable by the sandbox uid.
5. **Restore the test harness**: every *protected* path — files under ``tests/``, ``test/``,
   ``testing/`` directories, ``test_*.py``, ``*_test.py``, any ``conftest.py``, the root
   configuration files pytest reads (``pytest.ini``, ``pyproject.toml``, ``tox.ini``,
   ``setup.cfg`` …), and the test sources the pristine run found elsewhere — that the patch added,
   changed or deleted is put back as it is in the snapshot (added ones are removed). Test edits are
   thereby worthless, not punished: an agent that writes a reproduction test loses nothing, and a
   patch that only edits tests scores the snapshot's own (failing) tests. ``test_edit_penalty`` can
   punish them as well. Edited doctest examples fail their doctests.
6. **Run the tests** in the sandbox on the patched copy: the trusted entry script
   (`seqrl/sandbox/_pytest_entry.py`) runs pytest with plugin autoloading off, the snapshot's
   config file, ``--rootdir``/``--confcutdir`` pinned to the copy, and the JUnit XML report on a
   pipe (fd 3). The report is parsed **here**, as untrusted data: size cap, no DOCTYPE/entities,
   exactly one suite, the guard's ``seqrl_integrity`` stamp with this run's nonce, pytest's exit
   status consistent with the outcomes, and counts taken over the pristine collection only.
   With ``verdict="outside"`` (default) every ``assert A == B`` / ``A != B`` of the functions the
   pristine tests run is first rewritten to hand the non-literal sides out as plain values; the
   literals stay here and the comparison is made here (the process under test never holds them,
   and an object whose ``__eq__`` always says True is compared by its plain value).

Score (weights are fields)::

    tests   = 1.0 if every pristine test passed else partial_credit · passed / total
    size    = 1 if changed_lines ≤ size_free_lines, linear to 0 at size_zero_lines
    parses  = fraction of the changed (non-test) Python files that parse (1 when none)
    total   = w_tests·tests + w_size·size + w_parses·parses
              − min(action_penalty · n_actions, max_action_penalty) + test_edit_penalty·[tests touched]

``changed_lines`` counts the diff's ``+``/``-`` lines outside protected paths. A patch that
references the harness (``pytest``, ``_pytest``, ``pluggy``, ``junit``, ``conftest``, ``seqrl``;
lines read after NFKC) in lines it adds outside protected paths gets no test reward (``forbid_harness_refs``; a heuristic, see
``docs/sandbox.md``); added lines that inspect frames, the import system, other fds or the test
files cost ``suspect_penalty``. A patch adding a module named after a stdlib or harness module
scores 0. Every part is in ``RewardResult.parts``; the reason names the first failure.
"""

from __future__ import annotations

import ast
import datetime
import decimal
import fractions
import hashlib
import json
import math
import operator
import pathlib
import os
import re
import secrets
import shlex
import shutil
import stat
import tempfile
import threading
import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from seqrl.sandbox import SandboxUnavailable, run_command
from seqrl.sandbox import runner as _runner
from seqrl.types import Problem, RewardResult

ENTRY = Path(_runner.__file__).with_name("_pytest_entry.py")
GIT = "/usr/bin/git"
TEST_DIRS = ("tests", "test", "testing")
TEST_FILE_PATTERNS = ("test_*.py", "*_test.py", "conftest.py")
HARNESS_FILES = ("pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "pyproject.toml", "tox.ini",
                 "setup.cfg")
_COMPILED = re.compile(r"\.(pyc|pyo|so|pyd|dylib)$|(^|/)__pycache__(/|$)")
_HARNESS_REF = re.compile(r"pytest|pluggy|junit|conftest|seqrl"
                          r"|^\s*(import\s+tests?\b|from\s+tests?[\s.]|import\s+test_\w+|from\s+test_\w+\s+import)",
                          re.I)
_SUSPECT = re.compile(
    r"sys\s*\.\s*_getframe|\binspect\b|\blinecache\b|\btraceback\b|sys\s*\.\s*modules|meta_path|path_hooks"
    r"|settrace|setprofile|\bf_(back|locals|globals|code|lineno)\b|\bco_consts\b|/dev/fd|/proc/self"
    r"|gc\s*\.\s*get_(objects|referrers|referents)|^\s*import\s+([\w.]+\s*,\s*)*gc\b|^\s*from\s+gc\s+import|\bctypes\b|os\s*\.\s*_exit|\bbuiltins\b"
    r"|__(code|defaults|kwdefaults|closure|globals)__|\bcell_contents\b|\bexec\s*\(|(?<![\w.])compile\s*\(|partialmethod|__import__|import_module"
    r"|[\"'](\./)?tests?([/\"'])|test_\w*\.py")
"""Added source lines that reach for the harness without naming it: frame and stack inspection, the
import system, other fds, process exit, rewriting functions in place (``__code__``, ``__defaults__``,
closure cells), test files read from code outside the tests."""
_HEADER = re.compile(r"^(diff --git |--- |\+\+\+ )", re.M)
_SKIP_COPY = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", "*.pyo", ".pytest_cache")
_FORBIDDEN_ARGS = ("--junitxml", "--junit-xml", "--junit-prefix", "--rootdir", "-c", "--config-file",
                   "--confcutdir", "--collect-only", "--co", "--debug", "-p")
PARTS = ("applies", "tests", "pass_frac", "passed", "total", "size", "changed_lines", "parses", "actions",
         "action_penalty", "test_files_touched", "harness_refs", "suspect_refs", "outside")


# ----------------------------------------------------------------------------- helpers (pure)
def parse_test_cmd(test_cmd: str) -> list[str]:
    """The pytest arguments of a test command (``pytest ARGS`` / ``python -m pytest ARGS``).

    >>> parse_test_cmd("python -m pytest -q tests/test_pricing.py")
    ['-q', 'tests/test_pricing.py']
    >>> parse_test_cmd("pytest")
    []
    """
    if not isinstance(test_cmd, str) or not test_cmd.strip():
        raise ValueError(f"code-agent reward: test_cmd must be a non-empty string (got {test_cmd!r:.80})")
    try:
        words = shlex.split(test_cmd)
    except ValueError as e:
        raise ValueError(f"code-agent reward: test_cmd {test_cmd!r}: {e}") from e
    head = os.path.basename(words[0])
    if head in ("pytest", "py.test"):
        args = words[1:]
    elif re.fullmatch(r"python(3(\.\d+)?)?", head) and words[1:3] == ["-m", "pytest"]:
        args = words[3:]
    else:
        raise ValueError(f"code-agent reward: test_cmd must run pytest ('pytest ARGS' or 'python -m pytest "
                         f"ARGS'), got {test_cmd!r}")
    for a in args:
        name = a.split("=", 1)[0]
        if name in _FORBIDDEN_ARGS:
            raise ValueError(f"code-agent reward: test_cmd may not set {name} (the reward sets the report, "
                             f"rootdir, config file and plugins itself): {test_cmd!r}")
    return args


def is_protected(rel: str, test_dirs=TEST_DIRS, patterns=TEST_FILE_PATTERNS, harness_files=HARNESS_FILES) -> bool:
    """Whether a repository-relative POSIX path belongs to the test harness (restored from the snapshot).

    >>> [is_protected(p) for p in ("tests/a.py", "pkg/test_x.py", "pkg/conftest.py", "setup.cfg", "pkg/mod.py")]
    [True, True, True, True, False]
    """
    from fnmatch import fnmatchcase

    parts = rel.split("/")
    if any(p in test_dirs for p in parts[:-1]):
        return True
    if any(fnmatchcase(parts[-1], pat) for pat in patterns):
        return True
    return len(parts) == 1 and parts[0] in harness_files


def _strip_path(p: str) -> str | None:
    p = p.split("\t", 1)[0].strip()
    if len(p) >= 2 and p[0] == p[-1] == '"':
        p = p[1:-1]
    if p == "/dev/null" or not p:
        return None
    return p[2:] if p[:2] in ("a/", "b/") else p


def scan_diff(diff: str) -> dict[str, list[list[str]]]:
    """Per file path (prefix ``a/``/``b/`` stripped): ``[added lines, removed lines]`` in its hunks.

    >>> scan_diff("--- a/m.py\\n+++ b/m.py\\n@@ -1 +1 @@\\n-x = 1\\n+x = 2\\n")
    {'m.py': [['x = 2'], ['x = 1']]}
    """
    out: dict[str, list[list[str]]] = {}
    lines = diff.splitlines()
    current, in_hunk = None, False
    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.startswith("diff --git "):
            current, in_hunk = None, False
            continue
        if line.startswith("--- ") and (not in_hunk or nxt.startswith("+++ ")):
            current, in_hunk = _strip_path(line[4:]), False
            continue
        if line.startswith("+++ ") and not in_hunk:
            current = _strip_path(line[4:]) or current
            continue
        if line.startswith("@@"):
            in_hunk = True
            continue
        if in_hunk and current is not None and line[:1] in ("+", "-"):
            out.setdefault(current, [[], []])[0 if line[0] == "+" else 1].append(line[1:])
    return out


def find_inifile(repo: Path) -> str | None:
    """The configuration file pytest would use at the snapshot's root (relative name), if any."""
    checks = (("pytest.toml", None), (".pytest.toml", None), ("pytest.ini", None), (".pytest.ini", None),
              ("pyproject.toml", "[tool.pytest"), ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]"))
    for name, marker in checks:
        f = repo / name
        if f.is_file() and not f.is_symlink():
            if marker is None:
                return name
            try:
                if marker in f.read_text(encoding="utf-8", errors="replace"):
                    return name
            except OSError:
                continue
    return None


OBSERVE = "__seqrl_observe__"


def _literal(node: ast.AST) -> tuple[bool, object]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


@dataclass(frozen=True)
class Expect:
    """One externalized check: an expression tree evaluated here on plain values. Leaves are
    ``("lit", value)`` (kept here, never in the sandbox) or ``("obs", i)`` (the i-th value the run
    observes); inner nodes are comparisons, arithmetic on numbers, ``abs/round/min/max/sum``,
    ``pytest.approx``, ``math.isclose``, displays, and unittest's almost-equal."""

    tree: tuple
    n_obs: int

    def holds(self, observed) -> bool:
        """Whether the observation (a tuple of plain values, as parsed) satisfies the check; a `Verdict`
        is pytest's own (only where the rewrite allowed it: the suite's own objects)."""
        if isinstance(observed, Verdict):
            return observed.passed and _fallback_policy(self.tree) is not None
        if not isinstance(observed, tuple) or len(observed) != self.n_obs:
            return False
        try:
            result = _evaluate(self.tree, observed)
        except Exception:  # noqa: BLE001 — a type error, an unorderable mix …: not satisfied
            return False
        return result is True or (type(result) is bool and result)


_CMP = {"Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt,
        "GtE": operator.ge, "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b}
_BIN = {"Add": operator.add, "Sub": operator.sub, "Mult": operator.mul, "Div": operator.truediv,
        "FloorDiv": operator.floordiv, "Mod": operator.mod, "Pow": operator.pow}
_UNARY = {"USub": operator.neg, "UAdd": operator.pos, "Not": operator.not_}
_CALLS = ("abs", "round", "min", "max", "sum", "approx", "isclose")
_NUMBER = (bool, int, float, complex)
_MAX_BITS = 1 << 16  # integer arithmetic on observed values stays this small (no memory bombs here)


def _evaluate(node: tuple, observed: tuple):
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "obs":
        return observed[node[1]]
    if kind == "cmp":
        return bool(_CMP[node[1]](_evaluate(node[2], observed), _evaluate(node[3], observed)))
    if kind == "bin":
        return _binop(node[1], _evaluate(node[2], observed), _evaluate(node[3], observed))
    if kind == "chain":  # a == b == c: pairwise, stopping at the first false link
        values = [_evaluate(t, observed) for t in node[2]]
        return all(bool(_CMP[op](values[i], values[i + 1])) for i, op in enumerate(node[1]))
    if kind == "count":  # assertCountEqual: the same elements, each as often (== , not hashing)
        a, b = _evaluate(node[1], observed), _evaluate(node[2], observed)
        if not all(isinstance(x, (list, tuple, str, bytes, frozenset, set, dict, range)) for x in (a, b)) \
                or len(a) != len(b) or len(a) > 2000:
            return False
        a, b = list(a), list(b)
        return all(sum(1 for y in a if y == x) == sum(1 for y in b if y == x) for x in a)
    if kind == "unary":
        return _UNARY[node[1]](_evaluate(node[2], observed))
    if kind in ("list", "tuple", "set"):
        items = [_evaluate(x, observed) for x in node[1]]
        return {"list": list, "tuple": tuple, "set": set}[kind](items)
    if kind == "dict":
        return {_evaluate(k, observed): _evaluate(v, observed) for k, v in node[1]}
    if kind == "call":
        args = [_evaluate(a, observed) for a in node[2]]
        kwargs = {k: _evaluate(v, observed) for k, v in node[3]}
        if node[1] == "approx":
            from pytest import approx

            return approx(*args, **kwargs)
        if node[1] == "isclose":
            return math.isclose(*args, **kwargs)
        if node[1] == "round" and len(args) > 1 and isinstance(args[1], int) and abs(args[1]) > 400:
            raise OverflowError("round digits")
        if node[1] == "sum" and len(args) > 1 and isinstance(args[1], _SEQ):  # sum(lists, []): quadratic
            if not isinstance(args[0], (list, tuple)) or sum(len(x) for x in args[0] if isinstance(x, _SEQ)) \
                    + len(args[0]) > 10_000:
                raise OverflowError("sum of sequences too large")
        return {"abs": abs, "round": round, "min": min, "max": max, "sum": sum}[node[1]](*args, **kwargs)
    if kind == "any":
        from unittest import mock

        return mock.ANY
    if kind == "mockcall":
        args = tuple(_evaluate(a, observed) for a in node[2])
        kwargs = {k: _evaluate(v, observed) for k, v in node[3]}
        return _call(node[1], args, kwargs)
    if kind == "quant":  # all()/any() of a comparison: the pairs the observer consumed, and whether it ran out
        pairs, done = _evaluate(node[3], observed)
        if not isinstance(pairs, list) or not all(isinstance(x, tuple) and len(x) == 2 for x in pairs):
            raise TypeError("pairs")
        results = [bool(_CMP[node[2]](a, b)) for a, b in pairs]
        return (done is True and all(results)) if node[1] == "all" else any(results)
    if kind == "almost":  # unittest's assertAlmostEqual / assertNotAlmostEqual
        a, b = _evaluate(node[1], observed), _evaluate(node[2], observed)
        places, delta = _evaluate(node[3], observed), _evaluate(node[4], observed)
        if a == b:
            close = True
        elif delta is not None:
            close = abs(a - b) <= delta
        else:
            close = round(abs(a - b), 7 if places is None else places) == 0
        return close != node[5]
    raise ValueError(f"unknown check node {kind!r}")


_ARITH = (bool, int, float, complex, decimal.Decimal, fractions.Fraction, datetime.date, datetime.time,
          datetime.timedelta)
_SEQ = (str, bytes, list, tuple)
_MAX_ITEMS = 1_000_000


def _binop(op: str, a, b):
    """Arithmetic here on observed values: numbers, Decimals, Fractions and dates as Python does it;
    sequences concatenated or repeated, and paths joined, within size limits (no memory bombs)."""
    if isinstance(a, _ARITH) and isinstance(b, _ARITH):
        if op == "Pow" and (abs(b) > 4096 if isinstance(b, (int, float, decimal.Decimal, fractions.Fraction))
                            else True):
            raise OverflowError("exponent too large")
        out = _BIN[op](a, b)
        if isinstance(out, int) and out.bit_length() > _MAX_BITS:
            raise OverflowError("integer too large")
        return out
    if op == "Add" and type(a) is type(b) and isinstance(a, _SEQ) and len(a) + len(b) <= _MAX_ITEMS:
        return a + b
    if op == "Mult":
        seq, n = (a, b) if isinstance(a, _SEQ) else (b, a)
        if isinstance(seq, _SEQ) and type(n) is int and len(seq) * max(n, 0) <= _MAX_ITEMS:
            return seq * n
    if op == "Div" and isinstance(a, pathlib.PurePath) and isinstance(b, (str, pathlib.PurePath)):
        return a / b
    raise TypeError(f"{op} of {type(a).__name__} and {type(b).__name__} is not evaluated here")


@dataclass(frozen=True)
class Verdict:
    """pytest's own verdict on a check whose leaves are all the suite's own objects (``~True``)."""

    passed: bool


class _NotRewritable(Exception):
    pass


def _func_name(node: ast.AST) -> str | None:
    f = node.func if isinstance(node, ast.Call) else None
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


_UNITTEST = {"assertEqual": "Eq", "assertEquals": "Eq", "assertNotEqual": "NotEq", "assertListEqual": "Eq",
             "assertTupleEqual": "Eq", "assertDictEqual": "Eq", "assertSetEqual": "Eq", "assertSequenceEqual": "Eq",
             "assertMultiLineEqual": "Eq", "assertGreater": "Gt", "assertGreaterEqual": "GtE", "assertLess": "Lt",
             "assertLessEqual": "LtE", "assertIn": "In", "assertNotIn": "NotIn"}


_RAISES_CMS = ("raises", "assertRaises", "assertRaisesRegex", "warns", "assertWarns", "assertWarnsRegex",
               "deprecated_call", "suppress", "assertLogs", "assertNoLogs")
"""Context managers whose block is expected to stop early: its checks need not be observed."""


class _Externalize(ast.NodeTransformer):
    """Checks → ``__seqrl_observe__(K, (leaf values...), check, fallback, quant)``: the run hands out
    plain values of the leaves, the literals stay here, and the check is evaluated here. Rewritten:
    ``assert`` of a comparison, chained or not (``== != < <= > >= in not in``; sides may hold
    arithmetic, ``abs/round/min/max/sum``, displays, ``pytest.approx``), ``assert math.isclose(...)``,
    ``assert all(a == b for ...)`` / ``any(...)`` (consumed lazily by the observer), and unittest's
    ``assertEqual`` family on any test case object; a value whose ``__eq__`` / ``__sub__`` / ``__lt__``
    lies is judged by its plain value. Where every leaf of a literal-free comparison is the suite's own
    object (``Money(3) == add(...)``, mock ``call`` objects) or an ``in``'s container is, the observer
    reports pytest's own verdict instead (`check`). Other shapes (``is``, ``and``/``or``,
    ``pytest.raises``, bare calls) stay in-process."""

    def __init__(self, start: int, tables: Mapping[str, object] | None = None):
        self.k, self.expected, self.found = start, {}, []
        self.must_ids: set[int] = set()
        self.must: set[int] = set()
        self.tables = dict(tables or {})  # module-level literals (`literal_tables`): kept here, never observed

    def _tree(self, node, observed: list) -> tuple:
        ok, value = _literal(node)
        if ok:
            return ("lit", value)
        if isinstance(node, ast.Name) and node.id in self.tables:  # EXPECTED = 8.0 at module level
            return ("lit", self.tables[node.id])
        if isinstance(node, ast.BinOp) and type(node.op).__name__ in _BIN:
            return ("bin", type(node.op).__name__, self._tree(node.left, observed), self._tree(node.right, observed))
        if isinstance(node, ast.UnaryOp) and type(node.op).__name__ in ("USub", "UAdd"):
            return ("unary", type(node.op).__name__, self._tree(node.operand, observed))
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and not any(isinstance(e, ast.Starred) for e in node.elts):
            return (type(node).__name__.lower(), tuple(self._tree(e, observed) for e in node.elts))
        if isinstance(node, ast.Dict) and None not in node.keys:
            return ("dict", tuple((self._tree(k, observed), self._tree(v, observed))
                                  for k, v in zip(node.keys, node.values)))
        if (isinstance(node, ast.Name) and node.id == "ANY") or (isinstance(node, ast.Attribute) and node.attr == "ANY"
                                                                and isinstance(node.value, ast.Name)):
            return ("any",)  # mock.ANY written by the test: built here, never taken from the run
        call_name = _mock_call_name(node)
        if call_name is not None:  # call(...) / call.method(...) written by the test: built here
            return ("mockcall", call_name, tuple(self._tree(a, observed) for a in node.args),
                    tuple((kw.arg, self._tree(kw.value, observed)) for kw in node.keywords))
        name = _func_name(node)
        if isinstance(node, ast.Call) and name in _CALLS and (isinstance(node.func, ast.Name) or name in (
                "approx", "isclose")) and _simple_call(node, name):
            return ("call", name, tuple(self._tree(a, observed) for a in node.args),
                    tuple((kw.arg, self._tree(kw.value, observed)) for kw in node.keywords))
        if isinstance(node, (ast.Starred, ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr)):
            raise _NotRewritable
        observed.append(node)
        return ("obs", len(observed) - 1)

    def _compare(self, left, ops, rights, observed: list) -> tuple:
        names = [type(o).__name__ for o in ops]
        if any(n not in _CMP for n in names):
            raise _NotRewritable
        trees = [self._tree(left, observed)] + [self._tree(r, observed) for r in rights]
        if len(names) == 1:
            return ("cmp", names[0], trees[0], trees[1])
        return ("chain", tuple(names), tuple(trees))

    def _check(self, test: ast.AST, observed: list) -> tuple:
        if isinstance(test, ast.Compare):
            return self._compare(test.left, test.ops, test.comparators, observed)
        if isinstance(test, ast.Call) and _func_name(test) == "isclose" and _simple_call(test, "isclose"):
            return self._tree(test, observed)
        if (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id in ("all", "any")
                and len(test.args) == 1 and not test.keywords
                and isinstance(test.args[0], (ast.GeneratorExp, ast.ListComp))
                and isinstance(test.args[0].elt, ast.Compare) and len(test.args[0].elt.ops) == 1
                and type(test.args[0].elt.ops[0]).__name__ in _CMP):
            gen = test.args[0]  # all(f(x) == w for ...): the pairs, consumed lazily by the observer
            pairs = ast.GeneratorExp(ast.Tuple([gen.elt.left, gen.elt.comparators[0]], ast.Load()), gen.generators)
            observed.append(pairs)
            self.quant = (test.func.id, type(gen.elt.ops[0]).__name__)
            return ("quant", test.func.id, type(gen.elt.ops[0]).__name__, ("obs", len(observed) - 1))
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return ("unary", "Not", self._check(test.operand, observed))
        raise _NotRewritable

    def _unittest(self, call: ast.Call, observed: list) -> tuple:
        name = _func_name(call)
        if not isinstance(call.func, ast.Attribute) or any(isinstance(a, ast.Starred) for a in call.args):
            raise _NotRewritable
        kw = {k.arg: k.value for k in call.keywords}
        if None in kw:
            raise _NotRewritable
        args = list(call.args)
        for pos, key in enumerate(("first", "second")):  # assertEqual(first=..., second=...)
            if key in kw and len(args) == pos:
                args.append(kw[key])
        if name in _UNITTEST and len(args) >= 2:
            return self._compare(args[0], [_CMP_NODES[_UNITTEST[name]]()], [args[1]], observed)
        if name in ("assertAlmostEqual", "assertNotAlmostEqual", "assertAlmostEquals") and len(args) >= 2:
            places = args[2] if len(args) > 2 else kw.get("places", ast.Constant(None))
            delta = args[4] if len(args) > 4 else kw.get("delta", ast.Constant(None))
            return ("almost", self._tree(args[0], observed), self._tree(args[1], observed),
                    self._tree(places, observed), self._tree(delta, observed), name == "assertNotAlmostEqual")
        if name == "assertCountEqual" and len(args) >= 2:
            return ("count", self._tree(args[0], observed), self._tree(args[1], observed))
        if name == "assertTrue" and args:
            return self._check(args[0], observed)
        if name == "assertFalse" and args:
            return ("unary", "Not", self._check(args[0], observed))
        raise _NotRewritable

    def _replace(self, node: ast.stmt, build, expr=None) -> ast.stmt:
        observed: list = []
        self.quant = None
        try:
            tree = build(observed)
        except _NotRewritable:
            return node
        if not observed:  # nothing the code under test decides
            return node
        k = self.k
        self.k += 1
        self.expected[k] = Expect(tree, len(observed))
        self.found.append(k)
        if id(node) in self.must_ids:
            self.must.add(k)
        args = [ast.Constant(k), ast.Tuple(observed, ast.Load())]
        fallback = _fallback_policy(tree) if expr is not None and self.quant is None else None
        if fallback is not None:  # pytest's verdict where every leaf is the suite's own object
            import copy

            memo = {id(leaf): ast.Subscript(ast.Name("_v", ast.Load()), ast.Constant(i), ast.Load())
                    for i, leaf in enumerate(observed)}
            body = copy.deepcopy(expr, memo)
            lam = ast.Lambda(ast.arguments([], [ast.arg("_v")], None, [], [], None, []), body)
            args += [lam, ast.Constant(fallback)]
        keywords = [ast.keyword("quant", ast.Constant(self.quant))] if self.quant else []
        call = ast.Call(ast.Name(OBSERVE, ast.Load()), args, keywords)
        return ast.copy_location(ast.Expr(call), node)

    def visit_Assert(self, node: ast.Assert):
        if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And):
            # `assert a and b == c`: a passing run evaluated every conjunct, so each is its own check
            parts = [ast.copy_location(ast.Assert(v, node.msg), node) for v in node.test.values]
            if id(node) in self.must_ids:
                self.must_ids.update(id(p) for p in parts)
            return [x for p in parts for x in _as_list(self.visit_Assert(p))]
        return self._replace(node, lambda obs: self._check(node.test, obs), node.test)

    def visit_If(self, node: ast.If):
        """``if COND: raise AssertionError(...)`` / ``pytest.fail(...)`` / ``self.fail(...)`` is the check
        ``assert not COND`` (``if A or B:`` two of them), rewritten as one."""
        if not _fails(node):
            return self.generic_visit(node)
        conds = node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.Or) \
            else [node.test]
        out = []
        for cond in conds:
            check = ast.copy_location(ast.Assert(_negated(cond), None), node)
            if id(node) in self.must_ids:
                self.must_ids.add(id(check))
            out += _as_list(self.visit_Assert(check))
        return out

    def visit_For(self, node: ast.For):
        """A loop over module-level literal tables (``for c in CASES``, ``zip(INPUTS, WANTS)``): each
        table is checked against its literal before and after the loop, so cases removed while the loop
        runs fail the test."""
        self.generic_visit(node)
        names = sorted({n.id for n in ast.walk(node.iter) if isinstance(n, ast.Name) and n.id in self.tables
                        and isinstance(self.tables[n.id], (list, tuple, dict, set, frozenset))})
        if not names or node.orelse:
            return node
        before, after = [], []
        for name in names:
            for where, out in (("before", before), ("after", after)):
                check = ast.copy_location(ast.Expr(ast.Constant(None)), node)
                if id(node) in self.must_ids and (where == "before" or not _returns(node.body)):
                    self.must_ids.add(id(check))
                tree = ("cmp", "Eq", ("obs", 0), ("lit", self.tables[name]))
                out.append(self._replace(check, lambda obs, tree=tree, name=name: (
                    obs.append(ast.Name(name, ast.Load())), tree)[1]))
        return [*before, node, *after]

    def visit_Expr(self, node: ast.Expr):
        call = node.value
        if isinstance(call, ast.Call) and (_func_name(call) or "").startswith("assert"):
            expr = None
            name = _func_name(call)
            if name in _UNITTEST and len(call.args) >= 2 and not call.keywords:
                expr = ast.Compare(call.args[0], [_CMP_NODES[_UNITTEST[name]]()], [call.args[1]])
            return self._replace(node, lambda obs: self._unittest(call, obs), expr)
        return self.generic_visit(node)

    def visit_FunctionDef(self, node):  # nested functions are rewritten with their own qualname
        return node

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef


def _fails(node: ast.If) -> bool:
    """``if COND:`` whose whole body is ``raise AssertionError[(...)]`` or a ``fail(...)`` call
    (``pytest.fail``, ``self.fail``), with no ``else``."""
    if node.orelse or len(node.body) != 1:
        return False
    st = node.body[0]
    if isinstance(st, ast.Raise) and st.exc is not None:
        exc = st.exc.func if isinstance(st.exc, ast.Call) else st.exc
        return isinstance(exc, ast.Name) and exc.id == "AssertionError"
    return isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and _func_name(st.value) == "fail"


_NEGATE = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In}


def _negated(cond: ast.expr) -> ast.expr:
    """``not cond``; a single ``==``/``!=``/``in``/``not in`` is flipped instead (an order is not:
    ``not a < b`` is not ``a >= b`` for sets), and ``not not x`` is ``x``."""
    if isinstance(cond, ast.UnaryOp) and isinstance(cond.op, ast.Not):
        return cond.operand
    if isinstance(cond, ast.Compare) and len(cond.ops) == 1 and type(cond.ops[0]) in _NEGATE:
        return ast.Compare(cond.left, [_NEGATE[type(cond.ops[0])]()], cond.comparators)
    return ast.UnaryOp(ast.Not(), cond)


def _returns(body) -> bool:
    """Whether a statement list can ``return`` (nested functions and classes aside)."""
    stack = list(body)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Return):
            return True
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(n))
    return False


_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update", "add",
             "discard", "setdefault", "popitem", "__setitem__", "__delitem__"}
MAX_TABLE_TEXT = 50_000
"""A module-level table whose literal is longer is not checked around its loops (observations stay small)."""


def literal_tables(tree: ast.Module) -> dict[str, object]:
    """Module-level names bound once to a literal (``EXPECTED = 8.0``, ``CASES = [...]``) that nothing in
    the file binds again or changes (no other assignment, argument, import, ``except … as``, item
    assignment or deletion, mutating method call, ``global``): the checks use the literal itself."""
    bound: dict[str, list] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound.setdefault(node.targets[0].id, []).append(node.value)
    rebound: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.arg):
            rebound.add(n.arg)
        elif isinstance(n, ast.alias):
            rebound.add(n.asname or n.name.split(".")[0])
        elif isinstance(n, ast.ExceptHandler) and n.name:
            rebound.add(n.name)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            rebound.add(n.name)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            rebound.add(n.name)
    out = {}
    for name, values in bound.items():
        stores = sum(1 for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name
                     and isinstance(n.ctx, (ast.Store, ast.Del)))
        if len(values) != 1 or stores != 1 or name in rebound or _mutated(tree, name):
            continue
        ok, value = _literal(values[0])
        if ok and len(repr(value)) <= MAX_TABLE_TEXT:
            out[name] = value
    return out


def _mutated(tree: ast.Module, name: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, (ast.Store, ast.Del)) \
                and isinstance(node.value, ast.Name) and node.value.id == name:
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == name:
            return True
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return True
        if isinstance(node, ast.Global) and name in node.names:
            return True
    return False


_CMP_NODES = {"Eq": ast.Eq, "NotEq": ast.NotEq, "Lt": ast.Lt, "LtE": ast.LtE, "Gt": ast.Gt, "GtE": ast.GtE,
              "In": ast.In, "NotIn": ast.NotIn}


def _class_qualnames(tree: ast.AST) -> set[str]:
    """Qualnames of the classes a module's source defines at module level and nested in classes."""
    out: set[str] = set()

    def walk(body, prefix):
        for node in body:
            if isinstance(node, ast.ClassDef):
                out.add(prefix + node.name)
                walk(node.body, prefix + node.name + ".")
            elif isinstance(node, (ast.If, ast.Try)):
                walk([*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                      *[x for h in getattr(node, "handlers", []) for x in h.body]], prefix)

    walk(getattr(tree, "body", []), "")
    return out


def _mock_call_name(node) -> str | None:
    """``""`` for ``call(...)`` / ``mock.call(...)``, ``"run"`` for ``call.run(...)``; None otherwise
    (starred arguments are not built here)."""
    if not isinstance(node, ast.Call) or any(isinstance(a, ast.Starred) for a in node.args) \
            or any(kw.arg is None for kw in node.keywords):
        return None
    f = node.func
    if (isinstance(f, ast.Name) and f.id == "call") or (isinstance(f, ast.Attribute) and f.attr == "call"
                                                        and isinstance(f.value, ast.Name) and f.value.id == "mock"):
        return ""
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "call":
        return f.attr
    return None


def _simple_call(node: ast.Call, name: str) -> bool:
    """A call evaluated here from its observed arguments: no generator, comprehension or lambda among
    them, and keywords only where they are numbers (``approx(rel=…)``, ``round(x, 2)``)."""
    if any(isinstance(a, ast.Starred) for a in node.args) or any(kw.arg is None for kw in node.keywords):
        return False
    parts = [*node.args, *(kw.value for kw in node.keywords)]
    if any(isinstance(n, (ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp, ast.Lambda))
           for p in parts for n in ast.walk(p)):
        return False
    return not (node.keywords and name in ("min", "max", "sum"))


def _fallback_policy(tree: tuple):
    """Where the observer may report pytest's own verdict: ``"all"`` for a comparison with no literal
    whose leaves all turn out not to be plain data, the leaf index of an ``in``'s container, else None."""
    if tree[0] == "cmp" and tree[1] in ("In", "NotIn") and tree[3][0] == "obs":
        return tree[3][1]
    if tree[0] in ("cmp", "chain") and not _has_literal(tree):
        return "all"
    return None


def _has_literal(tree) -> bool:
    if isinstance(tree, tuple) and tree and tree[0] == "lit":
        return True
    return isinstance(tree, tuple) and any(_has_literal(x) for x in tree if isinstance(x, tuple))


def function_defs(tree: ast.Module) -> dict[str, list[ast.AST]]:
    """``co_qualname → [FunctionDef ...]`` of every function in a module (methods ``C.f``, nested
    functions ``f.<locals>.g``; a name defined twice lists both)."""
    out: dict[str, list[ast.AST]] = {}

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = prefix + child.name
                out.setdefault(q, []).append(child)
                walk(child, q + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            elif isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
                walk(child, prefix)

    walk(tree, "")
    return out


def resolve_test(tree: ast.Module, qual: str) -> str | None:
    """The qualname of the function a test node ``Class.method`` / ``function`` of this module runs,
    following base classes defined in the same module (``class TestInts(TestStatsBase)``); None when
    the definition is elsewhere."""
    defs = function_defs(tree)
    if "." not in qual:
        for _ in range(10):  # `test_b = test_a` at module level runs test_a
            if qual in defs:
                return qual
            alias = [n.value.id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)
                     and any(isinstance(t, ast.Name) and t.id == qual for t in n.targets)]
            if not alias:
                return None
            qual = alias[-1]
        return None
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    path, method = qual.rsplit(".", 1)
    if "." in path:  # a nested class: no base-class lookup
        return qual if qual in defs else None
    seen = set()

    def find(cls_name):
        if cls_name in seen or cls_name not in classes:
            return None
        seen.add(cls_name)
        if f"{cls_name}.{method}" in defs:
            return f"{cls_name}.{method}"
        for st in classes[cls_name].body:  # `test_b = test_a` in the class body
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Name) and f"{cls_name}.{st.value.id}" in defs \
                    and any(isinstance(t, ast.Name) and t.id == method for t in st.targets):
                return f"{cls_name}.{st.value.id}"
        for b in classes[cls_name].bases:
            hit = find(b.id) if isinstance(b, ast.Name) else None
            if hit:
                return hit
        return None

    return find(path)


def _must_ids(fn: ast.AST) -> set[int]:
    """The checks every passing run of test function `fn` must report: statements of its body, and of
    ``with`` blocks there (not ``pytest.raises`` and the like, which end early), up to the first
    statement that can ``return`` (a guard such as ``if not HAS_X: return``)."""
    out: set[int] = set()

    def returns(st) -> bool:
        stack = [st]
        while stack:
            n = stack.pop()
            if isinstance(n, ast.Return):
                return True
            if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                stack.extend(ast.iter_child_nodes(n))
        return False

    def block(body):
        for st in body:
            if isinstance(st, (ast.Assert, ast.Expr, ast.For)) or (isinstance(st, ast.If) and _fails(st)):
                out.add(id(st))
            elif isinstance(st, (ast.With, ast.AsyncWith)) and not any(
                    isinstance(it.context_expr, ast.Call) and _func_name(it.context_expr) in _RAISES_CMS
                    for it in st.items):
                if not block(st.body):
                    return False
            if returns(st):
                return False
        return True

    block(fn.body)
    return out


def externalize_asserts(source: str, start: int = 0, only=None, helpers: bool = True
                        ) -> tuple[str, dict[int, Expect], dict[str, list[int]], set[int]]:
    r"""Rewrite a pristine test file so that its checks are decided outside the sandbox (see
    `_Externalize`): ``(new source, {k: Expect}, {function qualname: [k...]}, ks that every passing
    run of their test must report — `_must_ids` of the ``only`` functions)``. ``only``: the qualnames
    of the functions the collected tests run (default every ``test*`` function and method of a
    ``Test*`` class); ``helpers``: the file's other functions (checking helpers, fixtures) are
    rewritten too, their checks judged in whichever test observes them.

    >>> src, exp, by_test, must = externalize_asserts("def test_a():\n    assert f(2) == 4\n")
    >>> "4" in src, exp[0].holds((4,)), exp[0].holds((5,)), by_test, must
    (False, True, False, {'test_a': [0]}, {0})
    """
    tree = ast.parse(source)
    defs = function_defs(tree)
    if only is None:
        only = {q for q in defs if _conventional_test(q)}
    targets = set(defs) if helpers else {q for q in only if q in defs}
    tr = _Externalize(start, literal_tables(tree))
    by_test: dict[str, list[int]] = {}
    for _, _, qual, fn in sorted((fn.lineno, fn.col_offset, q, fn) for q in targets
                                 for fn in defs[q]):  # in source order
        tr.found = []
        tr.must_ids = _must_ids(fn) if qual in only else set()
        fn.body = [x for st in fn.body for x in _as_list(tr.visit(st))]
        by_test.setdefault(qual, []).extend(tr.found)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n", tr.expected, by_test, tr.must


def _module_file(rel: str, module: str, level: int, files) -> str | None:
    """The test-side file (one of ``files``) that ``from MODULE import …`` in ``rel`` loads, if any:
    relative imports from the file's package, absolute ones from the root or any folder above the file
    (pytest puts a test file's first non-package ancestor on ``sys.path``)."""
    parts = [p for p in module.split(".") if p]
    here = rel.split("/")[:-1]
    if level:
        bases = [here[:len(here) - (level - 1)]] if level - 1 <= len(here) else []
    else:
        bases = [here[:i] for i in range(len(here), -1, -1)]
    for base in bases:
        stem = "/".join([*base, *parts])
        for cand in (f"{stem}.py", f"{stem}/__init__.py"):
            if cand in files:
                return cand
    return None


def _assigned(body) -> set[str]:
    """Names a statement list binds by assignment (``x = …``, ``x: T = …``, ``x += …``)."""
    out = set()
    for st in body:
        targets = st.targets if isinstance(st, ast.Assign) else [st.target] if isinstance(
            st, (ast.AnnAssign, ast.AugAssign)) else []
        out.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return out


def helper_bindings(trees: Mapping[str, ast.Module]) -> dict[str, dict[str, list]]:
    """``{file: {name: [defining file, qualname, decorated]}}``: the module-level functions (and methods
    of module-level classes) each test-side file defines, and the functions it imports by name from
    another test-side file. The run checks
    that these names still hold those functions (a helper rebound by package code fails the run)."""
    defs: dict[str, dict[str, bool]] = {}
    for rel, tree in trees.items():
        defs[rel] = {n.name: bool(n.decorator_list) for n in tree.body
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for c in tree.body:  # methods of module-level classes: `Base.check_total`
            if isinstance(c, ast.ClassDef):
                defs[rel].update({f"{c.name}.{n.name}": bool(n.decorator_list) or n.name in _assigned(c.body)
                                  for n in c.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))})
        again = _assigned(tree.body)  # `helper = fixture(helper)`: the name holds something else then
        defs[rel] = {k: dec or k in again for k, dec in defs[rel].items()}
    out: dict[str, dict[str, list]] = {}
    for rel, tree in trees.items():
        mine = {name: [rel, name, dec] for name, dec in defs[rel].items()}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module is not None or isinstance(node, ast.ImportFrom) \
                    and node.level:
                src = _module_file(rel, node.module or "", node.level, trees)
                for a in node.names if src else ():
                    if a.name in defs[src] and (a.asname or a.name) not in mine:
                        mine[a.asname or a.name] = [src, a.name, defs[src][a.name]]
        if mine:
            out[rel] = mine
    return out


def stdlib_uses(tree: ast.Module) -> list[list[str]]:
    """``[module, attribute path]`` of the standard library a test-side source reads (``json.dumps``,
    ``from operator import mul``, ``os.path.join``): what the code under test may not replace."""
    import sys

    std = set(getattr(sys, "stdlib_module_names", ()))
    alias: dict[str, str] = {}
    out: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in std:
                    alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in std:
            for a in node.names:
                if a.name != "*":
                    out.add((node.module, a.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            chain, cur = [], node
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id in alias:
                chain.reverse()
                for i in range(1, min(len(chain), 3) + 1):
                    out.add((alias[cur.id], ".".join(chain[:i])))
    return [list(x) for x in sorted(out)]


def _is_dataclass_decorator(d: ast.expr) -> bool | None:
    """True for ``@dataclass`` / ``@dataclasses.dataclass(...)``, False for one with ``eq=False`` (identity
    comparison), None for any other decorator."""
    call = d if isinstance(d, ast.Call) else None
    f = call.func if call else d
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    if name != "dataclass":
        return None
    eq = next((k.value for k in (call.keywords if call else []) if k.arg == "eq"), None)
    return not (isinstance(eq, ast.Constant) and eq.value is False)


def dataclass_fields(tree: ast.Module, rel: str) -> dict[str, list[str]]:
    """``"rel:qualname"`` → compared field names of the dataclasses a source defines whose equality is the
    generated one (no ``eq=False``, no ``__eq__`` of their own, bases that are such classes of the same
    file): what the run reads an instance by, whatever its class's field table says then."""
    out: dict[str, list[str]] = {}
    by_name: dict[str, list[str]] = {}

    def own_fields(node: ast.ClassDef) -> list[str] | None:
        names = []
        for st in node.body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and st.name == "__eq__":
                return None
            if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                continue
            ann = ast.unparse(st.annotation)
            if any(w in ann for w in ("ClassVar", "InitVar", "KW_ONLY")):
                continue
            v = st.value
            if isinstance(v, ast.Call) and (_func_name(v) == "field") and any(
                    k.arg == "compare" and isinstance(k.value, ast.Constant) and k.value.value is False
                    for k in v.keywords):
                continue
            names.append(st.target.id)
        return names

    def walk(body, prefix):
        for node in body:
            if not isinstance(node, ast.ClassDef):
                continue
            kinds = [_is_dataclass_decorator(d) for d in node.decorator_list]
            fields = own_fields(node) if kinds and all(k is not None for k in kinds) and all(kinds) else None
            inherited: list[str] = []
            for b in node.bases:
                if isinstance(b, ast.Name) and b.id in by_name and fields is not None:
                    inherited += [n for n in by_name[b.id] if n not in inherited]
                elif not (isinstance(b, ast.Name) and b.id == "object"):
                    fields = None
            if fields is not None:
                merged = inherited + [n for n in fields if n not in inherited]
                out[f"{rel}:{prefix}{node.name}"] = merged
                if not prefix:
                    by_name[node.name] = merged
            walk(node.body, prefix + node.name + ".")

    walk(tree.body, "")
    return out


def snapshot_dataclasses(snapshot: Path, files: Mapping) -> dict[str, list[str]]:
    """`dataclass_fields` of every Python source of the snapshot (``_walk_files``), parsed once."""
    out: dict[str, list[str]] = {}
    for rel, st in sorted(files.items()):
        if not rel.endswith(".py") or not stat.S_ISREG(st.st_mode) or st.st_size > 2_000_000:
            continue
        try:
            data = (snapshot / rel).read_bytes()
            if b"dataclass" not in data:
                continue
            out.update(dataclass_fields(ast.parse(data), rel))
        except (SyntaxError, ValueError, OSError, RecursionError, MemoryError):
            continue
    return out


def _as_list(x) -> list:
    return x if isinstance(x, list) else [x]


def _conventional_test(qual: str) -> bool:
    parts = qual.split(".")
    if "<locals>" in parts or not parts[-1].startswith("test"):
        return False
    return len(parts) == 1 or (len(parts) == 2 and parts[0].startswith("Test"))


def _parse_value(text: str):
    """A Python literal as ``repr`` writes plain data, ``inf`` and ``nan`` included; raises ValueError."""
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.Name) and value.id in ("inf", "nan"):
                setattr(node, name, ast.Constant(float(value.id)))
            elif isinstance(value, list):
                value[:] = [ast.Constant(float(v.id)) if isinstance(v, ast.Name) and v.id in ("inf", "nan") else v
                            for v in value]
    if isinstance(tree.body, ast.Name) and tree.body.id in ("inf", "nan"):
        return float(tree.body.id)
    return _untag(ast.literal_eval(tree.body))


def _approx(expected, rel, abs_, nan_ok):
    """``pytest.approx`` rebuilt from an observation — only of approx objects test-side code made (the
    observer refuses others: one the code under test returns would equal its own wrong answer) — with a
    finite tolerance."""
    from pytest import approx

    for name, tol in (("rel", rel), ("abs", abs_)):
        if tol is not None and not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol >= 0):
            raise ValueError(f"approx {name}={tol!r}")
    return approx(expected, rel=rel, abs=abs_, nan_ok=nan_ok)


def _call(name, args, kwargs):
    from unittest import mock

    return mock._Call((_checked(str, name), tuple(_checked(tuple, args)), dict(_checked(dict, kwargs))))


def _bounded_range(a, b, c):
    r = range(_checked(int, a), _checked(int, b), _checked(int, c))
    if len(r) > _MAX_ITEMS:
        raise ValueError("range too long to evaluate here")
    return r


def _checked(kind, value):
    if not isinstance(value, kind):
        raise TypeError(kind.__name__)
    return value


_REBUILD = {  # tag → (tuple length, constructor from the tag's fields): values compare as they did there
    "<decimal>": (2, lambda t: decimal.Decimal(_checked(str, t))),
    "<fraction>": (3, lambda n, d: fractions.Fraction(_checked(int, n), _checked(int, d))),
    "<range>": (4, _bounded_range),
    "<call>": (4, _call),
    "<calllist>": (2, lambda calls: __import__("unittest.mock", fromlist=["_CallList"])._CallList(
        _checked(list, calls))),
    "<timedelta>": (4, lambda d, sec, us: datetime.timedelta(days=d, seconds=sec, microseconds=us)),
    "<datetime>": (2, lambda t: datetime.datetime.fromisoformat(_checked(str, t))),
    "<date>": (2, lambda t: datetime.date.fromisoformat(_checked(str, t))),
    "<time>": (2, lambda t: datetime.time.fromisoformat(_checked(str, t))),
    "<path>": (2, lambda t: pathlib.PurePosixPath(_checked(str, t))),
    "<namespace>": (2, lambda d: __import__("types").SimpleNamespace(**_checked(dict, d))),
    "<approx>": (5, _approx),
    "<odict>": (2, lambda pairs: __import__("collections").OrderedDict(_checked(list, pairs))),
    "<counter>": (2, lambda d: __import__("collections").Counter(_checked(dict, d))),
}


def _untag(v, depth: int = 0):
    """The observer's tagged values back as Python values: ``("<set>", items)`` → a frozenset (equal to
    the set it was), ``("<bigint>", hex)`` → the integer (hex: linear to parse, no digit limit)."""
    if depth > 200:
        raise ValueError("too deep")
    if isinstance(v, tuple):
        tag = v[0] if v and isinstance(v[0], str) and v[0].startswith("<") else None
        if tag == "<tuple>" and len(v) == 2 and isinstance(v[1], tuple):  # a value's own tuple, not a tag
            return tuple(_untag(x, depth + 1) for x in v[1])
        if tag == "<set>" and len(v) == 2 and isinstance(v[1], tuple):
            return frozenset(_untag(x, depth + 1) for x in v[1])
        if tag == "<bigint>" and len(v) == 2 and isinstance(v[1], str) and len(v[1]) < 1_000_000:
            return int(v[1], 16)
        rebuilt = _REBUILD.get(tag)
        if rebuilt is not None and len(v) == rebuilt[0]:
            try:
                return rebuilt[1](*[_untag(x, depth + 1) for x in v[1:]])
            except Exception as e:  # noqa: BLE001 — a malformed tag is no value
                raise ValueError(f"bad {tag}") from e
        return tuple(_untag(x, depth + 1) for x in v)
    if isinstance(v, list):
        return [_untag(x, depth + 1) for x in v]
    if isinstance(v, dict):
        return {_untag(k, depth + 1): _untag(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (set, frozenset)):
        return type(v)(_untag(x, depth + 1) for x in v)
    return v


MAX_VALUE_TEXT = 256_000
"""An observed value whose text is longer is not parsed (it satisfies no check)."""
MAX_PARSED = 16_000_000
"""Characters of observed values parsed per run at most (literal_eval in the trainer: memory, time)."""


class CorruptObservations(ValueError):
    """An observation line that is not ``K<TAB>NODE<TAB>LEN<TAB>TEXT`` with LEN = len(TEXT): lines were
    cut or merged (something else wrote to the file), so no observation of the run can be trusted."""


def parse_observations(data: bytes, expected: Mapping[int, object], nonce: str | None = None
                       ) -> dict[int, list[tuple[str, object]]]:
    """``k → [(node id, observed value)...]`` from the untrusted observation file; a value that is not a
    Python literal is a sentinel that satisfies no check; ``~True``/``~False`` is a `Verdict`.
    `CorruptObservations` when any line is malformed (a merged or truncated line could hide one), or —
    given the run's ``nonce`` — when the guard's end record ``end<TAB>NONCE<TAB>N`` is not the last line
    or N is not the number of lines before it (the channel was cut, replaced or written around)."""
    out: dict[int, list[tuple[str, object]]] = {}
    parsed = 0
    lines = data.decode("utf-8", "replace").split("\n")[:-1] if data else []
    if nonce is not None:
        if not lines or lines[-1] != f"end\t{nonce}\t{len(lines) - 1}":
            raise CorruptObservations("the observation channel has no end record for this run (cut, replaced "
                                      "or written around)")
        lines = lines[:-1]
    for line in lines:
        fields = line.split("\t", 3)
        if len(fields) != 4 or not fields[0].isdigit() or not fields[2].isdigit() or int(fields[2]) != len(fields[3]):
            raise CorruptObservations(f"malformed observation line {line[:80]!r}")
        k, node, text = int(fields[0]), fields[1], fields[3]
        if k not in expected:
            continue
        if text in ("~True", "~False"):
            out.setdefault(k, []).append((node, Verdict(text == "~True")))
            continue
        ok, value = False, None
        parsed += len(text)
        if parsed > MAX_PARSED:
            raise CorruptObservations(f"more than {MAX_PARSED} characters of observed values")
        if len(text) <= MAX_VALUE_TEXT:
            try:
                ok, value = True, _parse_value(text)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                ok = False
        out.setdefault(k, []).append((node, value if ok else _UNEQUAL))
    if data and not data.endswith(b"\n"):
        raise CorruptObservations("the observation file ends in the middle of a line")
    return out


class _Unequal:
    def __eq__(self, other):
        return False

    __hash__ = object.__hash__


_UNEQUAL = _Unequal()


@dataclass
class JUnitReport:
    """Outcomes parsed from an untrusted JUnit XML report: (classname, name) → passed?"""

    outcomes: dict[tuple[str, str], bool]
    integrity: list[str]
    any_failed: bool


def parse_junit(data: bytes) -> JUnitReport:
    """Parse pytest's JUnit XML (untrusted): raises ValueError with a reason on anything odd."""
    if not data.strip():
        raise ValueError("empty test report")
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise ValueError("test report rejected: DOCTYPE/ENTITY declarations")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as e:
        raise ValueError(f"malformed test report: {e}") from e
    if root.tag == "testsuites":
        suites = list(root)
    elif root.tag == "testsuite":
        suites = [root]
    else:
        raise ValueError(f"malformed test report: root element <{root.tag[:40]}>")
    if len(suites) != 1 or suites[0].tag != "testsuite":
        raise ValueError(f"malformed test report: {len(suites)} suites (expected one <testsuite>)")
    suite = suites[0]
    integrity = [p.get("value", "") for props in suite.findall("properties") for p in props.findall("property")
                 if p.get("name") == "seqrl_integrity"]
    outcomes: dict[tuple[str, str], bool] = {}
    any_failed = False
    for case in suite.iter("testcase"):
        key = (case.get("classname", ""), case.get("name", ""))
        bad = any(child.tag in ("failure", "error", "skipped") for child in case)
        any_failed |= any(child.tag in ("failure", "error") for child in case)
        outcomes[key] = outcomes.get(key, True) and not bad
    return JUnitReport(outcomes, integrity, any_failed)


# ----------------------------------------------------------------------------- the tree work (root)
def _fresh_copy(snapshot: Path) -> tuple[Path, Path]:
    """``(base, base/repo)``: a throwaway directory any uid can traverse, holding a sealed copy of the
    snapshot (``.git`` and byte-code left out). The caller removes `base`."""
    base = Path(tempfile.mkdtemp(prefix="seqrl-agent-"))
    try:
        os.chmod(base, 0o711)
        work = base / "repo"
        shutil.copytree(snapshot, work, symlinks=True, ignore=_SKIP_COPY)
        _seal(work)
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    return base, work


def _walk_files(root: Path, skip: bool = True) -> dict[str, os.stat_result]:
    """relpath → lstat of every non-directory entry (symlinks not followed, not entered). ``skip``:
    leave out what the copy leaves out (``.git``, ``__pycache__``, ``.pytest_cache``, byte-code)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if skip:
            dirnames[:] = [d for d in dirnames if d not in (".git", "__pycache__", ".pytest_cache")]
            filenames = [f for f in filenames if not f.endswith((".pyc", ".pyo"))]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, name)
            out[os.path.relpath(full, root).replace(os.sep, "/")] = os.lstat(full)
    return out


def _same_file(a: Path, b: Path) -> bool:
    import filecmp

    return filecmp.cmp(a, b, shallow=False)


def _read_capped(path: Path, cap: int) -> bytes | None:
    """Read a regular file without following a symlink; None when it is not one or exceeds ``cap``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            return None
        chunks, got = [], 0
        while got <= cap:
            b = os.read(fd, 1 << 16)
            if not b:
                break
            chunks.append(b)
            got += len(b)
        return b"".join(chunks) if got <= cap else None
    finally:
        os.close(fd)


def _seal(root: Path) -> None:
    """Root-owned, and not writable by anyone else: dirs 0755, files 0644 / 0755 (symlinks untouched)."""
    is_root = os.geteuid() == 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, None]:
            full = dirpath if name is None else os.path.join(dirpath, name)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                continue
            if is_root:
                os.lchown(full, 0, 0)
            mode = 0o755 if stat.S_ISDIR(st.st_mode) or st.st_mode & 0o111 else 0o644
            os.chmod(full, mode)


def _ensure_dir(root: Path, rel_dir: str) -> None:
    """Make ``root/rel_dir`` a real directory, replacing any file that sits on the way."""
    cur = root
    for part in [p for p in rel_dir.split("/") if p]:
        cur = cur / part
        if cur.is_symlink() or (cur.exists() and not cur.is_dir()):
            cur.unlink()
        if not cur.exists():
            cur.mkdir(mode=0o755)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


@lru_cache(maxsize=8)
def _probe_pytest(python: str, paths: tuple[str, ...]) -> str:
    """'' when ``python`` imports pytest from ``paths`` as an unprivileged uid, else why not."""
    import subprocess

    code = f"import sys; sys.path[:0] = {list(paths)!r}; import pytest, _pytest.junitxml"
    kw = dict(user=65534, group=65534, extra_groups=[]) if os.geteuid() == 0 else {}
    try:
        r = subprocess.run([python, "-I", "-S", "-B", "-c", code], capture_output=True, timeout=60, cwd="/",
                           env={"PATH": "/usr/bin:/bin"}, **kw)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{python}: {e}"
    return "" if r.returncode == 0 else r.stderr.decode(errors="replace")[-300:]


HARNESS_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py", "exceptiongroup",
                    "tomli")
"""Top-level packages/modules pytest needs at run time: staged for the sandbox, and names a patch may not add."""
_staged: dict[tuple[str, ...], str] = {}
_stage_lock = threading.Lock()


def stage_pytest(paths: Sequence[str]) -> tuple[str, ...]:
    """A root-owned, read-only copy of the harness packages (``HARNESS_PACKAGES``) found in ``paths``,
    in a fresh directory under the temp dir that any uid can traverse; made once per process.

    Why: the sandbox's uid must import pytest, and a venv under a private (0700) directory is
    unreachable to it; the copy also gives the run read access to pytest alone, not the whole venv.
    """
    key = tuple(os.fspath(p) for p in paths)
    with _stage_lock:
        hit = _staged.get(key)
        if hit is not None and os.path.isdir(hit):
            return (hit,)
        dest = Path(tempfile.mkdtemp(prefix="seqrl-pytest-"))
        import atexit

        owner = os.getpid()  # a forked child exiting must not remove the parent's copy
        atexit.register(lambda: os.getpid() == owner and shutil.rmtree(dest, ignore_errors=True))
        site = dest / "site"
        site.mkdir()
        for name in HARNESS_PACKAGES:
            for d in key:
                pkg, mod = Path(d) / name, Path(d) / f"{name}.py"
                if pkg.is_dir() and (pkg / "__init__.py").is_file():
                    shutil.copytree(pkg, site / name, symlinks=False, ignore=_SKIP_COPY)
                    break
                if mod.is_file():
                    shutil.copyfile(mod, site / mod.name)
                    break
        _seal(dest)
        _staged[key] = str(site)
        return (str(site),)


def _reserved_names() -> frozenset[str]:
    import sys

    return frozenset(sys.stdlib_module_names) | frozenset(HARNESS_PACKAGES) | {"sitecustomize", "usercustomize",
                                                                              "conftest", "__main__"}


def shadowing_names(changed: Sequence[str], pristine: Mapping, patched: Mapping, work: Path,
                    protected=None) -> list[str]:
    """Added files that would be importable under a reserved top-level name (stdlib, pytest and its
    dependencies): ``NAME.py`` / ``NAME/__init__.py`` in the repository root or in any directory that
    is not a package (no ``__init__.py``: ``src/``, a test root pytest may put on ``sys.path``).

    >>> import tempfile, pathlib; w = pathlib.Path(tempfile.mkdtemp())
    >>> for f in ("textwrap.py", "code/notes.py", "src/json/__init__.py", "shop/__init__.py", "shop/io.py"):
    ...     (w / f).parent.mkdir(parents=True, exist_ok=True); _ = (w / f).write_text("")
    >>> files = ["textwrap.py", "code/notes.py", "src/json/__init__.py", "shop/io.py"]
    >>> shadowing_names(files, {}, dict.fromkeys(files), w)
    ['textwrap.py', 'src/json/__init__.py']
    """
    reserved = _reserved_names()
    out = []
    for rel in changed:
        if rel in pristine or rel not in patched or (protected and protected(rel)):
            continue  # protected paths the patch adds are removed before the run
        parts = rel.split("/")
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if last and not part.endswith(".py"):
                break
            if i > 0 and (work.joinpath(*parts[:i]) / "__init__.py").exists():
                break  # inside a package: not a top-level name
            # a directory shadows only as a regular package: a namespace portion loses to any module
            if (part[:-3] if last else part) in reserved and \
                    (last or (work.joinpath(*parts[:i + 1]) / "__init__.py").exists()):
                out.append(rel)
                break
    return out


def default_pytest_path() -> tuple[str, ...]:
    """Directories holding pytest and its dependencies for this interpreter (the trainer's venv)."""
    import importlib.util

    dirs = []
    for mod in ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments"):
        spec = importlib.util.find_spec(mod)
        if spec is None or not spec.origin:
            continue
        d = str(Path(spec.origin).resolve().parent.parent)
        if d not in dirs:
            dirs.append(d)
    return tuple(dirs)


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


def _checks_its_arguments(tree: ast.AST, line: int) -> bool:
    """Whether the statement at ``line`` — an ``assert``, a call, or a ``raise`` under an ``if`` —
    compares values derived from two or more parameters of the function it is in: a checking helper
    (``assert_close(got, want)``, ``got = f(items); assert got == want``), not an invariant of the code
    under test (``assert n >= 0``) nor a precondition of and-ed facts."""
    best = None
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.lineno <= line <= (fn.end_lineno or 0):
            if best is None or fn.lineno >= best.lineno:
                best = fn
    if best is None:
        return False
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
      tests two or more of the function's parameters (a checking helper);
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
        if not rel.endswith(".py") or not is_file(rel):
            continue
        try:
            tree = ast.parse((snapshot / rel).read_bytes())
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        if any(_checks_its_arguments(tree, line) for _, line in tail):
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
    files = _walk_files(snapshot)
    _protect_named_data(snapshot, files, test_side, add)
    importers: dict[str, set[str]] = {}
    parsed: dict[str, set[str]] = {}
    for pair in data.get("imports", []) or []:
        try:
            importers.setdefault(str(pair[0]), set()).add(str(pair[1]))
        except (TypeError, IndexError):
            continue
    for rel, who in sorted(importers.items()):
        if test_side(rel) or not rel.endswith(".py") or not is_file(rel) or not who:
            continue
        if all(test_side(o) for o in who) and _is_data_module(snapshot / rel) \
                and not _imported_by_package(snapshot, files, rel, test_side, parsed):
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


# ----------------------------------------------------------------------------- the reward
@dataclass
class CodeAgentReward:
    """Code-agent trajectory reward; an instance is also a reward function ``(problems, completions)``.

    See the module docstring for the procedure and the formula.
    """

    w_tests: float = 1.0
    """Weight of the test reward (1 when all pristine tests pass, else partial_credit · fraction)."""
    partial_credit: float = 0.5
    """Factor of the passed fraction when not every test passes."""
    w_size: float = 0.1
    """Weight of the size part."""
    w_parses: float = 0.1
    """Weight of the fraction of changed (non-test) Python files that parse."""
    action_penalty: float = 0.01
    """Subtracted per action of the trajectory."""
    max_action_penalty: float = 0.2
    """Cap of the total action penalty."""
    test_edit_penalty: float = 0.0
    """Weight (≤ 0 to punish) of the indicator that the patch touched protected (test) paths."""
    size_free_lines: int = 40
    """Changed lines (outside tests) at or below which size = 1."""
    size_zero_lines: int = 400
    """Changed lines at which size reaches 0."""
    suspect_penalty: float = 0.25
    """Subtracted when added non-test lines match ``_SUSPECT`` (frame inspection, ``sys.modules``/
    ``meta_path``, ``/dev/fd``, ``os._exit``, reading test files …); the files are counted in
    ``parts["suspect_refs"]`` and named in the reason."""
    forbid_harness_refs: bool = True
    """No test reward when added non-test lines mention pytest/_pytest/pluggy/junit/conftest."""
    timeout_s: float = 60.0
    """Sandbox wall-clock limit of one pytest run (collection or tests)."""
    apply_timeout_s: float = 20.0
    """Sandbox wall-clock limit of ``git apply``."""
    memory_mb: int = 2048
    """RLIMIT_AS per process of the pytest run."""
    max_procs: int = 32
    """Processes the tests may start (pids cgroup / RLIMIT_NPROC)."""
    max_patch_bytes: int = 1_000_000
    """Diffs larger than this (UTF-8) score 0."""
    max_report_bytes: int = 8 << 20
    """A JUnit report larger than this earns no test reward."""
    max_tree_files: int = 20_000
    """A patched tree with more files is rejected."""
    max_source_bytes: int = 2_000_000
    """Changed Python files larger than this count as not parsing."""
    git_apply_args: tuple[str, ...] = ("--recount", "--whitespace=nowarn")
    """Extra ``git apply`` options (``--recount``: ignore hunk-header line counts, which models get wrong)."""
    test_dirs: tuple[str, ...] = TEST_DIRS
    """Directory names whose contents are protected (restored from the snapshot)."""
    test_file_patterns: tuple[str, ...] = TEST_FILE_PATTERNS
    """File-name patterns that are protected anywhere."""
    harness_files: tuple[str, ...] = HARNESS_FILES
    """Root-level files that are protected (pytest configuration)."""
    python: str | None = None
    """Interpreter for pytest in the sandbox (default: the sandbox's stdlib interpreter)."""
    python_path: tuple[str, ...] | None = None
    """Directories with pytest and its dependencies (default: this venv's); their harness packages are
    copied to a directory the sandbox uid can read (`stage_pytest`), so they may be private."""
    verdict: str = "outside"
    """``outside``: every ``assert EXPR == LITERAL`` of the pristine test functions is rewritten to hand
    the observed value out, and compared here with the literal, which never enters the sandbox (a test
    passes only when pytest says so *and* its observations match); ``inside``: pytest's report alone."""
    max_workers: int = 2
    """Trajectories scored at once by the batch interface."""
    allow_unconfined: bool = False
    """Run with rlimits only when the sandbox namespaces are unavailable (weak: see docs/sandbox.md)."""

    def __post_init__(self) -> None:
        if self.size_zero_lines <= self.size_free_lines:
            raise ValueError(f"code-agent reward: size_zero_lines must be > size_free_lines "
                             f"(got {self.size_zero_lines} <= {self.size_free_lines})")
        for name in ("timeout_s", "apply_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"code-agent reward: {name} must be > 0 (got {getattr(self, name)})")
        if self.max_workers < 1:
            raise ValueError(f"code-agent reward: max_workers must be >= 1 (got {self.max_workers})")
        if self.verdict not in ("outside", "inside"):
            raise ValueError(f"code-agent reward: verdict must be 'outside' or 'inside' (got {self.verdict!r})")
        if not 0 <= self.partial_credit <= 1:
            raise ValueError(f"code-agent reward: partial_credit must be in [0, 1] (got {self.partial_credit})")
        self.__name__ = "code_agent"
        self._lock = threading.Lock()
        self._collected: dict[tuple, dict] = {}

    # ------------------------------------------------------------------ reward-function interface
    def __call__(self, problems: list[Problem], completions: list) -> list[RewardResult]:
        """``problem.metadata``: ``repo`` (snapshot dir), ``test_cmd``; ``problem.prompt`` is the issue.
        A completion is the final diff (str) or a mapping ``{"diff": str, "actions": list | int}``."""
        if len(problems) != len(completions):
            raise ValueError(f"code-agent reward: {len(problems)} problems for {len(completions)} completions")
        jobs = []
        for p, c in zip(problems, completions):
            md = p.metadata or {}
            for key in ("repo", "test_cmd"):
                if not md.get(key):
                    raise ValueError(f"code-agent reward: problem {p.uid!r} has no {key!r} in its metadata")
            if isinstance(c, Mapping):
                diff, actions = c.get("diff"), c.get("actions", ())
            else:
                diff, actions = c, ()
            jobs.append((md["repo"], p.prompt, actions, diff, md["test_cmd"], md.get("hidden_tests")))
        if len(jobs) == 1 or self.max_workers == 1:
            return [self.score(*j) for j in jobs]
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(jobs))) as ex:
            return list(ex.map(lambda j: self.score(*j), jobs))

    # ------------------------------------------------------------------ one trajectory
    def score(self, repo, issue: str, actions, diff, test_cmd: str, hidden_tests=None) -> RewardResult:
        """Score one trajectory. Raises only on a bad *task* (snapshot, test command, environment).

        ``hidden_tests``: a folder of files (paths relative to the repository root) the policy never saw —
        fail-to-pass and pass-to-pass tests, as SWE-bench judges — laid over the repository after the
        patch is applied (replacing whatever the patch put at those paths) and part of the pristine run."""
        pytest_args = parse_test_cmd(test_cmd)
        snapshot = Path(repo)
        if not snapshot.is_dir():
            raise ValueError(f"code-agent reward: repo {str(repo)!r} is not a directory")
        visible, hidden = snapshot, ()
        if hidden_tests is not None:
            snapshot, hidden = self._with_hidden(snapshot, Path(hidden_tests))
        python, paths = self._interpreter()
        n_actions = _count_actions(actions)
        parts = dict.fromkeys(PARTS, 0.0)
        parts["actions"] = float(n_actions)
        text, why = _screen_diff(diff, self.max_patch_bytes)
        if why:
            return RewardResult(0.0, why, parts)
        collected = self._pristine_tests(snapshot, pytest_args, python, paths)
        try:
            return self._score_patch(snapshot, text, pytest_args, python, paths, collected, parts, visible, hidden)
        except SandboxUnavailable:
            raise
        except Exception as e:  # noqa: BLE001 — model output must never crash the trainer
            return RewardResult(0.0, f"could not score the patch: {type(e).__name__}: {str(e)[:200]}", parts)

    def _with_hidden(self, repo: Path, hidden: Path) -> tuple[Path, tuple[str, ...]]:
        """The repository with the hidden tests laid over it (a root-owned copy, made once per contents
        and removed at exit) and the hidden files' relative paths."""
        if not hidden.is_dir():
            raise ValueError(f"code-agent reward: hidden_tests {str(hidden)!r} is not a directory")
        files = _walk_files(hidden)
        bad = [r for r, st in files.items() if not stat.S_ISREG(st.st_mode)]
        if bad or not files:
            raise ValueError(f"code-agent reward: hidden_tests {str(hidden)!r} must hold regular files only "
                             f"(and at least one): {bad[:3]}")
        h = hashlib.sha256()
        for root in (repo, hidden):
            for rel, st in sorted(_walk_files(root).items()):
                h.update(f"{root}\0{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\n".encode())
        key = ("hidden", h.hexdigest())
        with self._lock:
            hit = self._collected.get(key)
            if hit is None or not hit[0].is_dir():
                import atexit

                base = Path(tempfile.mkdtemp(prefix="seqrl-hidden-"))
                owner = os.getpid()
                atexit.register(lambda: os.getpid() == owner and shutil.rmtree(base, ignore_errors=True))
                combined = base / "repo"
                shutil.copytree(repo, combined, symlinks=True, ignore=_SKIP_COPY)
                for rel in files:
                    _ensure_dir(combined, rel.rsplit("/", 1)[0] if "/" in rel else "")
                    _remove(combined / rel)
                    shutil.copyfile(hidden / rel, combined / rel)
                _seal(base)
                hit = self._collected[key] = (combined, tuple(sorted(files)))
        return hit

    def _interpreter(self) -> tuple[str, tuple[str, ...]]:
        if not os.access(GIT, os.X_OK):  # else every patch would score 0 as "does not apply"
            raise SandboxUnavailable(f"code-agent reward: {GIT} is missing (git applies the patches)")
        python = self.python or _runner._sandbox_python()
        paths = stage_pytest(tuple(self.python_path) if self.python_path is not None else default_pytest_path())
        why = _probe_pytest(python, paths)
        if why:
            raise SandboxUnavailable(f"code-agent reward: pytest is not importable by an unprivileged uid with "
                                     f"{python} and the staged python_path={list(paths)} (pass python= an "
                                     f"interpreter any uid can run, python_path= dirs holding pytest): {why}")
        return python, paths

    def _protected(self, rel: str) -> bool:
        return is_protected(rel, self.test_dirs, self.test_file_patterns, self.harness_files)

    def _sandbox_kw(self) -> dict:
        return dict(allow_unconfined=self.allow_unconfined)

    # ------------------------------------------------------------------ pristine collection (cached)
    def _pristine_tests(self, snapshot: Path, pytest_args: list[str], python: str, paths) -> dict:
        """The pristine snapshot's tests (cached per contents and command): run once in ``pristine``
        mode (collection, function identities, where failing assertions were raised, files read); if
        that run does not finish, collected only."""
        files = _walk_files(snapshot)
        h = hashlib.sha256()
        for rel in sorted(files):
            st = files[rel]
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\n".encode())
        key = (str(snapshot.resolve()), tuple(pytest_args), python, paths, h.hexdigest())
        with self._lock:
            hit = self._collected.get(key)
        if hit is not None:
            return hit
        data = None
        for mode in ("pristine", "collect"):
            base, work = _fresh_copy(snapshot)
            try:
                run = self._pytest(base, work, mode, pytest_args, python, paths, snapshot)
            finally:
                shutil.rmtree(base, ignore_errors=True)
            tail = (run.stdout[-600:] + run.stderr[-300:]).strip()
            try:
                data = json.loads(run.report) if run.status == "ok" else None
            except ValueError:
                data = None
            if data is not None and (mode == "collect" or run.returncode in (0, 1, 2)):
                break  # a pristine run that ends otherwise (timeout, internal error): collect only
        if run.status != "ok":
            raise ValueError(f"code-agent reward: collecting the tests of {snapshot} failed ({run.status}: "
                             f"{run.reason}): {tail}")
        try:
            rows = [(str(r[0]), str(r[1]), str(r[2]), str(r[3]), _ident(r[4]), _ident(r[5]),
                     r[6] if len(r) > 6 and isinstance(r[6], str) else None) for r in data["items"]]
            errors = [(str(i), str(pfx)) for i, pfx in data["errors"]]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"code-agent reward: collecting the tests of {snapshot} gave no usable list "
                             f"(pytest exit {run.returncode}): {tail}") from e
        if run.returncode not in (0, 1, 2):
            raise ValueError(f"code-agent reward: `pytest {shlex.join(pytest_args)}` fails on the snapshot "
                             f"{snapshot} (exit {run.returncode}): {tail}")
        if not rows and not errors:
            raise ValueError(f"code-agent reward: `pytest {shlex.join(pytest_args)}` collects no tests in "
                             f"{snapshot}")
        protect, doctests = pristine_protections(snapshot, rows, errors, data, self._protected)
        result = {"items": [(c, n) for _, c, n, *_ in rows], "nodeids": [r[0] for r in rows],
                  "errors": [pfx for _, pfx in errors], "error_ids": [i for i, _ in errors],
                  "identities": {r[0]: list(r[4]) for r in rows if r[4]},
                  "defs": {r[0]: r[5] for r in rows if r[5]},
                  "modules": sorted(str(m) for m in data.get("modules", []) or []),
                  "module_files": {str(k): str(v) for k, v in (data.get("module_files") or {}).items()
                                   if isinstance(k, str) and isinstance(v, str)},
                  "defs_files": sorted({r[5][0] for r in rows if r[5]} | {r[0].split("::", 1)[0] for r in rows}),
                  "doctests": doctests, "doctest_ids": [r[0] for r in rows if r[3] == "DoctestItem"],
                  "doctest_digests": {r[0]: r[6] for r in rows if r[6]},
                  "protect": protect, "ran": bool(data.get("ran")),
                  "inifile": find_inifile(snapshot), "dataclass_fields": snapshot_dataclasses(snapshot, files),
                  "conftests": sorted(r for r in files if r.rsplit("/", 1)[-1] == "conftest.py")}
        with self._lock:
            self._collected[key] = result
        return result

    def _pytest(self, base: Path, work: Path, mode: str, pytest_args, python, paths, snapshot: Path,
                nonce: str = "", conftests=(), observe: list | None = None, identities: dict | None = None,
                doctests: dict | None = None, own_files: list | None = None, own_names: dict | None = None,
                watch: dict | None = None, dataclasses_: dict | None = None):
        entry = base / "entry.py"
        if not entry.exists():
            shutil.copyfile(ENTRY, entry)
            os.chmod(entry, 0o644)
        ini = find_inifile(snapshot)
        if ini is None:
            ini_path = base / "empty-pytest.ini"
            ini_path.write_text("[pytest]\n")
            os.chmod(ini_path, 0o644)
        else:
            ini_path = work / ini
        cfg = {"mode": mode, "paths": list(paths), "nonce": nonce, "conftests": list(conftests)}
        if identities:
            cfg["identities"] = identities
        if doctests:
            cfg["doctests"] = doctests
        if own_files:
            cfg["own_files"], cfg["own_names"] = own_files, own_names or {}
        if watch:
            cfg["watch"] = watch
        if dataclasses_:
            cfg["dataclass_fields"] = dataclasses_
        writable = []
        if nonce or identities:  # a file the entry reads and unlinks before the project runs: never in argv
            secret = Path(tempfile.mkdtemp(prefix="cfg-", dir=base))
            if observe is not None:
                cfg["observe"] = str(secret / "observations")
                observe.append(secret / "observations")
            cfg = json.dumps(cfg)
            (secret / "cfg.json").write_text(cfg)
            os.chmod(secret / "cfg.json", 0o600)
            cfg, writable = f"@{secret / 'cfg.json'}", [secret]
        cfg = cfg if isinstance(cfg, str) else json.dumps(cfg)
        argv = [python, "-I", "-S", "-B", str(entry), cfg, "-p", "no:cacheprovider",
                "--continue-on-collection-errors", f"--rootdir={work}", f"--confcutdir={work}", "-c", str(ini_path),
                "-o", "junit_family=xunit2", "-o", "junit_logging=no", *pytest_args]
        env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "120"}
        return run_command(argv, cwd=work, timeout_s=self.timeout_s, memory_mb=self.memory_mb,
                           max_file_bytes=8 * self.max_report_bytes,  # the observation file of a long check loop
                           max_procs=self.max_procs, env=env, report=True, max_report_bytes=self.max_report_bytes,
                           max_output_bytes=32_000, read_paths=[base, *paths], writable=writable,
                           **self._sandbox_kw())

    @staticmethod
    def _watched_modules(collected: dict, protected) -> dict[str, str]:
        """Module name → file on the snapshot (relative in the tree, else absolute) of the modules whose
        resolution the run may not change: test-side files and everything outside the tree."""
        return {name: f for name, f in collected.get("module_files", {}).items()
                if os.path.isabs(f) or protected(f) or f in collected.get("defs_files", ())}

    # ------------------------------------------------------------------ outside verdicts
    def _externalize(self, work: Path, collected: dict, protected=None) -> dict | None:
        """Rewrite the (restored, pristine) functions the collected items run — found by the pristine
        collection's identity of each, so an inherited or aliased test is checked where it is defined
        — and every test function of the files that did not collect on the snapshot; the checks per
        node id, and per open file the pristine tree to match its tests to their definitions."""
        wanted: dict[str, set[str]] = {}
        for rel, qual in collected.get("defs", {}).values():
            wanted.setdefault(rel, set()).add(qual)
        open_files = {}
        for nodeid, prefix in zip(collected.get("error_ids", []), collected.get("errors", [])):
            rel = nodeid.split("::", 1)[0]
            if rel.endswith(".py"):
                open_files[prefix] = rel
        expected: dict[int, Expect] = {}
        tests: dict[tuple[str, str], list[int]] = {}
        must: set[int] = set()
        trees: dict[str, ast.Module] = {}
        helpers = {m for m in collected.get("modules", []) if protected is not None and protected(m)}
        for rel in sorted(set(wanted) | set(open_files.values()) | helpers):  # helpers: tests/helpers.py, conftest
            if not rel.endswith(".py") or not (work / rel).is_file() or (work / rel).is_symlink():
                continue
            try:
                text = (work / rel).read_text(encoding="utf-8")
                tree = ast.parse(text)
                only = set(wanted.get(rel, ()))
                if rel in open_files.values():
                    only |= {q for q in function_defs(tree) if _conventional_test(q)}
                src, exp, by_test, top = externalize_asserts(text, len(expected), only, helpers=True)
            except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError):
                continue
            trees[rel] = tree
            if not exp:
                continue
            (work / rel).write_text(src, encoding="utf-8")
            expected.update(exp)
            must |= top
            tests.update({(rel, q): ks for q, ks in by_test.items()})
        _seal(work)
        per_node: dict[str, tuple[list[int], list[int]]] = {}
        for nodeid in collected.get("nodeids", []):
            ident = collected.get("defs", {}).get(nodeid)
            ks = tests.get(tuple(ident), []) if ident else []
            per_node[nodeid] = (ks, [k for k in ks if k in must])
        covered = sum(1 for ks, m in per_node.values() if m)
        opened = {pfx: (rel, trees.get(rel)) for pfx, rel in open_files.items()}
        own = sorted(r for r in set(wanted) | set(open_files.values()) | helpers if r.endswith(".py"))
        own_names, own_trees = {}, {}
        for rel in own:  # the classes each test-side file's own source defines (what the run may record)
            try:
                tree = trees.get(rel) or ast.parse((work / rel).read_bytes())
            except (SyntaxError, ValueError, OSError, RecursionError, MemoryError):
                continue
            own_names[rel] = sorted(_class_qualnames(tree))
            own_trees[rel] = tree
        uses = sorted({tuple(u) for tree in own_trees.values() for u in stdlib_uses(tree)})
        return {"expected": expected, "per_node": per_node, "tests": tests, "must": must, "open": opened,
                "own_files": own, "own_names": own_names, "bindings": helper_bindings(own_trees),
                "stdlib_uses": [list(u) for u in uses],
                "covered": covered / len(per_node) if per_node else 0.0}

    # ------------------------------------------------------------------ the patch
    def _score_patch(self, snapshot: Path, diff: str, pytest_args, python, paths, collected: dict,
                     parts: dict, visible: Path | None = None, hidden: Sequence[str] = ()) -> RewardResult:
        extra = collected.get("protect", {})

        def protected(rel: str) -> bool:
            return self._protected(rel) or rel in extra

        base, work = _fresh_copy(snapshot)
        try:
            for rel in hidden:  # the patch applies to what the policy saw
                _remove(work / rel)
                if visible is not None and (visible / rel).is_file() and not (visible / rel).is_symlink():
                    shutil.copyfile(visible / rel, work / rel)
            patch = base / "patch.diff"
            patch.write_bytes(diff.encode("utf-8", "surrogateescape"))
            os.chmod(patch, 0o644)
            # ---- 1. git apply, in the sandbox, as an unprivileged uid that owns the copy for the run
            env = {"GIT_CEILING_DIRECTORIES": str(base), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
                   "GIT_TERMINAL_PROMPT": "0"}
            ap = run_command([GIT, "apply", *self.git_apply_args, str(patch)], cwd=work, writable=[work], env=env,
                             timeout_s=self.apply_timeout_s, memory_mb=1024, max_procs=8, max_output_bytes=16_000,
                             max_file_bytes=10_000_000, read_paths=[base], **self._sandbox_kw())
            if ap.status != "ok" or ap.returncode != 0:
                msg = (ap.stderr.strip() or ap.stdout.strip() or ap.reason)[-300:]
                return RewardResult(0.0, f"patch does not apply: {msg}" if ap.status == "ok"
                                    else f"patch does not apply: git apply {ap.status}: {ap.reason}", parts)
            parts["applies"] = 1.0
            for rel in hidden:  # then the hidden tests, over whatever the patch put there
                _remove(work / rel)
                _ensure_dir(work, rel.rsplit("/", 1)[0] if "/" in rel else "")
                shutil.copyfile(snapshot / rel, work / rel)
            # ---- 2. sanitise (nothing runs in the tree now)
            pristine = _walk_files(snapshot)
            patched = _walk_files(work, skip=False)  # everything the patch created counts
            if len(patched) > self.max_tree_files:
                return RewardResult(0.0, f"patch rejected: {len(patched)} files in the patched tree "
                                         f"(> {self.max_tree_files})", parts)
            for rel, st in sorted(patched.items()):
                if stat.S_ISLNK(st.st_mode):
                    same = rel in pristine and stat.S_ISLNK(pristine[rel].st_mode) and \
                        os.readlink(work / rel) == os.readlink(snapshot / rel)
                    if not same:
                        return RewardResult(0.0, f"patch rejected: it creates a symlink ({rel})", parts)
                elif not stat.S_ISREG(st.st_mode):
                    return RewardResult(0.0, f"patch rejected: {rel} is not a regular file", parts)
                elif _COMPILED.search(rel):
                    return RewardResult(0.0, f"patch rejected: it adds a compiled file ({rel})", parts)
            _seal(work)
            changed = sorted(r for r in set(pristine) | set(patched)
                             if r not in pristine or r not in patched
                             or not (stat.S_ISLNK(patched[r].st_mode) or _same_file(snapshot / r, work / r)))
            if not changed:
                return RewardResult(0.0, "patch changes nothing", parts)
            shadow = shadowing_names(changed, pristine, patched, work, protected)
            if shadow:
                return RewardResult(0.0, f"patch rejected: it adds a module named after a standard-library or test "
                                         f"harness module ({', '.join(shadow[:3])})", parts)
            for rel in changed:
                cookie = _coding_cookie(work / rel) if rel.endswith(".py") and rel in patched else None
                if cookie and cookie != (_coding_cookie(snapshot / rel) if rel in pristine else None):
                    return RewardResult(0.0, f"patch rejected: {rel} declares a source encoding other than "
                                             f"UTF-8 ({cookie}); the screens read UTF-8", parts)
            touched = [r for r in changed if protected(r)]
            source = [r for r in changed if not protected(r)]
            parts["test_files_touched"] = float(len(touched))
            if not source:
                return RewardResult(0.0, "patch only changes test files (restored from the snapshot): "
                                         + ", ".join(touched[:5]), parts)
            # ---- 3. restore the test harness from the snapshot
            for rel in touched:
                _remove(work / rel)
                if rel in pristine:
                    _ensure_dir(work, rel.rsplit("/", 1)[0] if "/" in rel else "")
                    if stat.S_ISLNK(pristine[rel].st_mode):
                        os.symlink(os.readlink(snapshot / rel), work / rel)
                    else:
                        shutil.copy2(snapshot / rel, work / rel)
            _seal(work)
            # ---- 4. patch quality (here: parsing executes nothing)
            scanned = scan_diff(diff)
            lines = sum(len(a) + len(r) for p, (a, r) in scanned.items() if not protected(p))
            parts["changed_lines"] = float(lines)
            over = max(0, lines - self.size_free_lines)
            parts["size"] = max(0.0, 1.0 - over / (self.size_zero_lines - self.size_free_lines))
            py = [r for r in source if r.endswith(".py") and r in patched]
            ok = 0
            bad_file = ""
            for rel in py:
                data = _read_capped(work / rel, self.max_source_bytes)
                try:
                    if data is None:
                        raise ValueError("too large or not a regular file")
                    ast.parse(data, rel)
                    ok += 1
                except Exception as e:  # noqa: BLE001 — SyntaxError, ValueError (NUL), RecursionError, MemoryError
                    bad_file = bad_file or f"{rel} does not parse: {type(e).__name__}: {getattr(e, 'msg', e)}"
            parts["parses"] = ok / len(py) if py else 1.0
            scanned = {p: ([unicodedata.normalize("NFKC", x) for x in a], r) for p, (a, r) in scanned.items()}
            refs = [p for p, (added, _) in scanned.items() if not protected(p)
                    and any(_HARNESS_REF.search(line) for line in added)]
            parts["harness_refs"] = float(len(refs))
            suspect = {p: m.group(0) for p, (added, _) in scanned.items() if not protected(p)
                       for m in [next(filter(None, map(_SUSPECT.search, added)), None)] if m}
            parts["suspect_refs"] = float(len(suspect))
            reasons = []
            if touched:
                reasons.append(f"test files restored from the snapshot: {', '.join(touched[:5])}")
            if bad_file:
                reasons.append(bad_file[:200])
            # ---- 5. the tests
            if refs and self.forbid_harness_refs:
                reasons.insert(0, f"no test reward: the patch references the test harness outside tests "
                                  f"({', '.join(refs[:3])})")
            else:
                nonce = secrets.token_hex(16)
                void = edited_doctests(snapshot, work, collected)
                outside = self._externalize(work, collected, protected) if self.verdict == "outside" else None
                obs_file: list = []
                run = self._pytest(base, work, "run", pytest_args, python, paths, snapshot, nonce,
                                   collected["conftests"], obs_file if outside else None,
                                   identities=collected.get("identities"),
                                   own_files=outside["own_files"] if outside else None,
                                   own_names=outside["own_names"] if outside else None,
                                   watch={"bindings": outside["bindings"] if outside else {},
                                          "stdlib_uses": outside["stdlib_uses"] if outside else [],
                                          "module_files": self._watched_modules(collected, protected)},
                                   dataclasses_=collected.get("dataclass_fields"),
                                   doctests={n: d for n, d in collected.get("doctest_digests", {}).items()
                                             if n not in void})
                if outside:
                    cap = 8 * self.max_report_bytes
                    data = _read_capped(obs_file[0], cap) if obs_file else None
                    try:
                        if data is None:
                            raise CorruptObservations(f"the observation file is missing, not a regular file or "
                                                      f"larger than {cap} bytes (8 × max_report_bytes)")
                        observed = parse_observations(data, outside["expected"], nonce)
                    except CorruptObservations as e:
                        observed = {}
                        outside["corrupt"] = f"observations rejected: {e}"
                    outside["by_node"], outside["by_junit"] = {}, {}
                    for k, pairs in observed.items():
                        for node, value in pairs:
                            outside["by_node"].setdefault(node, []).append((k, value))
                    for node, pairs in outside["by_node"].items():
                        if node:
                            outside["by_junit"].setdefault(_junit_key(node), []).extend(pairs)
                    parts["outside"] = outside["covered"]
                    opaque = sum(v is _UNEQUAL for pairs in observed.values() for _, v in pairs)
                    if opaque:
                        reasons.append(f"{opaque} compared value(s) were not plain data and count as unequal "
                                       f"(a suite comparing its own objects needs verdict='inside')")
                if void:
                    reasons.append(f"doctest examples edited in {', '.join(sorted(set(void.values()))[:3])}: "
                                   f"those doctests count as failed")
                passed, total, why, failing = _tally(run, nonce, collected, outside, void)
                parts["passed"], parts["total"] = float(passed), float(total)
                parts["pass_frac"] = passed / total if total else 0.0
                if why:
                    reasons.insert(0, why)
                elif total and passed == total:
                    parts["tests"] = 1.0
                else:
                    parts["tests"] = self.partial_credit * parts["pass_frac"]
                    reasons.insert(0, f"{passed}/{total} tests passed; failing: {', '.join(failing[:3])}"
                                      + (" …" if len(failing) > 3 else ""))
        finally:
            shutil.rmtree(base, ignore_errors=True)
        if lines > self.size_free_lines:
            reasons.append(f"{lines} changed lines (free up to {self.size_free_lines})")
        penalty = min(self.action_penalty * parts["actions"], self.max_action_penalty)
        parts["action_penalty"] = penalty
        if penalty:
            reasons.append(f"{int(parts['actions'])} actions (−{penalty:.3g})")
        if suspect and self.suspect_penalty:
            reasons.append(f"suspicious references to the harness (−{self.suspect_penalty:.3g}): "
                           + ", ".join(f"{p}: {w!r}" for p, w in list(suspect.items())[:3]))
        total_score = (self.w_tests * parts["tests"] + self.w_size * parts["size"] + self.w_parses * parts["parses"]
                       - penalty + self.test_edit_penalty * float(bool(touched))
                       - self.suspect_penalty * float(bool(suspect)))
        return RewardResult(round(total_score, 12), "; ".join(reasons), parts)


_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


def _coding_cookie(path: Path) -> str | None:
    """The PEP 263 source encoding a Python file declares in its first two lines, normalised
    (``utf-8`` → None: the default), or None."""
    import codecs

    data = _read_capped(path, 1 << 16) or b""
    for line in data.removeprefix(b"\xef\xbb\xbf").splitlines()[:2]:
        m = _COOKIE.match(line)
        if m:
            name = m.group(1).decode("ascii", "replace").lower()
            try:
                name = codecs.lookup(name).name
            except LookupError:
                pass
            return None if name in ("utf-8", "utf_8", "utf8") else name
        if line.strip() and not line.lstrip().startswith(b"#"):
            break
    return None


def edited_doctests(snapshot: Path, work: Path, collected: dict) -> dict[str, str]:
    """``{doctest node id: its module}`` for modules whose pristine doctest docstrings the patch changed
    or removed (adding doctests is fine): those doctests fail whatever the run reports."""
    out = {}
    for rel, before in (collected.get("doctests") or {}).items():
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
            out.update({n: rel for n in collected.get("doctest_ids", []) if n.split("::", 1)[0] == rel})
    return out


def _count_actions(actions) -> int:
    if isinstance(actions, bool):
        return 0
    if isinstance(actions, int):
        return max(0, actions)
    if isinstance(actions, (str, bytes)) or actions is None:
        return 0 if not actions else 1
    try:
        return len(actions) if isinstance(actions, Sequence) else sum(1 for _ in actions)
    except Exception:  # noqa: BLE001
        return 0


def _screen_diff(diff, max_bytes: int) -> tuple[str, str]:
    """``(diff text, "")`` when worth applying, else ``("", why)``. Never raises."""
    if isinstance(diff, (bytes, bytearray)):
        diff = bytes(diff).decode("utf-8", "replace")
    if not isinstance(diff, str):
        return "", f"no patch: the diff is a {type(diff).__name__}, not text"
    if not diff.strip():
        return "", "empty patch"
    size = len(diff.encode("utf-8", "surrogateescape")) if len(diff) <= max_bytes else max_bytes + 1
    if size > max_bytes:
        return "", f"patch too large: > {max_bytes} bytes"
    if "\0" in diff:
        return "", "patch rejected: it contains NUL bytes (binary)"
    if re.search(r"^GIT binary patch$", diff, re.M):
        return "", "patch rejected: binary patches are not accepted"
    if not _HEADER.search(diff):
        return "", "not a unified diff: no '--- a/…' / '+++ b/…' or 'diff --git' header"
    if not diff.endswith("\n"):
        diff += "\n"  # git apply reports a truncated last line as a corrupt patch
    return diff, ""


def _checks_ok(observations: list, must, expected: Mapping) -> bool:
    """Every check observed while the test ran holds, and each of ``must`` (checks directly in the
    test function's body) was observed while it ran."""
    seen = {k for k, _ in observations}
    if any(k not in seen for k in must):
        return False
    return all(expected[k].holds(v) for k, v in observations)


def _outside_ok(outside: dict | None, nodeid: str) -> bool:
    if not outside:
        return True
    _ks, must = outside["per_node"].get(nodeid, ([], []))
    return _checks_ok(outside["by_node"].get(nodeid, []), must, outside["expected"])


def _junit_key(nodeid: str) -> tuple[str, str]:
    """The JUnit ``(classname, name)`` pytest writes for a test's node id."""
    from _pytest.junitxml import bin_xml_escape, mangle_test_address

    names = mangle_test_address(nodeid)
    return bin_xml_escape(".".join(names[:-1])), bin_xml_escape(names[-1])


def _open_test_ok(outside: dict | None, prefix: str, classname: str, name: str) -> bool:
    """A test of a file that did not collect on the snapshot: matched statically to its definition in
    that (pristine, restored) file and checked like the others; a test that cannot be matched while
    the file was rewritten does not count (its checks may be ones nobody judges)."""
    if not outside or prefix not in outside["open"]:
        return True
    rel, tree = outside["open"][prefix]
    if tree is None:
        return True
    module = rel[:-3].replace("/", ".")
    rest = classname[len(module) + 1:] if classname.startswith(module + ".") else ""
    qual = (rest + "." if rest else "") + re.sub(r"\[.*\]$", "", name)
    found = resolve_test(tree, qual)
    if found is None:
        return False
    ks = outside["tests"].get((rel, found), [])
    mine = outside["by_junit"].get((classname, name), [])
    return _checks_ok(mine, [k for k in ks if k in outside["must"]], outside["expected"])


def _tally(run, nonce: str, collected: dict, outside: dict | None = None,
           void: Mapping[str, str] | None = None) -> tuple[int, int, str, list[str]]:
    """``(passed, total, why no test reward, failing tests)`` from the untrusted run, counted over the
    pristine collection: a pristine test the report lacks has failed; ``void``: node ids that fail
    whatever the report says (doctests whose examples the patch edited)."""
    expected = collected["items"]
    open_prefixes = collected["errors"]
    total = len(expected) + len(open_prefixes)
    tail = (run.stdout.strip().splitlines() or [""])[-1][:200]
    if run.status == "timeout":
        return 0, total, f"tests timed out ({run.reason})", []
    if run.status != "ok":
        return 0, total, f"test run {run.status}: {run.reason}", []
    if run.report_truncated:
        return 0, total, "test report rejected: larger than max_report_bytes", []
    if run.returncode not in (0, 1):
        return 0, total, f"pytest exited {run.returncode} (interrupted, internal error or no tests): {tail}", []
    try:
        rep = parse_junit(run.report)
    except ValueError as e:
        return 0, total, f"{e} (pytest exit {run.returncode}: {tail})", []
    if rep.integrity != [f"ok {nonce}"]:
        what = rep.integrity[0][:200] if rep.integrity else "missing"
        return 0, total, f"harness integrity check failed: {what}", []
    if (run.returncode == 0) == rep.any_failed:
        return 0, total, f"test report inconsistent with pytest's exit status {run.returncode}", []
    if outside and outside.get("corrupt"):
        return 0, total, f"{outside['corrupt']}: no test reward", []
    nodeids = collected.get("nodeids") or [""] * len(expected)
    void = void or {}
    failing = [f"{c}::{n}" for (c, n), nid in zip(expected, nodeids)
               if not (rep.outcomes.get((c, n), False) and _outside_ok(outside, nid) and nid not in void)]
    passed = len(expected) - len(failing)
    total = len(expected)
    for prefix in open_prefixes:  # files that did not collect on the snapshot: their tests as reported now
        mine = [(f"{c}::{n}", v and _open_test_ok(outside, prefix, c, n)) for (c, n), v in rep.outcomes.items()
                if c == prefix or c.startswith(prefix + ".")]
        passed += sum(v for _, v in mine)
        total += max(1, len(mine))
        failing += [k for k, v in mine if not v] or ([] if mine else [f"{prefix} (not collected)"])
    return passed, total, "", failing


def score_code_agent(repo, diff, test_cmd: str, actions=(), issue: str = "",
                     reward: CodeAgentReward | None = None, hidden_tests=None) -> RewardResult:
    """Score one trajectory with `CodeAgentReward` (default weights unless ``reward`` is given)."""
    return (reward or CodeAgentReward()).score(repo, issue, actions, diff, test_cmd, hidden_tests)


CodeAgentRewardFunction = CodeAgentReward  # the seed's name
