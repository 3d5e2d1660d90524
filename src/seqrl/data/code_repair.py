"""Code-repair tasks from real packages: a pinned pure-Python sdist, one seeded single-point mutation of
its source that makes some of its own tests fail, and the reverse edit as the honest fix.

    seqrl data code-repair --packages inflection,six --per-package 20 --seed 0 --out runs/code_repair
    tasks = load_tasks("runs/code_repair"); materialize(tasks[0], "/tmp/snap")   # the buggy snapshot
    materialize(tasks[0], "/tmp/snap", hidden="/tmp/hidden")   # its fail-to-pass test files kept apart

A task (one line of ``tasks.jsonl``): ``id``, ``package``, ``version``, ``file``, ``line``, ``operator``,
``edit`` (byte span of the pristine file and its old/new text), ``test_cmd``, ``bug_diff`` (pristine →
buggy), ``fix_diff`` (buggy → pristine), ``fail_to_pass`` (node ids that pass on the pristine tree and
fail on the buggy one), ``pass_to_pass`` (how many pass on both), ``tree`` (the pristine tree,
relative to the output folder). Tests run the way `seqrl.rewards.code_agent` runs them: in the sandbox,
stdlib + the staged pytest only, the snapshot's pytest config, ``--rootdir`` pinned, work tree last on
``sys.path``.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from seqrl.utils.jsonl import jsonl_rows

__all__ = ["PACKAGES", "Mutant", "Package", "TestRun", "apply_edit", "build", "build_package", "fetch",
           "hidden_test_files", "load_tasks", "make_diff", "materialize", "mutants", "parses", "prepare_tree",
           "pytest_args", "read_source", "resolve", "run_tests", "safe_extract", "selected", "source_files"]


@dataclass(frozen=True)
class Package:
    """A pinned sdist and how its tests run. ``tests``: pytest arguments naming what to run (test files
    or folders); ``src``: the import root inside the tree (a src layout)."""

    name: str
    version: str
    tests: tuple[str, ...]
    src: str = ""
    extra: tuple[str, ...] = ()
    """More pytest arguments (``-o addopts=`` where the config asks for plugins the sandbox lacks)."""
    slow: tuple[str, ...] = ()
    """Node ids (or prefixes) deselected because they take seconds each."""
    source: tuple[str, ...] = ()
    """Where the code to mutate lives (folders or files, relative to the tree); default: the import root's
    top-level packages and modules."""


PACKAGES: dict[str, Package] = {p.name: p for p in (
    Package("inflection", "0.5.1", ("test_inflection.py",)),
    Package("six", "1.17.0", ("test_six.py",)),
    Package("toolz", "1.2.0", ("toolz/tests",)),
    Package("more-itertools", "11.2.1", ("tests/test_recipes.py",), source=("more_itertools/recipes.py",),
            slow=("tests/test_recipes.py::PrimeFunctionTests", "tests/test_recipes.py::PolynomialFromRootsTests")),
    Package("idna", "3.21", ("tests/test_idna.py", "tests/test_idna_codec.py", "tests/test_idna_compat.py",
                             "tests/test_intranges.py")),
    Package("semver", "3.2.0", ("tests",), src="src", extra=("-o", "addopts=")),
    Package("parse", "1.22.4", ("tests",), extra=("-o", "addopts=")),
    Package("cachetools", "8.0.3", ("tests",), src="src"),
    Package("isodate", "0.7.2", ("tests",), src="src", extra=("-o", "pythonpath=src")),
    Package("boltons", "26.2.0", ("tests",)),
    Package("ordered-set", "4.1.0", ("test",)),
    Package("h11", "0.16.0", ("h11/tests",)),
    Package("pyflakes", "4.1.0", ("pyflakes/test",)),
    Package("webcolors", "25.10.0", ("tests",), src="src"),
    Package("tabulate", "0.10.0", ("test",)),
)}
"""The real-package set: pure Python, no runtime dependencies, tests that need only pytest. Left out:
docopt, sortedcontainers, tomli (no tests in the sdist), jmespath (its sdist lacks tests/__init__.py),
text-unidecode and toposort (the test module does not collect), wcwidth (most tests fail in the sandbox),
click, mistune, markdown, sqlparse, pyparsing (suites of 7-100 s)."""

TEST_DIR_NAMES = frozenset({"tests", "test", "testing", "docs", "doc", "examples", "example", "bin", "tools",
                            "scripts", "benchmarks", "bench"})
MAX_SMALL_INT = 16
"""Integer constants up to this are mutated n → n + 1 (larger ones are sizes and magic numbers)."""
# the builder's pytest start: outcomes by node id on fd 3 (the reward's entry reports JUnit names)
RUNNER = r'''
import json, os, sys
cfg = json.loads(sys.argv[1])
sys.path[:0] = cfg["paths"]
import pytest
sys.path.append(os.getcwd())
tests, errors = {}, []
class Recorder:
    def pytest_runtest_logreport(self, report):
        prev = tests.get(report.nodeid, "passed")
        if report.failed:
            tests[report.nodeid] = "failed"
        elif report.skipped and prev == "passed":
            tests[report.nodeid] = "skipped"
        else:
            tests.setdefault(report.nodeid, prev)
    def pytest_collectreport(self, report):
        if report.failed:
            errors.append(report.nodeid)
code = pytest.main(sys.argv[2:], plugins=[Recorder()])
with open("/dev/fd/3", "w") as f:
    json.dump({"code": int(code), "tests": tests, "errors": errors}, f)
'''


# ----------------------------------------------------------------------------- fetch
def safe_extract(archive: Path, dest: Path) -> Path:
    """Extract a .tar.gz/.zip sdist into ``dest``; its single top folder. Absolute paths and ``..`` members
    raise ``ValueError`` before anything is written; links and special files are left out."""
    archive, dest = Path(archive), Path(dest)

    def check(name: str) -> None:
        parts = name.replace("\\", "/").split("/")
        if name.startswith(("/", "\\")) or ".." in parts or re.match(r"^[A-Za-z]:", name):
            raise ValueError(f"{archive.name}: unsafe member {name!r}")

    def put(name: str, is_dir: bool, opener) -> Path:
        target = dest / name
        if is_dir:
            target.mkdir(parents=True, exist_ok=True)
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        with opener() as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out)
        return target

    if archive.name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".tar")):
        with tarfile.open(archive) as tf:
            members = tf.getmembers()
            for m in members:
                check(m.name)
            for m in members:
                if not (m.isfile() or m.isdir()):
                    continue  # a link could point outside the tree
                target = put(m.name, m.isdir(), lambda m=m: tf.extractfile(m))
                if m.isfile():
                    os.chmod(target, 0o755 if m.mode & 0o111 else 0o644)
    elif archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                check(info.filename)
            for info in zf.infolist():
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    continue
                put(info.filename, info.is_dir(), lambda info=info: zf.open(info))
    else:
        raise ValueError(f"{archive.name}: not a .tar.gz or .zip archive")
    tops = [p for p in dest.iterdir()]
    if len(tops) != 1 or not tops[0].is_dir():
        raise ValueError(f"{archive.name}: expected one top-level folder, found {sorted(p.name for p in tops)}")
    return tops[0]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def find_sdist(name: str, version: str, cache_dir: Path) -> Path | None:
    """The cached sdist of ``name==version`` in ``cache_dir`` (file names use ``-`` or ``_``), if any."""
    for p in sorted(Path(cache_dir).glob("*")):
        for ext in (".tar.gz", ".zip"):
            if p.name.endswith(ext) and "-" in p.name:
                base, ver = p.name[:-len(ext)].rsplit("-", 1)
                if _norm(base) == _norm(name) and ver == version:
                    return p
    return None


def fetch(name: str, version: str, cache_dir, dest=None) -> Path:
    """The extracted source tree of ``name==version``'s sdist (downloaded with pip into ``cache_dir``
    unless already there), under ``dest`` (default: ``cache_dir/src``). Raises ``ValueError`` with why."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    archive = find_sdist(name, version, cache_dir)
    if archive is None:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                            "-q", f"{name}=={version}", "-d", str(cache_dir)],
                           capture_output=True, text=True, timeout=600)
        archive = find_sdist(name, version, cache_dir)
        if archive is None:
            lines = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.startswith("ERROR")] or ["no sdist"]
            raise ValueError(f"pip download {name}=={version} failed: {lines[-1][:200]}")
    dest = Path(dest) if dest is not None else cache_dir / "src"
    out = dest / f"{_norm(name)}-{version}"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    top = safe_extract(archive, out)
    return top


# ----------------------------------------------------------------------------- mutation
@dataclass(frozen=True)
class Mutant:
    """Replace bytes ``start:end`` (of the UTF-8 file) holding ``old`` by ``new``; ``line``: where the
    mutated expression or statement starts."""

    file: str
    line: int
    start: int
    end: int
    old: str
    new: str
    operator: str


_CMP_SWAP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==", "in": "not in",
             "not in": "in", "is": "is not", "is not": "is"}
_CMP_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
             ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}
_BIN_SWAP = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.FloorDiv: ("//", "/"), ast.Div: ("/", "//"),
             ast.BitAnd: ("&", "|"), ast.BitOr: ("|", "&"), ast.LShift: ("<<", ">>"), ast.RShift: (">>", "<<")}
_BOOL_SWAP = {ast.And: ("and", "or"), ast.Or: ("or", "and")}


class _Source:
    """Byte offsets of a file's AST positions (``col_offset`` counts UTF-8 bytes)."""

    def __init__(self, text: str):
        self.data = text.encode("utf-8")
        self.starts = [0]
        for m in re.finditer(rb"\n", self.data):
            self.starts.append(m.end())

    def start(self, node) -> int:
        return self.starts[node.lineno - 1] + node.col_offset

    def end(self, node) -> int:
        return self.starts[node.end_lineno - 1] + node.end_col_offset

    def text(self, a: int, b: int) -> str:
        return self.data[a:b].decode("utf-8", errors="replace")


def _gap_op(src: _Source, a: int, b: int, ops: str) -> tuple[int, int, str] | None:
    """The operator alone between two operands (only spaces, parentheses and line continuations around
    it, no comment): its byte span and text."""
    gap = src.text(a, b)
    m = re.fullmatch(rf"([\s()\\]*?)({ops})([\s()\\]*)", gap)
    if m is None:
        return None
    op = re.sub(r"\s+", " ", m.group(2))
    s = a + len(m.group(1).encode())
    return s, s + len(m.group(2).encode()), op


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _in_fstring_or_annotation(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Positions inside f-strings are unreliable before 3.12; annotations are not behaviour."""
    child, cur = node, parents.get(id(node))
    while cur is not None:
        if isinstance(cur, ast.JoinedStr):
            return True
        if isinstance(cur, (ast.arg, ast.AnnAssign)) and getattr(cur, "annotation", None) is child:
            return True
        if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)) and cur.returns is child:
            return True
        child, cur = cur, parents.get(id(cur))
    return False


def mutants(text: str, rel: str) -> list[Mutant]:
    """Every single-point mutant of one source file, in source order (whether it parses is checked
    when it is tried: `parses`)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    src = _Source(text)
    parents = _parents(tree)
    out: list[Mutant] = []

    def add(node, s, e, old, new, op):
        if src.text(s, e) == old and old != new:
            out.append(Mutant(rel, node.lineno, s, e, old, new, op))

    cmp_ops = r"<=|>=|==|!=|<|>|not\s+in|in|is\s+not|is"
    for node in ast.walk(tree):
        if _in_fstring_or_annotation(node, parents):
            continue
        if isinstance(node, ast.Compare):
            left = node.left
            for op, right in zip(node.ops, node.comparators):
                hit = _gap_op(src, src.end(left), src.start(right), cmp_ops)
                if hit and hit[2] == _CMP_TEXT[type(op)]:
                    s, e, t = hit
                    add(node, s, e, src.text(s, e), _CMP_SWAP[t], f"{t} -> {_CMP_SWAP[t]}")
                left = right
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _BIN_SWAP:
            old, new = _BIN_SWAP[type(node.op)]
            a, b = (node.left, node.right) if isinstance(node, ast.BinOp) else (node.target, node.value)
            suffix = "" if isinstance(node, ast.BinOp) else "="
            hit = _gap_op(src, src.end(a), src.start(b), re.escape(old + suffix))
            if hit:
                add(node, hit[0], hit[1], old + suffix, new + suffix, f"{old}{suffix} -> {new}{suffix}")
        elif isinstance(node, ast.BoolOp):
            old, new = _BOOL_SWAP[type(node.op)]
            for a, b in zip(node.values, node.values[1:]):
                hit = _gap_op(src, src.end(a), src.start(b), old)
                if hit:
                    add(node, hit[0], hit[1], old, new, f"{old} -> {new}")
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            s = src.start(node)
            gap = src.text(s, src.start(node.operand))
            m = re.match(r"not\s*", gap)
            if m and re.fullmatch(r"[\s(]*", gap[m.end():]):
                add(node, s, s + len(m.group().encode()), m.group(), "", "drop not")
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            add(node, src.start(node), src.end(node), str(node.value), str(not node.value),
                f"{node.value} -> {not node.value}")
        elif isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= MAX_SMALL_INT:
            s, e = src.start(node), src.end(node)
            if re.fullmatch(r"0|[1-9][0-9]*", src.text(s, e)):
                add(node, s, e, src.text(s, e), str(node.value + 1), f"{node.value} -> {node.value + 1}")
        elif isinstance(node, ast.Return) and node.value is not None and node.lineno == node.value.end_lineno \
                and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            s, e = src.start(node.value), src.end(node.value)
            add(node, s, e, src.text(s, e), "None", "return None")
    out.sort(key=lambda m: (m.start, m.operator))
    return out


def parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def apply_edit(text: str, m: Mutant, reverse: bool = False) -> str:
    """``text`` with the mutant applied (or, ``reverse``, undone on the mutated text)."""
    data = text.encode("utf-8")
    old, new = (m.new, m.old) if reverse else (m.old, m.new)
    end = m.start + len(old.encode())
    if data[m.start:end].decode("utf-8", errors="replace") != old:
        raise ValueError(f"{m.file}:{m.line}: expected {old!r} at byte {m.start}")
    return (data[:m.start] + new.encode() + data[end:]).decode("utf-8")


def read_source(path: Path) -> str:
    """A file's text with its line endings as they are (offsets are byte offsets of the file)."""
    return Path(path).read_bytes().decode("utf-8")


def make_diff(rel: str, old: str, new: str) -> str:
    """A ``git diff``-style unified diff of one file (a/ b/ prefixes), exact also without a final newline."""
    out = [f"diff --git a/{rel} b/{rel}\n"]
    for line in difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}"):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def source_files(tree: Path, pkg: Package) -> list[str]:
    """The package's own (non-test) Python files, relative POSIX paths, sorted."""
    root = tree / pkg.src if pkg.src else tree
    tops = [root / s for s in pkg.source] if pkg.source else sorted(root.iterdir())
    files = []
    for top in tops:
        cands = [top] if top.is_file() else sorted(top.rglob("*.py")) if (top / "__init__.py").is_file() else []
        for f in cands:
            rel = f.relative_to(tree).as_posix()
            parts = f.relative_to(root).parts
            if f.suffix != ".py" or f.name in ("setup.py", "conftest.py", "noxfile.py", "fabfile.py") or \
                    f.name.startswith("test") or f.name.endswith("_test.py") or \
                    any(p in TEST_DIR_NAMES for p in parts[:-1]) or f.name.startswith("_version"):
                continue
            files.append(rel)
    return sorted(set(files))


# ----------------------------------------------------------------------------- running tests
@dataclass
class TestRun:
    """Per node id: ``passed``, ``failed`` or ``skipped``; ``errors``: collectors that failed."""

    status: str
    returncode: int | None
    tests: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    reason: str = ""

    @property
    def passed(self) -> set[str]:
        return {k for k, v in self.tests.items() if v == "passed"}


def pytest_args(pkg: Package, deselect=()) -> list[str]:
    """The package's pytest arguments (what `test_cmd` names after ``python -m pytest``)."""
    args = ["-q", *pkg.extra, *pkg.tests]
    for nodeid in (*pkg.slow, *deselect):
        args.append(f"--deselect={nodeid}")
    return args


def selected(nodeids, deselect) -> set[str]:
    """The node ids a command with ``--deselect=`` each of `deselect` still runs: pytest drops every id
    that *starts with* a deselected one (``test_doubleAssignment`` takes ``test_doubleAssignmentWithUse``
    with it).

    >>> sorted(selected(["t.py::a", "t.py::ab", "t.py::b"], ["t.py::a"]))
    ['t.py::b']
    """
    prefixes = tuple(deselect)
    return {n for n in nodeids if not (prefixes and n.startswith(prefixes))}


def run_tests(tree: Path, args, timeout_s: float = 60.0, replace: dict[str, str] | None = None) -> TestRun:
    """Run ``pytest ARGS`` on a copy of ``tree`` (with the files of ``replace`` rewritten) in the sandbox,
    as the code-agent reward does."""
    from seqrl.sandbox.pytest_harness import default_pytest_path, find_inifile, stage_pytest
    from seqrl.sandbox import run_command
    from seqrl.sandbox.runner import _sandbox_python

    paths = stage_pytest(default_pytest_path())
    base = Path(tempfile.mkdtemp(prefix="seqrl-repair-"))
    try:
        os.chmod(base, 0o711)
        work = base / "repo"
        shutil.copytree(tree, work, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".pytest_cache"))
        for rel, text in (replace or {}).items():
            (work / rel).write_bytes(text.encode("utf-8"))
        for d, dirs, files in os.walk(base):
            for n in dirs:
                os.chmod(os.path.join(d, n), 0o755)
            for n in files:
                os.chmod(os.path.join(d, n), 0o644)
        ini = find_inifile(work)
        ini_path = work / ini if ini else base / "empty-pytest.ini"
        if ini is None:
            ini_path.write_text("[pytest]\n")
            os.chmod(ini_path, 0o644)
        argv = [_sandbox_python(), "-I", "-S", "-B", "-c", RUNNER, json.dumps({"paths": list(paths)}),
                "-p", "no:cacheprovider", "--continue-on-collection-errors", f"--rootdir={work}",
                f"--confcutdir={work}", "-c", str(ini_path), *args]
        env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "120"}
        r = run_command(argv, cwd=work, timeout_s=timeout_s, memory_mb=2048, env=env, report=True,
                        read_paths=[base, *paths], max_output_bytes=16_000)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    tail = (r.stdout[-400:] + r.stderr[-400:]).strip()
    if r.status != "ok":
        return TestRun(r.status, r.returncode, elapsed_s=r.elapsed_s, reason=f"{r.reason}: {tail}")
    try:
        data = json.loads(r.report)
        code = int(data["code"])
        return TestRun("ok", code, dict(data["tests"]), list(data["errors"]), r.elapsed_s,
                       "" if code in (0, 1) else tail)
    except (ValueError, KeyError, TypeError):
        return TestRun("error", r.returncode, elapsed_s=r.elapsed_s, reason=f"no report (exit {r.returncode}): {tail}")


def prepare_tree(tree: Path, pkg: Package) -> None:
    """Make a fetched tree runnable as the reward runs it: a src layout without any pytest config gets a
    ``pytest.ini`` naming its import root (``-o pythonpath=`` is relative to the config file, and the
    reward's stand-in config lies outside the tree)."""
    from seqrl.sandbox.pytest_harness import find_inifile

    if pkg.src and find_inifile(tree) is None:
        (tree / "pytest.ini").write_text(f"[pytest]\npythonpath = {pkg.src}\n")


# ----------------------------------------------------------------------------- building
def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_package(pkg: Package, tree: Path, per_package: int, seed: int, max_tries: int | None = None,
                  log=_say) -> tuple[list[dict], str]:
    """Tasks of one package (pristine ``tree``) and its ``test_cmd``. Raises ``ValueError`` when its tests
    do not run in the sandbox (nothing collected, collection errors on every file, a timeout)."""
    pristine = run_tests(tree, pytest_args(pkg), timeout_s=120.0)
    if pristine.status != "ok" or pristine.returncode not in (0, 1) or not pristine.tests:
        raise ValueError(f"its tests do not run in the sandbox ({pristine.status}, exit {pristine.returncode}): "
                         f"{pristine.reason[-300:]}")
    if pristine.errors:
        raise ValueError(f"collection errors in the sandbox: {', '.join(pristine.errors[:3])}")
    failed = sorted(k for k, v in pristine.tests.items() if v == "failed")
    skipped = sorted(k for k, v in pristine.tests.items() if v == "skipped")
    passing = pristine.passed
    if len(passing) < 3 * len(failed):
        raise ValueError(f"{len(failed)} of {len(pristine.tests)} tests fail on the pristine tree (first: {failed[0]})")
    # what does not pass on the pristine tree is not asked of a fix (the skips are listed in the tasks);
    # pytest deselects by node-id *prefix*, so only the tests the command still selects can be asked
    args = pytest_args(pkg, deselect=failed + skipped)
    passing = selected(passing, (*pkg.slow, *failed, *skipped))
    test_cmd = shlex.join(["python", "-m", "pytest", *args])
    timeout = max(20.0, 5 * pristine.elapsed_s)
    log(f"{pkg.name} {pkg.version}: {len(passing)} tests pass, {len(failed)} fail and {len(skipped)} skip "
        f"(deselected); {pristine.elapsed_s:.1f} s")
    cands = []
    for rel in source_files(tree, pkg):
        cands += mutants(read_source(tree / rel), rel)
    rng = random.Random(f"{seed}:{pkg.name}:{pkg.version}")
    rng.shuffle(cands)
    max_tries = max_tries or 6 * per_package
    tasks, lines, tries = [], set(), 0
    for m in cands:
        if len(tasks) >= per_package or tries >= max_tries:
            break
        if (m.file, m.line) in lines:
            continue  # one mutant per line: tasks stay distinct
        text = read_source(tree / m.file)
        buggy = apply_edit(text, m)
        if not parses(buggy):
            continue
        tries += 1
        run = run_tests(tree, args, timeout_s=timeout, replace={m.file: buggy})
        if run.status != "ok" or run.returncode not in (0, 1) or run.errors:
            continue  # a hang, a crash or an import that fails: the tests must run on the buggy tree
        f2p = sorted(k for k in passing if run.tests.get(k) != "passed")
        if not f2p:
            continue
        lines.add((m.file, m.line))
        tasks.append({"package": pkg.name, "version": pkg.version, "file": m.file, "line": m.line,
                      "operator": m.operator, "edit": {"start": m.start, "old": m.old, "new": m.new},
                      "test_cmd": test_cmd, "bug_diff": make_diff(m.file, text, buggy),
                      "fix_diff": make_diff(m.file, buggy, text), "fail_to_pass": f2p,
                      "pass_to_pass": len(passing) - len(f2p), "skipped_on_pristine": skipped})
        log(f"  {pkg.name} {m.file}:{m.line} {m.operator}: {len(f2p)} fail ({len(tasks)}/{per_package}, "
            f"{tries} tried)")
    tasks.sort(key=lambda t: (t["file"], t["edit"]["start"]))
    for i, t in enumerate(tasks):
        t["id"] = f"{pkg.name}-{i:03d}"
    return tasks, test_cmd


def build(packages=None, out="runs/code_repair", per_package: int = 20, seed: int = 0, force: bool = False,
          cache_dir=None, log=_say) -> list[dict]:
    """Build (or, unless ``force``, reuse per package) the task set: ``out/tasks.jsonl`` and one pristine
    tree per package under ``out/trees``. A package that cannot be fetched, extracted or tested is
    skipped with one line saying why."""
    out = Path(out)
    pkgs = []
    for p in packages or list(PACKAGES):
        try:
            pkgs.append(p if isinstance(p, Package) else resolve(p))
        except ValueError as e:
            log(f"skip {p}: {e}")
    cache_dir = Path(cache_dir) if cache_dir else out / "sdists"
    (out / "trees").mkdir(parents=True, exist_ok=True)
    old = {}
    if (out / "tasks.jsonl").exists() and not force:
        for t in load_tasks(out, absolute=False):
            old.setdefault((t["package"], t["version"]), []).append(t)
    tasks = []
    for pkg in pkgs:
        key = (pkg.name, pkg.version)
        tree_rel = f"trees/{_norm(pkg.name)}-{pkg.version}"
        meta = out / f"{tree_rel}.json"  # beside the tree, never inside a snapshot
        want = {"per_package": per_package, "seed": seed}
        if key in old and meta.exists() and json.loads(meta.read_text()) == want:
            tasks += old[key]
            log(f"{pkg.name} {pkg.version}: {len(old[key])} tasks (kept; --force rebuilds)")
            continue
        t0 = time.time()
        try:
            with tempfile.TemporaryDirectory(prefix="seqrl-sdist-") as tmp:
                src = fetch(pkg.name, pkg.version, cache_dir, dest=tmp)
                if (out / tree_rel).exists():
                    shutil.rmtree(out / tree_rel)
                shutil.copytree(src, out / tree_rel)
            prepare_tree(out / tree_rel, pkg)
            got, _ = build_package(pkg, out / tree_rel, per_package, seed, log=log)
        except (ValueError, OSError, subprocess.SubprocessError, tarfile.TarError, zipfile.BadZipFile) as e:
            log(f"skip {pkg.name} {pkg.version}: {e}")
            continue
        if not got:
            log(f"skip {pkg.name} {pkg.version}: no mutant made a test fail")
            continue
        meta.write_text(json.dumps(want))
        for t in got:
            t["tree"] = tree_rel
        tasks += got
        log(f"{pkg.name} {pkg.version}: {len(got)} tasks in {time.time() - t0:.0f} s")
    built = {(p.name, p.version) for p in pkgs}
    kept = [t for key, ts in old.items() if key not in built for t in ts]  # other packages' tasks stay
    tmp = out / "tasks.jsonl.tmp"
    with open(tmp, "w") as f:
        for t in kept + tasks:
            f.write(json.dumps(t) + "\n")
    os.replace(tmp, out / "tasks.jsonl")
    return tasks


def resolve(spec: str) -> Package:
    """A known package by name, or ``NAME==VERSION`` (any sdist; its tests found by pytest's defaults)."""
    name, sep, version = spec.partition("==")
    if sep:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.+!-]*",
                                                                                       version):
            raise ValueError(f"not a NAME==VERSION pin: {spec!r}")
        known = PACKAGES.get(name)
        return Package(name, version, known.tests if known else (), known.src if known else "")
    if spec not in PACKAGES:
        raise ValueError(f"unknown package (known: {', '.join(PACKAGES)}; or give NAME==VERSION)")
    return PACKAGES[spec]


def load_tasks(out, absolute: bool = True) -> list[dict]:
    """The tasks of ``out/tasks.jsonl``; ``absolute``: ``tree`` made an absolute path."""
    out = Path(out)
    tasks = [row for _, row in jsonl_rows((out / "tasks.jsonl").read_text(), str(out / "tasks.jsonl"))]
    if absolute:
        for t in tasks:
            t["tree"] = str((out / t["tree"]).resolve())
    return tasks


def hidden_test_files(task: dict) -> list[str]:
    """The test files holding ``task``'s fail-to-pass tests (relative paths): what a task judged as
    SWE-bench judges keeps from the policy."""
    return sorted({n.split("::", 1)[0] for n in task["fail_to_pass"]})


def materialize(task: dict, dest, root=None, hidden=None) -> Path:
    """Write the buggy snapshot of ``task`` (its pristine tree with the bug applied) to ``dest`` (new).
    ``hidden``: a new folder that receives the files of `hidden_test_files` (same relative paths),
    which the snapshot then lacks — the policy works on ``dest``, the reward lays ``hidden`` over the
    patched tree (`CodeAgentReward.score(..., hidden_tests=hidden)`)."""
    tree = Path(task["tree"]) if root is None else Path(root) / task["tree"]
    dest = Path(dest)
    shutil.copytree(tree, dest)
    e = task["edit"]
    m = Mutant(task["file"], task["line"], e["start"], e["start"] + len(e["old"].encode()), e["old"], e["new"],
               task["operator"])
    path = dest / task["file"]
    path.write_bytes(apply_edit(read_source(path), m).encode("utf-8"))
    if hidden is not None:
        hidden = Path(hidden)
        hidden.mkdir(parents=True)
        for rel in hidden_test_files(task):
            src = dest / rel
            if not src.is_file() or src.is_symlink() or rel == task["file"]:
                raise ValueError(f"code-repair task {task.get('id')!r}: fail-to-pass test file {rel!r} is not a "
                                 f"regular test file of the snapshot")
            (hidden / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(src), hidden / rel)
    return dest
