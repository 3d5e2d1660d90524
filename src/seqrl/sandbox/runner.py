"""Run untrusted Python in a confined process tree and return unforgeable per-test verdicts.

Layers (all on by default when running as root, see ``docs/sandbox.md``):

- ``rlimits``      RLIMIT_CPU / AS / FSIZE / NOFILE / CORE=0 on the whole tree (``preexec_fn``)
- ``netns``        a fresh network namespace: only a down loopback, no route anywhere
- ``pidns``        a PID namespace whose init is the trusted driver: when it exits or is killed, the
                   kernel kills every process in it, daemonised grandchildren included
- ``mountns``      a private mount namespace with its own ``/proc`` (host processes invisible)
- ``ipcns``        an IPC namespace of its own: no System V object or message queue of the host or
                   of another run is reachable, and whatever the run makes dies with it
- ``pids_cgroup``  a cgroup-v1 ``pids`` group capping the number of tasks (holds for root)
- ``memory_cgroup`` a cgroup-v1 ``memory`` group capping the whole tree's resident memory
                   (RLIMIT_AS caps each process, not their sum)
- ``cpu_cgroup``   a cgroup-v1 ``cpu`` group: a CFS quota of ``Limits.cpus`` CPUs for the whole tree
- ``scratch_tmpfs`` the scratch dir is a tmpfs capped at ``scratch_mb`` / ``scratch_inodes``, mounted
                   in the run's mount namespace at `SCRATCH_DIR` (the host's directory stays empty,
                   and no path the run sees names it)
- ``setuid``       the solution runs as a fresh unprivileged uid (200000+), no groups,
                   ``no_new_privs``, with ``RLIMIT_NPROC`` (which then applies)
- ``seccomp``      a syscall filter (x86_64): no namespaces, mounts, ptrace, eBPF, perf, io_uring,
                   userfaultfd, keyrings, modules, System V IPC, message queues, inotify, …
                   (``_driver.SECCOMP_DENY_X86_64``); sockets only of ``_driver.SOCKET_FAMILIES``
- ``landlock``     the solution reads only system paths, its interpreter and its own dirs, and
                   writes only its scratch dir; no TCP; no signals out of its domain (ABI ≥ 6)

seccomp and Landlock need neither root nor namespaces, so a run that is otherwise ``unconfined``
(not root, opted in) still gets them where the kernel has them.

Launch: as root a run's tree is forked from a pre-started driver interpreter (a *zygote*, one per
concurrent run; ``_Zygote``, ``_driver.zygote_main``) with the same layers as ``setpriv`` + ``unshare``
+ a fresh interpreter, which ``USE_ZYGOTE = False`` (or ``SEQRL_SANDBOX_ZYGOTE=0``) selects instead.

Verdict design: the solution runs in a child of the trusted in-sandbox driver
(``_driver.py``), answers ``f(*args)`` requests with plain data over its own pipe, and never holds
the result channel (a pipe fd passed only to the driver, records stamped with a per-run nonce).
Io-case outputs are compared with their expected values here, in the parent; expected values never
enter the sandbox. Assert-style test code (its asserts rewritten here, `prepare_tests`) runs in the
driver against proxies.
"""

from __future__ import annotations

import ast
import atexit
import json
import math
import os
import re
import secrets
import select
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, fields, replace
from decimal import Decimal
from functools import lru_cache
from pathlib import Path

from seqrl.sandbox._driver import REPORT_FD_ZYGOTE, RUN_FDS, decode_plain, frame
from seqrl.types import RewardResult

DRIVER = Path(__file__).with_name("_driver.py")
PIDS_CGROUP_ROOT = Path("/sys/fs/cgroup/pids")
MEMORY_CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
CPU_CGROUP_ROOT = Path("/sys/fs/cgroup/cpu")
CPU_PERIOD_US = 100_000  # CFS period of the per-run cpu cgroup; the quota is ``cpus`` periods
STRONG_LAYERS = ("netns", "pidns", "mountns", "ipcns", "pids_cgroup", "memory_cgroup", "setuid")
_RESULT_CAP = 32 << 20  # bytes of result-channel data accepted from one run
_SCRATCH_ARCHES = ("x86_64", "aarch64")  # where the driver knows mount(2)'s number
SCRATCH_COVER, SCRATCH_DIR = "/run", "/run/sandbox"
"""Where a run finds its scratch dir (``HOME``, its cwd, a command's ``TMPDIR``) in its mount namespace: the driver
covers ``SCRATCH_COVER`` there with a small root-owned tmpfs (Landlock never grants the host's ``/run``)
and mounts the scratch tmpfs at ``SCRATCH_DIR`` in it, so neither the mount table (``/proc/*/mountinfo``,
``/proc/self/mounts``) nor the environment names the host's ``mkdtemp`` directory. When the host has no
such directory or a path the run needs lies beneath it, the scratch tmpfs goes over the host's directory."""
TREE_MEMORY_SLACK_MB = 64  # default tree limit = memory_mb + this (the driver's own interpreter)


class SandboxUnavailable(RuntimeError):
    """The confining layers cannot be set up here (not root, or ``unshare`` fails)."""


@dataclass(frozen=True)
class Limits:
    """Every resource limit of one sandboxed run (``run_python``'s defaults; :data:`COMMAND_LIMITS`
    for ``run_command``). A bad value raises ``ValueError`` naming the field."""

    timeout_s: float = 2.0
    """Wall clock of the whole run, start-up included; the process tree is killed there."""
    cpu_s: float | None = None
    """RLIMIT_CPU per process (default ``ceil(timeout_s) + 1``; stdio: ``case_timeout_s + 1`` per case)."""
    memory_mb: int = 256
    """RLIMIT_AS per process."""
    tree_memory_mb: int | None = None
    """Resident memory of the whole tree (cgroup ``memory``; default ``memory_mb`` + 64)."""
    max_output_bytes: int = 64_000
    """Kept per stream (stdout, stderr); the rest is discarded."""
    max_file_bytes: int = 1_000_000
    """RLIMIT_FSIZE."""
    max_procs: int = 32
    """Tasks the solution may add (pids cgroup, RLIMIT_NPROC)."""
    cpus: float = 1.0
    """CPU quota of the whole tree (cgroup ``cpu``, CFS): busy threads or processes get at most this
    many CPUs' worth of time."""
    scratch_mb: int = 64
    """Size of the scratch dir (a private ``tmpfs``)."""
    scratch_inodes: int = 4096
    """Inodes of the scratch dir."""
    case_timeout_s: float | None = None
    """stdio cases: wall clock of each case (default ``timeout_s``)."""
    case_output_bytes: int = 2 << 20
    """stdio cases: stdout kept per case (more: the case fails)."""

    def __post_init__(self) -> None:
        optional = ("cpu_s", "tree_memory_mb", "case_timeout_s")
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None and f.name in optional:
                continue
            if type(v) not in (int, float) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"sandbox Limits.{f.name} must be a number > 0 (got {v!r})")

    def updated(self, overrides: dict, where: str) -> Limits:
        """A copy with ``overrides`` (field name → value); an unknown name raises ``TypeError``."""
        names = {f.name for f in fields(self)}
        bad = sorted(set(overrides) - names)
        if bad:
            raise TypeError(f"{where}: unknown argument(s) {bad} (limits are the fields of Limits: {sorted(names)})")
        return replace(self, **overrides) if overrides else self


COMMAND_LIMITS = Limits(timeout_s=30.0, memory_mb=1024, max_file_bytes=10_000_000, scratch_mb=256,
                        scratch_inodes=16384)
"""``run_command``'s defaults: a test suite or ``git apply`` needs more than one function call."""


@dataclass
class TestRecord:
    """One test's verdict: io case ``case[i]`` or one executed assert ``assert@<line>``."""

    name: str
    passed: bool
    reason: str = ""
    elapsed: float = 0.0


@dataclass
class SandboxResult:
    """Outcome of one sandboxed run.

    status: the outcome (table in ``docs/sandbox.md``) — ``ok`` (every test ran and passed),
            ``wrong_answer`` (every test ran, some failed, none raised), ``runtime_error`` (the tested
            code raised in a test; or raised or exited at import, or the process ended before the
            tests finished), ``timeout`` (wall or CPU limit), ``memory`` (MemoryError under
            RLIMIT_AS, or a process killed at the tree's cgroup memory limit), ``syntax_error``,
            ``killed`` (died by a signal).
    passed/total: tests passed / tests counted (io: every case; asserts: every executed assert, plus
            one failing ``<unfinished>`` record when the run did not finish).
    completed: every test was run to its verdict (``ok``, ``wrong_answer``, or ``runtime_error``
            raised inside tests); only then does ``reward(partial=True)`` give the fraction passed.
    """

    status: str
    passed: int
    total: int
    tests: list[TestRecord] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    elapsed_s: float = 0.0
    layers: list[str] = field(default_factory=list)
    reason: str = ""
    completed: bool = False

    @property
    def all_passed(self) -> bool:
        return self.status == "ok" and self.total > 0 and self.passed == self.total

    def reward(self, partial: bool = False) -> RewardResult:
        """Binary (or fraction-passed) reward with a reason whenever it is not full marks."""
        frac = self.passed / self.total if self.total else 0.0
        score = frac if partial and self.completed else float(self.all_passed)
        if score >= 1.0:
            return RewardResult(1.0, "", {"pass_frac": frac})
        why = self.reason or next((f"{t.name}: {t.reason}" for t in self.tests if not t.passed), "")
        return RewardResult(score, f"{self.status}, {self.passed}/{self.total} passed" + (f"; {why}" if why else ""),
                            {"pass_frac": frac})


# ----------------------------------------------------------------------------- capability probe
@lru_cache(maxsize=1)
def _unshare_cmd() -> tuple[str, ...] | None:
    """The namespace wrapper if it works here (root + util-linux ``unshare``), else None."""
    exe = shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if exe is None or os.geteuid() != 0:
        return None
    cmd = (exe, "--net", "--ipc", "--pid", "--fork", "--kill-child", "--mount-proc", "--")
    try:
        r = subprocess.run([*cmd, "/bin/true"], capture_output=True, timeout=10, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.SubprocessError):
        return None
    return cmd if r.returncode == 0 else None


@lru_cache(maxsize=1)
def _sandbox_python() -> str:
    """An interpreter whose standard library an unprivileged uid can read.

    The solution runs as a fresh uid, so an interpreter installed under a private home (pyenv in
    ``/root``) could not import modules the driver had not already loaded; prefer this
    interpreter when it works for ``nobody``, else the system one."""
    if os.geteuid() != 0:
        return sys.executable
    for cand in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            r = subprocess.run([cand, "-I", "-S", "-c", "import socket, json, ast, ctypes, collections, re"],
                               capture_output=True, timeout=10, env={"PATH": "/usr/bin:/bin"}, cwd="/",
                               user=65534, group=65534, extra_groups=[])
        except (OSError, subprocess.SubprocessError):
            continue
        if r.returncode == 0:
            return cand
    return sys.executable


def _can_make_cgroup(base: Path, limit_file: str, value: str) -> bool:
    """Whether a child cgroup of ``base`` can be made and given a limit (made and removed again)."""
    probe = base / f"seqrl-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        probe.mkdir()
        (probe / limit_file).write_text(value)
        return True
    except OSError:
        return False
    finally:
        try:
            probe.rmdir()
        except OSError:
            pass


@lru_cache(maxsize=1)
def _pids_cgroup_ok() -> bool:
    return os.geteuid() == 0 and PIDS_CGROUP_ROOT.is_dir() and _can_make_cgroup(PIDS_CGROUP_ROOT, "pids.max", "4")


# What the solution may read (and execute) under Landlock, besides its interpreter's library paths,
# its scratch dir, the command's cwd and any ``read_paths``: the system's programs, libraries and
# configuration, its own /proc, and the CPU topology (``os.cpu_count``). Not /tmp, /home, /root,
# /work, /srv, /mnt, ...: another run's files, the trainer's data and checkpoints stay invisible.
LANDLOCK_READ = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc",
                 "/sys/devices/system/cpu")
LANDLOCK_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
OPTIONAL_LAYERS = ("seccomp", "landlock")


@lru_cache(maxsize=4)
def _confine_support(python: str) -> dict:
    """Which of seccomp / Landlock work for ``python`` here, and its library paths (``--probe``).

    seccomp needs x86_64 (the filter's syscall table); both need Linux and no_new_privs or root."""
    spec = {"landlock": True, "seccomp": os.uname().machine == "x86_64", "read": list(LANDLOCK_READ),
            "devices": list(LANDLOCK_DEVICES)}
    try:
        r = subprocess.run([python, "-I", "-S", str(DRIVER), "--probe", json.dumps(spec)], capture_output=True,
                           timeout=30, env={"PATH": "/usr/bin:/bin"}, cwd="/")
        out = json.loads(r.stdout)
        return {"landlock": int(out["landlock"]) if type(out.get("landlock")) is int else 0,
                "seccomp": out.get("seccomp") is True, "paths": [str(p) for p in out.get("paths", [])],
                "errors": [str(e) for e in out.get("errors", [])]}
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError) as e:
        return {"landlock": 0, "seccomp": False, "paths": [], "errors": [f"probe failed: {e}"]}


def _own_cgroup_base(root: Path, controller: str, limit_file: str, value: str) -> Path | None:
    """Where per-run cgroup-v1 groups of ``controller`` can be made: under this process's own group
    (so any limit above it still applies), else at the hierarchy's root; None when neither works."""
    if os.geteuid() != 0 or not root.is_dir():
        return None
    cands = []
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            if controller in ctrls.split(",") and path.strip("/"):
                cands.append(root / path.strip("/"))
    except (OSError, ValueError):
        pass
    cands.append(root)
    return next((b for b in cands if _can_make_cgroup(b, limit_file, value)), None)


@lru_cache(maxsize=1)
def _memory_cgroup_base() -> Path | None:
    return _own_cgroup_base(MEMORY_CGROUP_ROOT, "memory", "memory.limit_in_bytes", str(64 << 20))


@lru_cache(maxsize=1)
def _cpu_cgroup_base() -> Path | None:
    return _own_cgroup_base(CPU_CGROUP_ROOT, "cpu", "cpu.cfs_quota_us", str(CPU_PERIOD_US))


def _new_cgroup(base: Path | None) -> Path | None:
    """A fresh per-run cgroup-v1 group under `base` (None where the controller is unavailable), no limit
    yet (`_set_limits`)."""
    if base is None:
        return None
    cg = base / f"seqrl-{os.getpid()}-{secrets.token_hex(6)}"
    cg.mkdir()
    return cg


def _make_cpu_cgroup() -> Path | None:
    return _new_cgroup(_cpu_cgroup_base())


def _set_cpu_quota(cg: Path, cpus: float) -> None:
    (cg / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
    (cg / "cpu.cfs_quota_us").write_text(str(max(1000, int(round(cpus * CPU_PERIOD_US)))))


def _make_memory_cgroup() -> Path | None:
    return _new_cgroup(_memory_cgroup_base())


def _set_memory_limit(cg: Path, limit_bytes: int) -> None:
    (cg / "memory.limit_in_bytes").write_text(str(limit_bytes))
    try:  # with swap accounting, swap counts too (absent or refused without it: RAM only)
        (cg / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
    except OSError:
        pass


def _oom_kills(cg: Path) -> int:
    """Processes the kernel killed for the group's memory limit (``oom_kill`` line, Linux ≥ 4.13),
    or failed charges when that line is missing."""
    try:
        for line in (cg / "memory.oom_control").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return int((cg / "memory.failcnt").read_text())
    except (OSError, ValueError):
        return 0


def available_layers() -> list[str]:
    """Isolation layers a run would get on this machine right now."""
    layers = ["rlimits"]
    unshare = _unshare_cmd() is not None
    if unshare:
        layers += ["netns", "pidns", "mountns", "ipcns", "setuid"]
    if _pids_cgroup_ok():
        layers.append("pids_cgroup")
    if unshare and _memory_cgroup_base() is not None:
        layers.append("memory_cgroup")
    if unshare and _cpu_cgroup_base() is not None:
        layers.append("cpu_cgroup")
    if unshare and os.uname().machine in _SCRATCH_ARCHES:
        layers.append("scratch_tmpfs")
    conf = _confine_support(_sandbox_python() if unshare else sys.executable)
    if conf["seccomp"]:
        layers.append("seccomp")
    if conf["landlock"]:
        layers.append("landlock")
    return layers


def _confine_spec(python: str, skip: tuple, read: list, write: list) -> tuple[dict | None, list[str]]:
    """The ``confine`` message for the driver's child, and the layer names it adds."""
    conf = _confine_support(python)
    spec: dict = {}
    names = []
    if conf["seccomp"] and "seccomp" not in skip:
        spec["seccomp"] = True
        names.append("seccomp")
    if conf["landlock"] and "landlock" not in skip:
        spec["landlock"] = {"read": [*LANDLOCK_READ, *conf["paths"], *read, *write], "write": list(write),
                            "devices": list(LANDLOCK_DEVICES)}
        names.append("landlock")
    return spec or None, names


@lru_cache(maxsize=1)
def _setpriv_nnp() -> tuple[str, ...]:
    """``setpriv --no-new-privs --`` (util-linux) if it works here: sets no_new_privs for the whole tree
    without a ``preexec_fn`` (which would force a real ``fork`` of the trainer: ≈ 30 ms for a 500 MB
    process, vs ≈ 0.2 ms for the ``vfork`` Python uses otherwise)."""
    exe = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if exe is None:
        return ()
    try:
        r = subprocess.run([exe, "--no-new-privs", "--", "/bin/true"], capture_output=True, timeout=10,
                           env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.SubprocessError):
        return ()
    return (exe, "--no-new-privs", "--") if r.returncode == 0 else ()


@lru_cache(maxsize=1)
def _prctl():
    """libc ``prctl`` (looked up once, before any fork: ``preexec_fn`` must not import)."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_DRIVER_CACHE: dict[tuple, str] = {}


def _driver_file(python: str) -> str:
    """The driver compiled by ``python`` into a root-only cache (running a ``.pyc`` skips compiling the
    script on every launch, ≈ 8 ms here); the source file when that fails or we are not root."""
    if os.geteuid() != 0:
        return str(DRIVER)
    st = DRIVER.stat()
    key = (python, st.st_mtime_ns, st.st_size)
    path = _DRIVER_CACHE.get(key)
    if path is not None and os.path.exists(path):
        return path
    d = tempfile.mkdtemp(prefix="seqrl-driver-")  # 0700, root: no sandbox uid can touch it
    owner = os.getpid()  # a forked child's exit must not remove the parent's compiled driver
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(d, True))
    out = os.path.join(d, "_driver.pyc")
    code = "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)"
    try:
        r = subprocess.run([python, "-I", "-S", "-c", code, str(DRIVER), out], capture_output=True, timeout=30,
                           env={"PATH": "/usr/bin:/bin"}, cwd="/")
    except (OSError, subprocess.SubprocessError):
        return str(DRIVER)
    if r.returncode != 0 or not os.path.exists(out):
        return str(DRIVER)
    _DRIVER_CACHE[key] = out
    return out


class _AssertRewriter(ast.NodeTransformer):
    """``assert test, msg`` → ``__seqrl_assert__(line, lambda: (test), lambda: (msg))`` on the tree: the
    fallback of :func:`_rewrite_asserts` (same call, source regenerated by ``ast.unparse``)."""

    def visit_Assert(self, node: ast.Assert):
        msg = node.msg if node.msg is not None else ast.Constant(None)
        empty = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
        call = ast.Call(
            func=ast.Name("__seqrl_assert__", ast.Load()),
            args=[ast.Constant(node.lineno), ast.Lambda(empty, node.test), ast.Lambda(empty, msg)],
            keywords=[],
        )
        return ast.copy_location(ast.Expr(call), node)


_NEWLINE = re.compile(rb"\r\n|\r|\n")  # the line ends the parser counts (not str.splitlines' \f, \x1c, …)


def _rewrite_asserts(tests: str, asserts: list[ast.Assert]) -> str:
    """The source with each assert statement's text replaced by its ``__seqrl_assert__`` call, the
    test and message copied verbatim by the nodes' (UTF-8 byte) positions: 5–10× cheaper than
    ``ast.unparse`` of the whole tree, and every other line keeps its text and its number (newlines
    the call drops, as in ``assert x, \\<newline> msg``, go inside its parentheses)."""
    raw = tests.encode("utf-8", "surrogatepass")
    starts = [0] + [m.end() for m in _NEWLINE.finditer(raw)]

    def at(line: int, col: int) -> int:
        return starts[line - 1] + col

    out, pos = [], 0
    for node in sorted(asserts, key=lambda n: (n.lineno, n.col_offset)):
        a, b = at(node.lineno, node.col_offset), at(node.end_lineno, node.end_col_offset)
        if a < pos:
            raise ValueError("overlapping assert positions")
        parts = []
        for e in (node.test, node.msg):
            parts.append(b"None" if e is None else raw[at(e.lineno, e.col_offset):at(e.end_lineno, e.end_col_offset)])
        lost = len(_NEWLINE.findall(raw[a:b])) - sum(len(_NEWLINE.findall(p)) for p in parts)
        out += [raw[pos:a], b"__seqrl_assert__(%d, lambda: (%s), lambda: (%s)%s)"
                % (node.lineno, parts[0], parts[1], b"\n" * lost)]
        pos = b
    out.append(raw[pos:])
    return b"".join(out).decode("utf-8", "surrogatepass")


@lru_cache(maxsize=64)
def _prepared(tests: str) -> tuple[str, tuple[str, ...], str | None]:
    """:func:`prepare_tests`, cached: the G completions of one prompt share its tests."""
    try:
        tree = ast.parse(tests, "tests.py")
        names, asserts = set(), []
        for n in ast.walk(tree):
            if isinstance(n, ast.Name):
                names.add(n.id)
            elif isinstance(n, ast.Assert):
                asserts.append(n)
        try:
            src = _rewrite_asserts(tests, asserts)
            compile(src, "tests.py", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
        except (RecursionError, MemoryError):
            raise
        except Exception:  # a source the positions do not describe: the tree's own rewrite
            src = ast.unparse(ast.fix_missing_locations(_AssertRewriter().visit(tree)))
    except (SyntaxError, ValueError) as e:
        return "", (), f"test code does not parse: {type(e).__name__}: {e}"
    return src, tuple(sorted(names)), None


def prepare_tests(tests: str) -> dict:
    """Assert-style test code made ready for the driver, here in the trusted parent (the driver then
    needs no ``ast``, ≈ 17 ms of its start-up): ``tests`` = the code with every assert rewritten to
    a recorded ``__seqrl_assert__(line, lambda: (test), lambda: (msg))`` (the original line numbers
    kept), ``test_names`` = every name it loads (proxies are made only for those), or
    ``tests_error`` when it does not parse.
    """
    try:
        src, names, error = _prepared(tests)
    except (RecursionError, MemoryError) as e:  # depends on the caller's stack and memory: not cached
        src, names, error = "", (), f"test code does not parse: {type(e).__name__}: {e}"
    return {"tests": src, "test_names": list(names), "tests_error": error}


# ----------------------------------------------------------------------------- comparison
def plain_equal(got, expected, float_tol: float = 1e-6) -> bool:
    """Strict structural equality of plain data (both sides already decoded, exact types).

    bool is not int; int and float compare by `numbers_equal` (an int expected value exactly, a float one
    within ``float_tol``); list and tuple are interchangeable (JSON datasets lose tuples); dict, set and
    bytes must match exactly by type and content.

    >>> plain_equal(0.1 + 0.2, 0.3), plain_equal(True, 1), plain_equal((1, 2), [1, 2])
    (True, False, True)
    """
    tg, te = type(got), type(expected)
    if tg is bool or te is bool:
        return tg is te and got == expected
    if tg in (int, float) and te in (int, float):
        return numbers_equal(got, expected, float_tol)
    if tg in (list, tuple) and te in (list, tuple):
        return len(got) == len(expected) and all(plain_equal(a, b, float_tol) for a, b in zip(got, expected))
    if tg is dict and te is dict:
        return got.keys() == expected.keys() and all(plain_equal(got[k], expected[k], float_tol) for k in got)
    if tg is te and tg in (str, set, frozenset, bytes, complex, type(None)):
        return got == expected
    return False


def numbers_equal(got: int | float | Decimal, expected: int | float, float_tol: float | None = 1e-6) -> bool:
    """The one number rule of io values and stdio tokens: an int expected value matches only the same
    value (a float 1e9 is not 1,000,000,007, though within a relative 1e-6); a float one any number within
    ``float_tol``, relative or absolute (None: the same value); NaN only NaN.

    >>> numbers_equal(1e9, 1_000_000_007), numbers_equal(3.0, 3), numbers_equal(0.1 + 0.2, 0.3)
    (False, True, True)
    """
    if type(expected) is int or float_tol is None:
        return got == expected
    if math.isnan(got) or math.isnan(expected):
        return math.isnan(got) and math.isnan(expected)
    return math.isclose(got, expected, rel_tol=float_tol, abs_tol=float_tol)


_INT_TOKEN_RE = re.compile(r"[+-]?\d+")
_NUMBER_TOKEN_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _expected_number(token: str) -> int | float | None:
    """An expected token's number: an int for an integer literal, a float for a decimal or exponent one."""
    if not _NUMBER_TOKEN_RE.fullmatch(token):
        return None
    try:
        return int(token) if _INT_TOKEN_RE.fullmatch(token) else float(token)
    except ValueError:  # an integer past Python's digit limit: compared as text
        return None


def _printed_number(token: str) -> Decimal | None:
    """A printed token's exact value: as a float, ``1000000000000000001.0`` would equal 10**18."""
    return Decimal(token) if _NUMBER_TOKEN_RE.fullmatch(token) else None


# ----------------------------------------------------------------------------- the run
def _scratch_point(workdir: str, needed: list) -> tuple[str, str | None]:
    """(the scratch dir's path inside the run, the directory the driver covers first or None): `SCRATCH_DIR`
    under a covered `SCRATCH_COVER`, unless the host lacks it or a path in ``needed`` lies beneath it
    (the cover would hide it); then ``workdir`` itself."""
    if not os.path.isdir(SCRATCH_COVER) or os.path.islink(SCRATCH_COVER):
        return workdir, None
    cover = os.path.realpath(SCRATCH_COVER)
    for p in needed:
        rp = os.path.realpath(p)
        if rp == cover or rp.startswith(cover + os.sep):
            return workdir, None
    return SCRATCH_DIR, SCRATCH_COVER


def _scrubbed_env(home: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "HOME": home}


def _set_limits(pids: Path | None, memory: Path | None, cpu: Path | None, max_tasks: int, memory_bytes: int,
                cpus: float) -> None:
    """One run's limits on its (pids, memory, cpu) groups, each None where the controller is unavailable."""
    if pids is not None:
        (pids / "pids.max").write_text(str(max_tasks))
    if memory is not None:
        _set_memory_limit(memory, memory_bytes)
    if cpu is not None:
        _set_cpu_quota(cpu, cpus)


def _make_cgroup() -> Path | None:
    return _new_cgroup(PIDS_CGROUP_ROOT if _pids_cgroup_ok() else None)


def _destroy_cgroup(cg: Path) -> None:
    deadline = time.monotonic() + 2.0
    nap = 0.0005  # a process killed a moment ago leaves the group within a millisecond or so
    while True:
        try:
            pids = [int(p) for p in (cg / "cgroup.procs").read_text().split()]
        except OSError:
            pids = []
        if not pids:
            break
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            break
        time.sleep(nap)
        nap = min(0.01, nap * 2)
    for _ in range(100):
        try:
            cg.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def run_python(
    solution: str,
    tests: str | None = None,
    io_cases: list | None = None,
    *,
    entry_point: str | None = None,
    stdio_cases: list | None = None,
    limits: Limits | None = None,
    float_tol: float = 1e-6,
    allow_unconfined: bool = False,
    skip_layers: tuple | list = (),
    **limit_overrides,
) -> SandboxResult:
    """Run ``solution`` (Python source) in the sandbox and check it.

    tests:      assert-style test code: top-level asserts naming solution functions, and/or
                ``def check(candidate): assert ...`` (called with the ``entry_point`` function).
    io_cases:   ``[[args...], expected]`` pairs; ``entry_point(*args)`` is compared with
                ``expected`` here, outside the sandbox (see :func:`plain_equal`).
    stdio_cases: ``[input, expected_output]`` string pairs (or ``{"input", "output"}`` dicts): the
                solution is a program run once per case (a fresh process, ``__name__ ==
                "__main__"``) with ``input`` as stdin; its stdout is compared with the expected output
                here (:func:`stdio_equal`); a case passes only if the program also exits 0.
    limits:     every resource limit (:class:`Limits`; its defaults when None); any field of it can
                also be given by name (``timeout_s=5``), overriding ``limits``.
    allow_unconfined: when the strong layers are unavailable run with rlimits only (``layers`` says
                so) instead of raising :class:`SandboxUnavailable`.
    skip_layers: optional layers (``seccomp``, ``landlock``) to leave off, for measuring what they
                cost or do; ``layers`` in the result says what was on.
    """
    lim = (limits or Limits()).updated(limit_overrides, "run_python")
    if stdio_cases is not None:
        if tests is not None or io_cases is not None:
            raise ValueError("run_python: stdio_cases cannot be combined with tests or io_cases")
        return _run_stdio(solution, stdio_cases, lim, float_tol=float_tol, allow_unconfined=allow_unconfined,
                          skip_layers=skip_layers)
    if tests is None and io_cases is None:
        raise ValueError("run_python needs tests, io_cases or stdio_cases (got none)")
    if io_cases is not None and not entry_point:
        raise ValueError("run_python: io_cases need entry_point (the function to call)")
    io_args, io_expected = [], []
    for i, case in enumerate(io_cases or []):
        if not (isinstance(case, (list, tuple)) and len(case) == 2 and isinstance(case[0], (list, tuple))):
            raise ValueError(f"run_python: io_cases[{i}] must be [[args...], expected] (got {case!r:.80})")
        io_args.append(list(case[0]))
        io_expected.append(case[1])

    nonce = secrets.token_hex(16)
    job = {"nonce": nonce, "entry_point": entry_point, "io": io_args if io_cases is not None else None,
           "tests": None}
    if tests is not None:
        job.update(prepare_tests(tests))
    run = _launch({"solution": solution}, job, lim, cwd=None, env=None, writable=(), report_cap=None,
                  allow_unconfined=allow_unconfined, skip_layers=skip_layers)
    return _verdict(run.res, nonce, io_expected if io_cases is not None else None, float_tol, run.timed_out,
                    run.returncode, run.out, run.err, run.elapsed, run.layers, run.oom_kills)


def stdio_equal(got: str, expected: str, float_tol: float | None = 1e-6) -> bool:
    """Judge-style output comparison: the same whitespace-separated tokens (line breaks and trailing
    spaces do not matter); where the *expected* token is a number, a printed number also matches by
    `numbers_equal`, the rule of io cases: exactly for an integer token, within ``float_tol`` (relative
    or absolute) for a decimal or exponent literal (``0.5``, ``1e-3``).

    >>> stdio_equal("1 2\\n3\\n", "1 2 3"), stdio_equal("0.3333333", "0.333333333"), stdio_equal("3", "3.0")
    (True, True, True)
    >>> stdio_equal("1000001", "1000000"), stdio_equal("1e9", "1000000007"), stdio_equal("yes", "YES")
    (False, False, False)
    """
    g, e = got.split(), expected.split()
    if len(g) != len(e):
        return False
    for a, b in zip(g, e):
        if a == b:
            continue
        want, printed = _expected_number(b), _printed_number(a)
        if want is None or printed is None or not numbers_equal(printed, want, float_tol):
            return False
    return True


def stdio_pairs(cases) -> tuple[list[str], list[str]]:
    """``(inputs, expected_outputs)`` of ``stdio_cases``; ``ValueError`` naming the bad case."""
    if not isinstance(cases, (list, tuple)) or not cases:
        raise ValueError("run_python: stdio_cases must be a non-empty list of [input, expected_output]")
    ins, outs = [], []
    for i, c in enumerate(cases):
        if isinstance(c, dict) and set(c) >= {"input", "output"}:
            inp, exp = c["input"], c["output"]
        elif isinstance(c, (list, tuple)) and len(c) == 2:
            inp, exp = c
        else:
            raise ValueError(f"run_python: stdio_cases[{i}] must be [input, expected_output] or "
                             f"{{'input': ..., 'output': ...}} (got {c!r:.80})")
        if not isinstance(inp, str) or not isinstance(exp, str):
            raise ValueError(f"run_python: stdio_cases[{i}] input and output must be strings "
                             f"(got {type(inp).__name__}, {type(exp).__name__})")
        ins.append(inp)
        outs.append(exp)
    return ins, outs


_STATUS_RANK = {"ok": 0, "runtime_error": 1, "killed": 2, "memory": 3, "timeout": 4, "syntax_error": 5}


def _run_stdio(solution: str, cases, lim: Limits, *, float_tol: float, allow_unconfined: bool,
               skip_layers) -> SandboxResult:
    inputs, expected = stdio_pairs(cases)
    timeout_s, cpu_s, case_timeout_s = lim.timeout_s, lim.cpu_s, lim.case_timeout_s
    case_output_bytes, max_output_bytes = lim.case_output_bytes, lim.max_output_bytes
    case_t = min(case_timeout_s or timeout_s, timeout_s)
    case_cpu = int(math.ceil(cpu_s if cpu_s is not None else case_t + 1))
    nonce = secrets.token_hex(16)
    job = {"nonce": nonce, "stdio": inputs, "case_timeout": case_t, "output_cap": int(case_output_bytes),
           "case_cpu": case_cpu}
    # The driver's own RLIMIT_CPU covers the whole run (it forks every case); each case's process
    # sets RLIMIT_CPU = case_cpu on itself (a fresh process starts at zero CPU time).
    run = _launch({"solution": solution, "mode": "stdio"}, job, replace(lim, cpu_s=max(timeout_s + 1, case_cpu)),
                  cwd=None, env=None, writable=(), report_cap=None, allow_unconfined=allow_unconfined,
                  skip_layers=skip_layers)
    recs: dict[int, dict] = {}
    for r in _records(run.res, nonce):
        if r.get("type") == "stdio" and type(r.get("i")) is int:
            recs.setdefault(r["i"], r)
    tests: list[TestRecord] = []
    worst, reason, errs = "ok", "", []
    for i, exp in enumerate(expected):
        r = recs.get(i)
        name = f"case[{i}]"
        if r is None:
            tests.append(TestRecord(name, False, "no result" + (" (wall-clock timeout)" if run.timed_out else "")))
            continue
        el = float(r["elapsed"]) if type(r.get("elapsed")) in (int, float) else 0.0
        err = str(r.get("stderr", ""))
        if err:
            errs.append(f"[case {i}]\n{err}")
        last = next((ln for ln in reversed(err.strip().splitlines()) if ln.strip()), "")[:300]
        sig = r.get("signal") if type(r.get("signal")) is int else None
        code = r.get("code") if type(r.get("code")) is int else None
        if r.get("compile") != "ok":
            st, why = "syntax_error", str(r.get("compile"))[:500]
        elif r.get("timeout") is True:
            st, why = "timeout", f"timeout (case limit {case_t:g} s)"
        elif sig == signal.SIGXCPU:
            st, why = "timeout", f"CPU time limit ({case_cpu} s)"
        elif r.get("output_limit") is True:
            st, why = "runtime_error", f"output limit exceeded ({case_output_bytes} bytes)"
        elif sig is not None:
            st = "memory" if run.oom_kills else "killed"
            why = ("out of memory: killed at the tree limit" if run.oom_kills else f"killed by signal {sig}")
        elif code != 0:
            st = "memory" if "MemoryError" in last else "runtime_error"
            why = f"runtime error (exit {code})" + (f": {last}" if last else "")
        else:
            got = str(r.get("out", ""))
            ok = stdio_equal(got, exp, float_tol)
            tests.append(TestRecord(name, ok, "" if ok else f"wrong answer: expected {exp!r:.200}, got {got!r:.200}",
                                    el))
            continue
        tests.append(TestRecord(name, False, why, el))
        if _STATUS_RANK[st] > _STATUS_RANK[worst]:
            worst, reason = st, f"{name}: {why}"
    if run.timed_out:
        worst, reason = "timeout", f"wall-clock timeout after {timeout_s} s"
    elif len(recs) < len(expected) and worst != "syntax_error":
        if worst == "ok":
            worst, reason = "runtime_error", f"sandbox ended after {len(recs)} of {len(expected)} cases"
    if worst == "syntax_error":
        for t in tests:
            if t.reason == "no result":
                t.reason = "not run (the program does not compile)"
    completed = worst == "ok"
    failed = next((t for t in tests if not t.passed), None)
    if completed and failed is not None:
        worst, reason = "wrong_answer", f"{failed.name}: {failed.reason}"[:500]
    stderr = run.err + ("\n".join(errs) if errs else "")
    if len(stderr) > max_output_bytes:
        stderr = stderr[:max_output_bytes] + f"\n[... {len(stderr) - max_output_bytes} characters truncated]"
    return SandboxResult(worst, sum(t.passed for t in tests), len(tests), tests, run.out, stderr, run.elapsed,
                         run.layers, reason, completed)


@dataclass
class _Launched:
    out: str
    err: str
    res: bytes
    report: bytes
    report_dropped: int
    timed_out: bool
    returncode: int | None
    elapsed: float
    layers: list[str]
    oom_kills: int = 0


def _launch(boot: dict, job: dict, lim: Limits, *, cwd: str | None, env: dict | None, writable,
            report_cap: int | None, allow_unconfined: bool, read_paths=(), skip_layers=()) -> _Launched:
    """One confined run of the driver (both modes): layers, scratch dir, cgroup, rlimits, pump, kill.

    The scratch dir (``HOME``) is fresh, owned by the run's uid and removed afterwards; it is the
    working directory unless ``cwd`` is given. ``writable`` trees are handed to the uid for the
    run and back to root afterwards (symlinks are never followed). Landlock lets the run read the
    system paths, its interpreter, the scratch dir, ``cwd``, ``read_paths`` and ``writable``, and
    write only the scratch dir and ``writable``."""
    timeout_s, cpu_s, memory_mb, max_procs = lim.timeout_s, lim.cpu_s, lim.memory_mb, lim.max_procs
    bad = [x for x in skip_layers if x not in OPTIONAL_LAYERS]
    if bad:
        raise ValueError(f"skip_layers: unknown layer(s) {bad} (only {list(OPTIONAL_LAYERS)} can be skipped)")
    unshare = _unshare_cmd()
    layers = ["rlimits"]
    if unshare is None:
        if not allow_unconfined:
            why = "not root" if os.geteuid() != 0 else "`unshare --net --pid --fork --mount-proc` failed"
            raise SandboxUnavailable(f"sandbox namespaces unavailable ({why}); pass allow_unconfined=True "
                                     "to run with rlimits only")
        layers.append("unconfined")
    else:
        layers += ["netns", "pidns", "mountns", "ipcns", "setuid"]

    cpu = int(math.ceil(cpu_s if cpu_s is not None else timeout_s + 1))
    mem = int(memory_mb) << 20
    uid = 200_000 + secrets.randbelow(60_000) if unshare else None
    workdir = tempfile.mkdtemp(prefix="seqrl-sbx-")
    cg: Path | None = None
    mcg: Path | None = None
    ccg: Path | None = None
    oom = 0
    proc: subprocess.Popen | _ZygoteRun | None = None
    zyg: _Zygote | None = None
    t_start = time.monotonic()
    owned = []
    try:
        if uid is not None:
            os.chown(workdir, uid, uid)
            for tree in writable:
                _chown_tree(tree, uid)
                owned.append(tree)
        python = _sandbox_python() if unshare else sys.executable
        if unshare is not None and zygote_enabled():
            try:
                zyg = _zygote_acquire(python, _driver_file(python))
            except (OSError, RuntimeError, subprocess.SubprocessError):
                zyg = None  # the classic launch: the same layers
        # The whole tree's resident memory (RLIMIT_AS bounds each process, not their sum)
        tree_mb = lim.tree_memory_mb if lim.tree_memory_mb is not None else memory_mb + TREE_MEMORY_SLACK_MB
        prepared = zyg.take_prepared() if zyg is not None else None
        if prepared is not None:  # fresh groups made for this run, its leader already in them
            cg, mcg, ccg = prepared
        elif unshare:  # one at a time: each is removed in `finally` once made
            cg = _make_cgroup()
            mcg = _make_memory_cgroup()
            ccg = _make_cpu_cgroup()
        # tasks: + unshare (leader), driver, solution process; a CPU quota for the whole tree: GIL-free
        # busy threads cannot take the trainer's cores
        _set_limits(cg, mcg, ccg, max_procs + 3, int(tree_mb) << 20, float(lim.cpus))
        layers += [name for name, g in (("pids_cgroup", cg), ("memory_cgroup", mcg), ("cpu_cgroup", ccg))
                   if g is not None]
        cg_procs = ",".join(str(g / "cgroup.procs") for g in (cg, mcg, ccg) if g is not None) or None
        # Unconfined: RLIMIT_NPROC counts every process of our uid, so allow what already runs.
        nproc_unconfined = None if uid is not None else _count_own_processes() + max_procs + 3
        # The driver applies these to itself first thing (before reading any message; nothing
        # untrusted exists yet), so every process of the tree inherits them.
        limits = f"{cpu},{mem},{int(lim.max_file_bytes)},64,{nproc_unconfined or 0}"
        nnp = _setpriv_nnp()
        prctl = None if nnp else _prctl()

        def preexec() -> None:  # only without setpriv (forces a fork): no locks, no allocation-heavy work
            if prctl is not None:
                prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS for the whole tree (the child re-checks it)

        res_r, res_w = os.pipe()
        rep_r = rep_w = None
        if report_cap is not None:
            rep_r, rep_w = os.pipe()
            if uid is not None:  # the uid reopens it as /dev/fd/3 (a pipe inode is 0600, owner checked)
                os.fchown(rep_w, uid, uid)
        pass_fds = (res_w,) if rep_w is None else (res_w, rep_w)
        read = [*(p for p in [cwd] if p), *map(os.fspath, read_paths)]
        if "argv" in boot:  # the command's own install prefix (…/bin/x → …)
            read.append(os.path.dirname(os.path.dirname(os.path.realpath(boot["argv"][0]))))
        home, cover = workdir, None  # the scratch dir as the run sees it
        if uid is not None and os.uname().machine in _SCRATCH_ARCHES:
            layers.append("scratch_tmpfs")
            home, cover = _scratch_point(workdir, [python, *_confine_support(python)["paths"], *read,
                                                   *map(os.fspath, writable)])
        confine, names = _confine_spec(python, tuple(skip_layers), read, [home, *map(os.fspath, writable)])
        layers += names
        try:
            if zyg is not None:  # the same tree, forked by a pre-started driver (it moves the leader into the cgroups)
                meta = {"limits": limits, "cgroups": cg_procs or "-", "cwd": workdir, "env": _scrubbed_env(home),
                        "report": rep_w is not None}
                z, zyg = zyg, None  # owned by _zygote_popen from here
                proc = _zygote_popen(z, meta, res_w, rep_w)  # None: no zygote answered, the classic launch
            zygote = proc is not None
            if proc is None:
                cmd = [*nnp, *(unshare or ()), python, "-I", "-S", _driver_file(python) if unshare else str(DRIVER),
                       str(res_w), limits, cg_procs or "-"]
                proc = subprocess.Popen(
                    cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    cwd=workdir, env=_scrubbed_env(home), pass_fds=pass_fds, start_new_session=True,
                    preexec_fn=None if nnp else preexec,
                )
        finally:
            os.close(res_w)
            if rep_w is not None:
                os.close(rep_w)
        if cg_procs is not None and not zygote:
            _attach_driver(proc.pid, cg_procs)
        boot = {**boot, "uid": uid, "nproc": max_procs if uid is not None else None, "confine": confine}
        if uid is not None and os.uname().machine in _SCRATCH_ARCHES:
            boot["scratch"] = {"path": home, "cover": cover, "size": int(lim.scratch_mb) << 20,
                               "inodes": int(lim.scratch_inodes), "uid": uid}
        if "argv" in boot:
            boot["cwd"] = cwd or home
            boot["env"] = {**_scrubbed_env(home), "TMPDIR": home, **(env or {})}
            boot["report_fd"] = (REPORT_FD_ZYGOTE if zygote else rep_w) if rep_w is not None else None
        extra = {rep_r: report_cap} if rep_r is not None else {}
        data = frame(boot) + frame(job)
        if isinstance(proc, _ZygoteRun):  # the run can start; then the zygote forks the next run's leader
            data = data[proc.write_ahead(data):]
            proc.zygote.prepare()
        # the run's clock starts at hand-over: time spent getting a zygote or launching (a wedged zygote
        # waits up to 10 s before the classic launch) is the machine's, never the program's timeout
        out, err, res, more, timed_out = _pump(proc, data, res_r, deadline=time.monotonic() + timeout_s,
                                               cap=int(lim.max_output_bytes), extra=extra)
    finally:
        if proc is not None:
            _kill_tree(proc)
            if isinstance(proc, _ZygoteRun):
                _zygote_release(proc.zygote, proc.pid)
        if zyg is not None:  # acquired, but the run never reached it
            _zygote_release(zyg, None)
        if cg is not None:
            _destroy_cgroup(cg)
        if mcg is not None:
            oom = _oom_kills(mcg)
            _destroy_cgroup(mcg)
        if ccg is not None:
            _destroy_cgroup(ccg)
        shutil.rmtree(workdir, ignore_errors=True)
        for tree in owned:
            _chown_tree(tree, 0)
    report, dropped = more.get(rep_r, (b"", 0)) if rep_r is not None else (b"", 0)
    return _Launched(out, err, res, report, dropped, timed_out, proc.returncode if proc else None,
                     time.monotonic() - t_start, layers, oom)


# ----------------------------------------------------------------------------- pre-started drivers
USE_ZYGOTE: bool | None = None
"""Launch confined runs from a pre-started driver interpreter (a *zygote*, ``_driver.zygote_main``)
that forks each run's process tree, instead of starting ``unshare`` and an interpreter per run.
None: on unless the environment sets ``SEQRL_SANDBOX_ZYGOTE=0``. Every layer is the same either way."""
MAX_IDLE_ZYGOTES = 8  # kept between runs; one per run in flight, the rest are closed when returned


def zygote_enabled() -> bool:
    if USE_ZYGOTE is not None:
        return bool(USE_ZYGOTE)
    return os.environ.get("SEQRL_SANDBOX_ZYGOTE", "1").strip().lower() not in ("0", "false", "no", "off")


class _Zygote:
    """A driver interpreter started once (``python -I -S _driver.pyc --zygote FD``, no_new_privs, its
    own session, stdio on /dev/null), serving one run at a time over a SOCK_SEQPACKET socket."""

    def __init__(self, python: str, driver: str, start_timeout_s: float = 30.0):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [*_setpriv_nnp(), python, "-I", "-S", driver, "--zygote", str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),), cwd="/", env=_scrubbed_env("/"), start_new_session=True)
        finally:
            theirs.close()
        self.sock, self.owner, self.key = ours, os.getpid(), (python, driver)
        self.prepared: tuple[Path | None, Path | None, Path | None] | None = None
        self.standby: tuple[int, socket.socket] | None = None
        self._awaiting = False  # a "prepared" answer is on its way
        try:
            hello = self.recv(start_timeout_s)
        except TimeoutError:
            hello = None
        if not isinstance(hello, dict) or hello.get("ready") is not True or hello.get("threads") != 1:
            self.kill()
            raise RuntimeError(f"sandbox zygote did not start: {hello!r:.200}")
        self.pid = int(hello["pid"])

    def recv(self, timeout_s: float | None, with_fds: bool = False):
        """The next message (a dict; with ``with_fds``, ``(dict, fds)``); None when the zygote is gone;
        ``TimeoutError`` after ``timeout_s``."""
        self.sock.settimeout(timeout_s)
        fds: list[int] = []
        try:
            data, anc, _, _ = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(4 * RUN_FDS))
        except (socket.timeout, BlockingIOError):
            raise TimeoutError from None
        except OSError:
            data, anc = b"", []
        for level, kind, blob in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += [int.from_bytes(blob[i:i + 4], sys.byteorder) for i in range(0, len(blob) - 3, 4)]
        msg = None
        if data:
            try:
                msg = json.loads(data)
            except ValueError:
                msg = None
        msg = msg if isinstance(msg, dict) else None
        if with_fds:
            return msg, fds
        for fd in fds:
            os.close(fd)
        return msg

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def take_prepared(self) -> tuple[Path | None, Path | None, Path | None] | None:
        """The fresh (pids, memory, cpu) cgroups, without limits yet, whose leader the zygote forked
        ahead; that leader's pid and socket go to ``self.standby`` (None when it is not there)."""
        groups, self.prepared = self.prepared, None
        self._discard_standby()
        if groups is not None and self._awaiting:
            self._awaiting = False
            try:
                msg, fds = self.recv(10.0, with_fds=True)
            except TimeoutError:
                msg, fds = None, []
            if msg is not None and type(msg.get("prepared")) is int and len(fds) == 1:
                self.standby = (msg["prepared"], socket.socket(fileno=fds[0]))
            else:
                for fd in fds:
                    os.close(fd)
        return groups

    def prepare(self) -> None:
        """Make the next run's cgroups (no limits yet) and have the zygote fork that run's leader into them
        now, while a run executes (a cgroup-v1 attach waits for an RCU grace period)."""
        self._drop_prepared()
        groups: list[Path | None] = []
        try:
            groups = [_make_cgroup()]
            groups.append(_make_memory_cgroup())
            groups.append(_make_cpu_cgroup())
            procs = ",".join(str(g / "cgroup.procs") for g in groups if g is not None) or "-"
            self.sock.send(json.dumps({"prepare": procs}).encode())
        except OSError:
            for g in groups:
                if g is not None:
                    _destroy_cgroup(g)
            return
        self.prepared, self._awaiting = (groups[0], groups[1], groups[2]), True

    def _discard_standby(self) -> None:
        if self.standby is not None:
            pid, s = self.standby
            self.standby = None
            s.close()  # it reads EOF and exits
            try:
                self.sock.send(json.dumps({"reap": pid}).encode())
            except OSError:
                pass

    def _drop_prepared(self) -> None:
        groups = self.take_prepared()  # reads an answer still in flight, so its socket is closed here
        self._discard_standby()
        for g in groups or ():
            if g is not None:
                _destroy_cgroup(g)

    def kill(self) -> None:
        if self.owner != os.getpid():
            return  # a forked copy of the runner: the zygote is its parent's
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._awaiting = False
        if self.standby is not None:
            self.standby[1].close()
            self.standby = None
        for g in self.take_prepared() or ():  # its waiting leader died with it (PDEATHSIG)
            if g is not None:
                _destroy_cgroup(g)
        self.sock.close()


_ZYGOTE_LOCK = threading.Lock()
_ZYGOTES: list[_Zygote] = []


def _forget_zygotes_in_child() -> None:
    """A fork of the runner (a data-loader worker, ...) starts its own zygotes: the parent's are the
    parent's (never used, killed or messaged from here), and the lock may have been held by a thread
    that does not exist in the child."""
    global _ZYGOTE_LOCK
    _ZYGOTE_LOCK = threading.Lock()
    _ZYGOTES.clear()


os.register_at_fork(after_in_child=_forget_zygotes_in_child)


def _zygote_acquire(python: str, driver: str) -> _Zygote:
    with _ZYGOTE_LOCK:
        while _ZYGOTES:
            z = _ZYGOTES.pop()
            if z.key == (python, driver) and z.alive():
                return z
            z.kill()
    return _Zygote(python, driver)


def _zygote_release(z: _Zygote, leader: int | None) -> None:
    """Back to the idle list (the zygote reaps the run's ``leader`` now); a dead one is dropped."""
    if z.alive():
        try:
            if leader is not None:
                z.sock.send(json.dumps({"reap": leader}).encode())  # no reply
        except OSError:
            pass
        else:
            with _ZYGOTE_LOCK:
                if len(_ZYGOTES) < MAX_IDLE_ZYGOTES:
                    _ZYGOTES.append(z)
                    return
    z.kill()


_OWNER = os.getpid()


@atexit.register
def close_zygotes() -> None:
    """Stop every idle zygote (they also exit by themselves when this process ends); not from a process
    forked from this one, whose exit would kill the parent's zygotes."""
    if os.getpid() != _OWNER:
        return
    with _ZYGOTE_LOCK:
        zs = list(_ZYGOTES)
        _ZYGOTES.clear()
    for z in zs:
        z.kill()


def zygote_pids() -> list[int]:
    """Pids of the idle zygotes (for tests and benchmarks)."""
    with _ZYGOTE_LOCK:
        return [z.pid for z in _ZYGOTES if z.alive()]


class _ZygoteRun:
    """One run forked by a zygote, with the ``subprocess.Popen`` surface ``_pump``/``_kill_tree`` use.
    ``pid`` is the run's leader (its process group id; the zygote reaps it only when released); its
    exit status comes over a pipe only the leader holds (EOF without a status: it was killed)."""

    def __init__(self, z: _Zygote, pid: int, in_w: int, out_r: int, err_r: int, st_r: int):
        self.zygote, self.pid, self.returncode = z, pid, None
        self.stdin = os.fdopen(in_w, "wb", buffering=0)
        self.stdout = os.fdopen(out_r, "rb", buffering=0)
        self.stderr = os.fdopen(err_r, "rb", buffering=0)
        self._st, self._buf = os.fdopen(st_r, "rb", buffering=0), b""
        os.set_blocking(st_r, False)

    def _read(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            r, _, _ = select.select([self._st], [], [], left)
            if not r:
                return
            try:
                chunk = os.read(self._st.fileno(), 64)
            except BlockingIOError:
                continue
            if chunk:
                self._buf += chunk[:32]
                continue
            self._st.close()
            try:
                st = int(self._buf)
            except ValueError:
                self.returncode = -signal.SIGKILL  # the leader was killed (timeout, or its zygote died)
            else:
                self.returncode = -(st - 128) if st > 128 else st

    def write_ahead(self, data: bytes) -> int:
        """Write what the stdin pipe takes now without blocking; returns the bytes written."""
        fd = self.stdin.fileno()
        os.set_blocking(fd, False)
        try:
            return os.write(fd, data[:1 << 16])
        except (BlockingIOError, BrokenPipeError):
            return 0

    def poll(self) -> int | None:
        self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._read(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired("sandbox zygote run", timeout)
        return self.returncode


def _zygote_popen(z: _Zygote, meta: dict, res_w: int, rep_w: int | None) -> _ZygoteRun | None:
    """Start one run from zygote ``z``: fresh pipes, the run's fds passed as 0–5 (SCM_RIGHTS) straight
    to the leader it forked ahead for this run's cgroups (else through the zygote, which forks one
    now). A zygote that is gone or does not answer is replaced by a fresh one and the start tried
    once more (nothing of the run has been sent yet); None when that fails too."""
    for attempt in range(2):
        if attempt:
            try:
                z = _Zygote(*z.key)
            except (OSError, RuntimeError, subprocess.SubprocessError):
                return None
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        st_r, st_w = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) if rep_w is None else None
        pid = None
        try:
            fds = [in_r, out_w, err_w, res_w, rep_w if rep_w is not None else null, st_w]
            assert len(fds) == RUN_FDS
            anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds))]
            standby, z.standby = z.standby, None
            if standby is not None:
                try:
                    standby[1].sendmsg([json.dumps(meta).encode()], anc)
                    pid = standby[0]
                except OSError:  # it died waiting
                    z.sock.send(json.dumps({"reap": standby[0]}).encode())
                finally:
                    standby[1].close()
            if pid is None:
                z.sock.sendmsg([json.dumps({"run": meta}).encode()], anc)
                reply = z.recv(10.0)
                if isinstance(reply, dict) and type(reply.get("pid")) is int:
                    pid = reply["pid"]
        except (OSError, TimeoutError):
            pass
        finally:
            for fd in (in_r, out_w, err_w, st_w, *([null] if null is not None else [])):
                os.close(fd)
        if pid is not None:
            return _ZygoteRun(z, pid, in_w, out_r, err_r, st_r)
        for fd in (in_w, out_r, err_r, st_r):
            os.close(fd)
        z.kill()
    return None


def _attach_driver(unshare_pid: int, cg_procs: str, timeout_s: float = 1.0) -> None:
    """Put the driver (``unshare``'s only child) into the cgroups (``cg_procs``: comma-separated
    ``cgroup.procs`` files) while its interpreter starts.

    A cgroup-v1 attach waits for an RCU grace period when none is in flight (≈ 8–15 ms here); done
    here, it overlaps the driver's start-up instead of delaying it. Best effort: the driver checks
    ``/proc/self/cgroup`` after reading its first message and before it forks anything, and joins
    by itself when this did not happen (``_driver._join_cgroup``)."""
    path = f"/proc/{unshare_pid}/task/{unshare_pid}/children"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(path, "rb") as f:
                kids = f.read().split()
        except OSError:
            return
        if kids:
            for procs in cg_procs.split(","):
                try:
                    fd = os.open(procs, os.O_WRONLY)
                    try:
                        os.write(fd, kids[0])
                    finally:
                        os.close(fd)
                except OSError:
                    pass
            return
        time.sleep(0.0003)


def _chown_tree(root: str | os.PathLike, uid: int) -> None:
    """``lchown`` a directory tree to ``uid:uid`` without following any symlink (no process runs in it)."""
    os.lchown(root, uid, uid)
    for dirpath, dirnames, filenames in os.walk(root):  # followlinks=False: symlinked dirs are not entered
        for name in dirnames + filenames:
            try:
                os.lchown(os.path.join(dirpath, name), uid, uid)
            except FileNotFoundError:
                pass


@dataclass
class CommandResult:
    """Outcome of :func:`run_command`. Everything in it came from untrusted code: treat it as data.

    status: ``ok`` (the command exited; see ``returncode``), ``timeout`` (wall clock or RLIMIT_CPU),
            ``memory`` (it or a process it started was killed at the tree's memory limit and it failed),
            ``killed`` (died by another signal), ``error`` (``execve`` failed or the sandbox broke).
    report: what the command wrote to fd 3 (``/dev/fd/3``) when run with ``report=True``, at most
            ``max_report_bytes``; ``report_truncated`` says whether more was written.
    """

    status: str
    returncode: int | None
    signal: int | None
    stdout: str = ""
    stderr: str = ""
    report: bytes = b""
    report_truncated: bool = False
    elapsed_s: float = 0.0
    layers: list[str] = field(default_factory=list)
    reason: str = ""


def run_command(
    argv: list[str],
    *,
    cwd: str | os.PathLike,
    limits: Limits | None = None,
    env: dict[str, str] | None = None,
    writable: tuple | list = (),
    report: bool = False,
    max_report_bytes: int = 4 << 20,
    allow_unconfined: bool = False,
    read_paths: tuple | list = (),
    skip_layers: tuple | list = (),
    **limit_overrides,
) -> CommandResult:
    """Run ``argv`` (an executable path and its arguments, no shell) in the sandbox, in ``cwd``.

    The same layers and limits as :func:`run_python` (namespaces, fresh uid, pids cgroup, rlimits,
    output caps, whole-tree kill); the environment is the scrubbed one plus ``TMPDIR`` (the fresh
    scratch dir, also ``HOME``) plus ``env``. ``cwd`` must be reachable by an unprivileged uid (world
    ``x`` on every directory above it); the command can write only where an unprivileged uid can,
    plus the ``writable`` trees, which are ``lchown``-ed to the run's uid before the run and back to
    root afterwards. Under Landlock the command reads only the system paths, ``cwd``, its own install
    prefix, ``read_paths`` and ``writable`` (plus the scratch dir). ``report=True`` gives the command
    a pipe as fd 3 (``/dev/fd/3``) whose bytes come back in ``CommandResult.report`` (capped at
    ``max_report_bytes``) — a channel, not a trust boundary: anything the command runs can write to it.
    """
    if not (isinstance(argv, (list, tuple)) and argv and all(isinstance(a, str) for a in argv)):
        raise ValueError(f"run_command: argv must be a non-empty list of strings (got {argv!r:.80})")
    if not os.path.isabs(argv[0]):
        raise ValueError(f"run_command: argv[0] must be an absolute path (got {argv[0]!r}); there is no PATH lookup")
    lim = (limits or COMMAND_LIMITS).updated(limit_overrides, "run_command")
    timeout_s = lim.timeout_s
    if not os.path.isdir(cwd):
        raise ValueError(f"run_command: cwd {str(cwd)!r} is not a directory")
    nonce = secrets.token_hex(16)
    run = _launch({"argv": list(argv)}, {"nonce": nonce}, lim, cwd=os.fspath(cwd), env=env, writable=writable,
                  report_cap=max_report_bytes if report else None, allow_unconfined=allow_unconfined,
                  read_paths=read_paths, skip_layers=skip_layers)
    rec = next((r for r in reversed(_records(run.res, nonce)) if r.get("type") == "exec"), None)
    code = sig = None
    if rec is not None:
        code = rec.get("code") if type(rec.get("code")) is int else None
        sig = rec.get("signal") if type(rec.get("signal")) is int else None
    if run.timed_out:
        status, reason = "timeout", f"wall-clock timeout after {timeout_s} s"
    elif rec is None:
        status, reason = "error", f"sandbox ended without an exit record (exit {run.returncode}); stderr: {run.err[-300:]}"
    elif not rec.get("ok"):
        status, reason = "error", f"cannot execute {argv[0]}: {str(rec.get('msg', ''))[:300]}"
    elif sig == signal.SIGXCPU:
        status, reason = "timeout", "CPU time limit"
    elif run.oom_kills and (sig is not None or code):
        status, reason = "memory", f"out of memory: the kernel killed {run.oom_kills} process(es) at the tree limit"
    elif sig is not None:
        status, reason = "killed", f"killed by signal {sig}"
    else:
        status, reason = "ok", ""
    return CommandResult(status, code, sig, run.out, run.err, run.report, run.report_dropped > 0, run.elapsed,
                         run.layers, reason)


def _count_own_processes() -> int:
    me, n = os.getuid(), 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                n += os.stat(f"/proc/{name}").st_uid == me
            except OSError:
                pass
    return n


def _kill_tree(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # unshare + driver (the pidns init): the namespace dies
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    for f in (proc.stdin, proc.stdout, proc.stderr):
        try:
            if f is not None:
                f.close()
        except OSError:
            pass


def _pump(proc, stdin_data: bytes, res_r: int, deadline: float, cap: int, extra: dict[int, int] | None = None):
    """One select loop: feed stdin, drain stdout/stderr (keep ``cap`` bytes each), the result pipe and
    any ``extra`` pipes (fd → cap; returned as fd → (bytes, bytes dropped), and closed)."""
    sel = selectors.DefaultSelector()
    bufs: dict[int, bytearray] = {}
    caps: dict[int, int] = {}
    dropped: dict[int, int] = {}
    extra = extra or {}
    for fd, c in ((proc.stdout.fileno(), cap), (proc.stderr.fileno(), cap), (res_r, _RESULT_CAP), *extra.items()):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
        bufs[fd], caps[fd], dropped[fd] = bytearray(), c, 0
    in_fd = proc.stdin.fileno()
    os.set_blocking(in_fd, False)
    pending = memoryview(stdin_data)
    sel.register(in_fd, selectors.EVENT_WRITE)
    readers = 3 + len(extra)
    timed_out = False
    exited_at = None
    try:
        while readers:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.5:
                break  # something outside the namespace kept a pipe open (unconfined mode only)
            for key, _ in sel.select(timeout=min(deadline - now, 0.05)):
                fd = key.fd
                if fd == in_fd:
                    try:
                        n = os.write(fd, pending[:65536])
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        n = len(pending)  # the driver is gone; its records (if any) say why
                    pending = pending[n:]
                    if not pending:
                        sel.unregister(fd)
                        proc.stdin.close()
                    continue
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(fd)
                    readers -= 1
                    continue
                room = caps[fd] - len(bufs[fd])
                if room > 0:
                    bufs[fd] += chunk[:room]
                dropped[fd] += max(0, len(chunk) - max(room, 0))
    finally:
        sel.close()
        os.close(res_r)
        for fd in extra:
            os.close(fd)

    def text(fd: int) -> str:
        s = bufs[fd].decode("utf-8", errors="replace")
        return s + (f"\n[... {dropped[fd]} bytes truncated]" if dropped[fd] else "")

    more = {fd: (bytes(bufs[fd]), dropped[fd]) for fd in extra}
    return text(proc.stdout.fileno()), text(proc.stderr.fileno()), bytes(bufs[res_r]), more, timed_out


def _records(res: bytes, nonce: str) -> list[dict]:
    """The result channel's JSON-lines records stamped with this run's ``nonce``, in order (anything
    else on the channel — malformed lines, other nonces — is ignored)."""
    out = []
    for line in res.split(b"\n"):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if type(rec) is dict and rec.get("nonce") == nonce:
            out.append(rec)
    return out


def _verdict(res: bytes, nonce: str, expected: list | None, float_tol: float, timed_out: bool,
             returncode: int | None, out: str, err: str, elapsed: float, layers: list[str],
             oom_kills: int = 0) -> SandboxResult:
    records = _records(res, nonce)
    imp = next((r for r in records if r.get("type") == "import"), None)
    done = any(r.get("type") == "done" for r in records)
    child_exit = next((r for r in records if r.get("type") == "child_exit"), None)
    tests: list[TestRecord] = []
    raised: set[int] = set()  # indices of tests in which the tested code (or the test code) raised
    reason = ""
    memory_hit = False

    if expected is not None:
        io = {r["i"]: r for r in records if r.get("type") == "io" and type(r.get("i")) is int}
        for i, exp in enumerate(expected):
            r = io.get(i)
            name = f"case[{i}]"
            if r is None:
                tests.append(TestRecord(name, False, "no result"))
                continue
            el = float(r.get("elapsed", 0.0)) if type(r.get("elapsed")) in (int, float) else 0.0
            if "out" in r:
                try:
                    got = decode_plain(r["out"])
                except (ValueError, TypeError) as e:
                    tests.append(TestRecord(name, False, f"malformed output: {e}", el))
                    continue
                ok = plain_equal(got, exp, float_tol)
                tests.append(TestRecord(name, ok, "" if ok else f"expected {exp!r:.200}, got {got!r:.200}", el))
            else:
                memory_hit |= r.get("kind") == "MemoryError"
                raised.add(len(tests))
                tests.append(TestRecord(name, False, str(r.get("err", "error"))[:500], el))
    for r in records:
        if r.get("type") == "assert":
            memory_hit |= "MemoryError" in str(r.get("reason", ""))
            if r.get("raised") is True and r.get("passed") is not True:
                raised.add(len(tests))
            el = r.get("elapsed", 0.0)
            tests.append(TestRecord(str(r.get("name")), r.get("passed") is True, str(r.get("reason", "")),
                                    float(el) if type(el) in (int, float) else 0.0))

    if timed_out:
        status, reason = "timeout", "wall-clock timeout"
    elif imp is None:
        status = "killed" if returncode is not None and returncode < 0 else "runtime_error"
        reason = f"sandbox ended before the solution was imported (exit {returncode}); stderr: {err[-300:]}"
    elif not imp.get("ok"):
        kind = str(imp.get("kind"))
        reason = f"{kind} at import: {imp.get('msg', '')}"
        exit_info = imp.get("exit") or {}
        if kind == "SyntaxError":
            status = "syntax_error"
        elif kind == "MemoryError":
            status = "memory"
        elif exit_info.get("signal") == signal.SIGXCPU:
            status, reason = "timeout", "CPU time limit"
        elif "signal" in exit_info:
            status = "killed"
        else:
            status = "runtime_error"
    elif child_exit is not None and child_exit.get("signal") == signal.SIGXCPU:
        status, reason = "timeout", "CPU time limit"
    elif memory_hit:
        status, reason = "memory", "MemoryError in a test"
    elif child_exit is not None and "signal" in child_exit:
        status, reason = "killed", f"solution process killed by signal {child_exit['signal']}"
    elif child_exit is not None:
        status, reason = "runtime_error", f"solution process exited early (code {child_exit.get('code')})"
    elif not done:
        status = "killed" if returncode is not None and returncode < 0 else "runtime_error"
        reason = f"sandbox ended before finishing (exit {returncode})"
    else:
        status = "ok"
    if oom_kills and status in ("killed", "runtime_error"):
        status, reason = "memory", f"out of memory: the kernel killed {oom_kills} process(es) at the tree limit"
    if expected is None and (status != "ok" or not done):
        tests.append(TestRecord("<unfinished>", False, reason or status))
    if expected is not None and status != "ok":
        for t in tests:
            if not t.passed and t.reason == "no result":
                t.reason = f"no result ({status})"
    completed = status == "ok"
    failed = [i for i, t in enumerate(tests) if not t.passed]
    if completed and failed:  # name the outcome: the first raising test, else the first wrong one
        i = next((i for i in failed if i in raised), None)
        status = "wrong_answer" if i is None else "runtime_error"
        t = tests[failed[0] if i is None else i]
        reason = f"{t.name}: {t.reason}"[:500]
    passed = sum(t.passed for t in tests)
    return SandboxResult(status, passed, len(tests), tests, out, err, elapsed, layers, reason, completed)
