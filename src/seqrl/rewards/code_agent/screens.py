"""Screens that run before anything executes: the test command, protected paths, the diff's text, names
that would shadow the standard library or the harness, source encodings."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from seqrl.sandbox.pytest_harness import HARNESS_PACKAGES

from .tree import _read_capped


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


_FORBIDDEN_ARGS = ("--junitxml", "--junit-xml", "--junit-prefix", "--rootdir", "-c", "--config-file",
                   "--confcutdir", "--collect-only", "--co", "--debug", "-p")


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
