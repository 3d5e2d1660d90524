"""Sandbox limits and attacks (component tier). As root (this machine, CI) every strong layer must
be active: a missing layer fails, it does not skip."""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from seqrl.sandbox import SandboxUnavailable, available_layers, plain_equal, run_many, run_python
from seqrl.sandbox import runner
from seqrl.sandbox.runner import STRONG_LAYERS

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="namespaces/cgroups need root (CI runs as root)")

ADD = "def add(a, b):\n    return a + b\n"
ADD_IO = [[[1, 2], 3], [[-1, 1], 0], [["a", "b"], "ab"]]
ADD_TESTS = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\n"


def src(s: str) -> str:
    return textwrap.dedent(s).lstrip("\n")


def sandbox_uid_procs() -> list[int]:
    """Host processes running as a sandbox uid (200000..259999) started by this test process's runs
    (their cgroups are named ``seqrl-<our pid>-…``; other processes' sandboxes may run meanwhile):
    there must be none after a run."""
    mine = f"/seqrl-{os.getpid()}-"
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            for line in (d / "status").read_text().splitlines():
                if line.startswith("Uid:"):
                    if 200_000 <= int(line.split()[1]) < 260_000 and mine in (d / "cgroup").read_text():
                        out.append(int(d.name))
                    break
        except OSError:
            continue
    return out


# ----------------------------------------------------------------------------- layers and basics
@needs_root
def test_root_gets_every_strong_layer():
    assert set(STRONG_LAYERS) <= set(available_layers())
    r = run_python(ADD, io_cases=ADD_IO, entry_point="add")
    assert set(STRONG_LAYERS) <= set(r.layers), r.layers
    assert "unconfined" not in r.layers


def test_correct_passes_wrong_fails_io_and_asserts():
    r = run_python(ADD, io_cases=ADD_IO, entry_point="add")
    assert (r.status, r.passed, r.total) == ("ok", 3, 3) and r.all_passed
    assert r.reward().score == 1.0
    wrong = "def add(a, b):\n    return a * b if type(a) is int else a + b\n"
    r = run_python(wrong, io_cases=ADD_IO, entry_point="add")
    assert r.status == "wrong_answer" and r.passed == 1 and r.total == 3 and not r.all_passed and r.completed
    assert "expected 3, got 2" in r.tests[0].reason and r.reason.startswith("case[0]: expected 3")
    rw = r.reward()
    assert rw.score == 0.0 and "1/3" in rw.reason
    assert r.reward(partial=True).score == pytest.approx(1 / 3)

    r = run_python(ADD, tests=ADD_TESTS, entry_point="add")
    assert (r.status, r.passed, r.total) == ("ok", 2, 2)
    r = run_python(wrong, tests=ADD_TESTS, entry_point="add")
    assert r.status == "wrong_answer" and r.passed == 1 and r.total == 2  # 2 * 2 == 4
    # top-level (MBPP-style) asserts name the function; tuples survive the round trip
    r = run_python("def pair(a):\n    return (a, a)\n", tests="assert pair(1) == (1, 1)\nassert pair('x') == ('x', 'x')\n")
    assert (r.passed, r.total) == (2, 2)


def test_float_tolerance_and_strict_types():
    r = run_python("def f(x):\n    return x / 3\n", io_cases=[[[1], 1 / 3 + 1e-9], [[3], 1]], entry_point="f")
    assert r.all_passed
    assert plain_equal(1.0, 1) and not plain_equal(True, 1) and not plain_equal("1", 1)
    assert plain_equal((1, [2]), [1, (2,)]) and not plain_equal({1: 2}, {1: 3})


def test_syntax_error():
    r = run_python("def add(a, b) return a", io_cases=ADD_IO, entry_point="add")
    assert r.status == "syntax_error" and r.passed == 0 and r.total == 3


def test_infinite_loop_times_out_promptly():
    t0 = time.monotonic()
    r = run_python("def add(a, b):\n    while True:\n        pass\n", io_cases=ADD_IO, entry_point="add", timeout_s=1.0)
    assert time.monotonic() - t0 < 2.0
    assert r.status == "timeout" and r.passed == 0


def test_memory_limit():
    r = run_python("x = bytearray(10**10)\n" + ADD, io_cases=ADD_IO, entry_point="add")
    assert r.status == "memory" and r.passed == 0
    r = run_python("def add(a, b):\n    return len(bytearray(10**10))\n", io_cases=ADD_IO, entry_point="add")
    assert r.status == "memory" and r.passed == 0


def test_runtime_error_at_import_and_per_test_exception():
    r = run_python("raise ValueError('boom')\n" + ADD, io_cases=ADD_IO, entry_point="add")
    assert r.status == "runtime_error" and "boom" in r.reason and r.passed == 0
    r = run_python("def add(a, b):\n    if a == -1:\n        raise ValueError('neg')\n    return a + b\n",
                   io_cases=ADD_IO, entry_point="add")
    assert r.status == "runtime_error" and r.passed == 2 and "ValueError: neg" in r.tests[1].reason
    assert r.completed and r.reason == "case[1]: ValueError: neg" and r.reward(partial=True).score == pytest.approx(2 / 3)


@pytest.mark.parametrize("exc", ["SystemExit(0)", "KeyboardInterrupt()", "EOFError()"])
def test_every_test_raising_is_a_runtime_error_not_ok(exc):
    """The tested function raising in every test (even SystemExit(0)) is ``runtime_error`` with every
    per-test record kept, for io cases and for asserts alike; a wrong value is ``wrong_answer``."""
    sol = f"def add(a, b):\n    raise {exc}\n"
    name = exc.split("(")[0]
    r = run_python(sol, io_cases=ADD_IO, entry_point="add", allow_unconfined=not ROOT)
    assert (r.status, r.passed, r.total) == ("runtime_error", 0, 3), (r.status, r.reason, r.tests)
    assert all(name in t.reason for t in r.tests) and name in r.reason and not r.all_passed
    r = run_python(sol, tests=ADD_TESTS, entry_point="add", allow_unconfined=not ROOT)
    assert (r.status, r.passed, r.total) == ("runtime_error", 0, 2), (r.status, r.reason, r.tests)
    assert [t.name for t in r.tests] == ["assert@2", "assert@3"] and all(name in t.reason for t in r.tests)
    r = run_python("def add(a, b):\n    return 0\n", tests=ADD_TESTS, entry_point="add", allow_unconfined=not ROOT)
    assert (r.status, r.passed, r.total) == ("wrong_answer", 0, 2) and "assertion failed" in r.reason


TRICKY_TESTS = [
    "assert x, \\\n  'msg'\ny = 1\nassert y == 1\n",                                  # a continued message
    "assert (a ==  # a comment\n   b), f'{a}'; assert z\nassert q\n",                 # two on a line, a comment
    "if t: assert 1\nelse: assert 2, 'x'\n",
    "def check(c):\n    assert c(1) == 'é✓', 'ünï'  # note\n    assert c(2) \\\n        == 3\n\n"
    "    assert c([1,\n      2]) == [\n 3]\n",                                           # UTF-8, continued lines
    "x = '''assert 1\n'''\nassert x\n",                                                # 'assert' in a string
    "assert lambda: 1, lambda: 2\n",
    "async def f():\n    assert await g()\n",
    "assert x\r\nassert y\rassert z\n",                                                   # CR LF and CR line ends
]


@pytest.mark.parametrize("tests", TRICKY_TESTS)
def test_prepare_tests_rewrites_each_assert_in_place(tests):
    """Each assert becomes ``__seqrl_assert__(line, lambda: (test), lambda: (msg))`` — the tree the
    ``ast.unparse`` rewrite gives — and every other statement keeps its line (tracebacks and names match)."""
    import ast

    got = runner.prepare_tests(tests)
    want = ast.unparse(ast.fix_missing_locations(runner._AssertRewriter().visit(ast.parse(tests))))
    assert got["tests_error"] is None and ast.dump(ast.parse(got["tests"])) == ast.dump(ast.parse(want))
    lines = lambda code: [(type(n).__name__, n.lineno) for n in ast.walk(ast.parse(code))  # noqa: E731
                          if isinstance(n, ast.stmt) and not isinstance(n, (ast.Assert, ast.Expr))]
    assert lines(got["tests"]) == lines(tests)
    calls = [n.value.args[0].value for n in ast.walk(ast.parse(got["tests"])) if isinstance(n, ast.Expr)
             and isinstance(n.value, ast.Call) and getattr(n.value.func, "id", "") == "__seqrl_assert__"]
    assert calls == sorted(n.lineno for n in ast.walk(ast.parse(tests)) if isinstance(n, ast.Assert))
    assert set(got["test_names"]) == {n.id for n in ast.walk(ast.parse(tests)) if isinstance(n, ast.Name)}


def test_prepare_tests_is_cached_and_hands_out_copies():
    tests = "def check(c):\n    assert c(1) == 2\n"
    a = runner.prepare_tests(tests)
    a["test_names"].append("forged")
    b = runner.prepare_tests(tests)
    assert "forged" not in b["test_names"] and b["tests"] == a["tests"]
    assert runner.prepare_tests("assert (")["tests_error"].startswith("test code does not parse")


def test_prepare_tests_does_not_cache_a_recursion_error(monkeypatch):
    """A RecursionError depends on the caller's stack: it is reported, not remembered for the same source."""
    import ast

    tests = "assert (1 + 2) == 3  # recursion probe\n"
    parse = ast.parse
    monkeypatch.setattr(ast, "parse", lambda *a, **k: (_ for _ in ()).throw(RecursionError("deep")))
    assert "RecursionError" in runner.prepare_tests(tests)["tests_error"]
    monkeypatch.setattr(ast, "parse", parse)
    assert runner.prepare_tests(tests)["tests_error"] is None


def test_a_continued_assert_keeps_the_lines_after_it():
    """``assert x, \\<newline> msg`` spans two lines: the failing assert after it is still named by its own line."""
    tests = "def check(candidate):\n    assert candidate(1, 2) == 3, \\\n        'sum'\n    assert candidate(2, 2) == 5\n"
    r = run_python(ADD, tests=tests, entry_point="add", allow_unconfined=not ROOT)
    assert [(t.name, t.passed) for t in r.tests] == [("assert@2", True), ("assert@4", False)], r.tests


# ----------------------------------------------------------------------------- containment
@needs_root
def test_fork_limit_holds_for_root_and_nothing_survives():
    sol = src("""
        import os, time
        def forks(n):
            made = 0
            for _ in range(n):
                try:
                    pid = os.fork()
                except OSError:
                    break
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                made += 1
            return made
    """)
    r = run_python(sol, io_cases=[[[500], 500]], entry_point="forks", max_procs=16)
    assert r.status == "wrong_answer" and not r.all_passed
    assert "got " in r.tests[0].reason
    made = int(r.tests[0].reason.rsplit("got ", 1)[1])
    assert 0 < made < 16
    assert sandbox_uid_procs() == []


@needs_root
def test_fork_bomb_is_contained_and_machine_is_fine():
    bomb = src("""
        import os
        def add(a, b):
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
    """)
    r = run_python(bomb, io_cases=ADD_IO, entry_point="add", timeout_s=1.0)
    assert r.status == "timeout" and r.passed == 0
    assert sandbox_uid_procs() == []
    assert run_python(ADD, io_cases=ADD_IO, entry_point="add").all_passed


@needs_root
def test_daemonised_grandchild_is_killed(tmp_path):
    token = secrets.token_hex(6)
    started, survived = Path(f"/tmp/seqrl-gc-{token}-started"), Path(f"/tmp/seqrl-gc-{token}-survived")
    sol = src(f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                open({str(started)!r}, "w").close()
                time.sleep(1.0)
                open({str(survived)!r}, "w").close()
                os._exit(0)
            os._exit(0)
        time.sleep(0.2)
        def add(a, b):
            return a + b
    """)
    try:  # Landlock off: it would (rightly) stop the grandchild's marker files in /tmp; this tests the pidns
        r = run_python(sol, io_cases=ADD_IO, entry_point="add", skip_layers=("landlock",))
        assert r.all_passed
        assert started.exists(), "the grandchild never ran: the test proves nothing"
        time.sleep(1.5)
        assert not survived.exists()
        assert sandbox_uid_procs() == []
    finally:
        started.unlink(missing_ok=True)
        survived.unlink(missing_ok=True)


@needs_root
def test_memory_cgroup_caps_the_whole_tree():
    """RLIMIT_AS caps each process; four children of 120 MiB each stay under it (256 MiB) but not
    under the tree's limit (256 + 64 MiB): the kernel kills some, and with room for all none dies."""
    sol = src("""
        import os, time
        def spawn():
            kids = []
            for _ in range(4):
                pid = os.fork()
                if pid == 0:
                    x = bytearray(120 << 20)   # zero-filled: resident
                    time.sleep(0.3)
                    os._exit(0)
                kids.append(pid)
            return [os.waitpid(p, 0)[1] for p in kids]
    """)
    r = run_python(sol, io_cases=[[[], [0, 0, 0, 0]]], entry_point="spawn", memory_mb=256, timeout_s=10)
    assert "memory_cgroup" in r.layers and r.status == "wrong_answer" and r.passed == 0
    assert "9" in r.tests[0].reason  # SIGKILL statuses (9) among the children's
    r = run_python(sol, io_cases=[[[], [0, 0, 0, 0]]], entry_point="spawn", memory_mb=256, tree_memory_mb=1024,
                   timeout_s=10)
    assert r.all_passed, r.tests
    big = "x = bytearray(200 << 20)\ndef add(a, b):\n    return a + b\n"
    r = run_python(big, io_cases=ADD_IO, entry_point="add", memory_mb=1024, tree_memory_mb=128)
    assert r.status == "memory" and "tree limit" in r.reason and r.passed == 0, (r.status, r.reason)


# ----------------------------------------------------------------------------- stdin → stdout programs
SUM_PROG = "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs[:n]))\n"
SUM_CASES = [["3\n1 2 3\n", "6"], {"input": "2\n5 5 9\n", "output": "10\n"}, ["1\n7\n", "7"]]


def test_stdio_program_cases_are_judged_outside():
    r = run_python(SUM_PROG, stdio_cases=SUM_CASES, allow_unconfined=not ROOT)
    assert (r.status, r.passed, r.total) == ("ok", 3, 3) and r.all_passed
    wrong = SUM_PROG.replace("xs[:n]", "xs")
    r = run_python(wrong, stdio_cases=SUM_CASES, allow_unconfined=not ROOT)
    assert (r.status, r.passed) == ("wrong_answer", 2)
    assert r.tests[1].reason == "wrong answer: expected '10\\n', got '19\\n'"


def test_stdio_exit_status_timeouts_and_errors_per_case():
    # right output, but a non-zero exit: a runtime error, as judges count it; sys.exit(0) is fine
    r = run_python("print(6)\nraise SystemExit(3)\n", stdio_cases=SUM_CASES[:1], allow_unconfined=not ROOT)
    assert (r.status, r.passed) == ("runtime_error", 0) and "exit 3" in r.reason
    r = run_python("import sys\nprint(6)\nsys.exit(0)\n", stdio_cases=SUM_CASES[:1], allow_unconfined=not ROOT)
    assert r.all_passed
    # a per-case timeout fails that case only; the others still run
    slow = "n = int(input())\nif n == 2:\n    while True: pass\nprint(sum(map(int, input().split()[:n])))\n"
    r = run_python(slow, stdio_cases=SUM_CASES, case_timeout_s=0.5, timeout_s=10, allow_unconfined=not ROOT)
    assert r.status == "timeout" and [t.passed for t in r.tests] == [True, False, True], r.tests
    r = run_python("while True: pass\n", stdio_cases=SUM_CASES[:1], case_timeout_s=5, cpu_s=1, timeout_s=10,
                   allow_unconfined=not ROOT)  # cpu_s is per case: RLIMIT_CPU of each case's process
    assert r.status == "timeout" and r.tests[0].reason == "CPU time limit (1 s)"  # not the 5 s case clock
    many = [[f"1\n{i}\n", str(i)] for i in range(200)]  # the driver forks them all: its CPU is the run's
    r = run_python(SUM_PROG, stdio_cases=many, timeout_s=60, case_timeout_s=1, allow_unconfined=not ROOT)
    assert r.all_passed and r.total == 200
    r = run_python("def f(:\n", stdio_cases=SUM_CASES, allow_unconfined=not ROOT)
    assert r.status == "syntax_error" and r.passed == 0 and r.total == 3
    r = run_python("x = bytearray(1 << 30)\n", stdio_cases=SUM_CASES[:1], allow_unconfined=not ROOT)
    assert r.status == "memory" and r.passed == 0
    r = run_python("print('x' * 5000)\n", stdio_cases=SUM_CASES[:1], case_output_bytes=1000,
                   allow_unconfined=not ROOT)
    assert r.passed == 0 and "output limit" in r.tests[0].reason


@needs_root
def test_stdio_a_daemon_from_one_case_is_gone_before_the_next():
    """Case 0's program leaves a setsid daemon that touches a file in the shared scratch dir every
    20 ms; case 1's program watches that file: it must see no more touches."""
    prog = src("""
        import os, sys, time
        first = sys.stdin.read().strip() == "first"
        if first:
            if os.fork() == 0:
                os.setsid()
                for _ in range(500):
                    with open("beat", "a") as f:
                        f.write(".")
                    time.sleep(0.02)
                os._exit(0)
            time.sleep(0.1)
            print("started" if os.path.exists("beat") else "no daemon")
        else:
            n0 = os.path.getsize("beat")
            time.sleep(0.3)
            print("alive" if os.path.getsize("beat") > n0 else "gone")
    """)
    r = run_python(prog, stdio_cases=[["first", "started"], ["second", "gone"]], timeout_s=10)
    assert r.all_passed, r.tests


def test_stdio_equal_is_token_wise_with_tolerance_only_for_decimals():
    from seqrl.sandbox import stdio_equal

    assert stdio_equal("1 2\n3\n\n", "1 2 3") and stdio_equal("  6  ", "6\n")
    assert not stdio_equal("1 2", "1 2 3") and not stdio_equal("YES", "yes")
    assert stdio_equal("0.3333333", "0.333333333") and stdio_equal("2.5e-3", "0.0025")
    assert not stdio_equal("0.34", "0.333333333")
    assert not stdio_equal("1000001", "1000000")  # integers are exact, however close
    assert not stdio_equal("0.3333333", "0.333333333", float_tol=None)


def test_stdio_bad_cases_fail_by_name():
    with pytest.raises(ValueError, match=r"stdio_cases\[1\]"):
        run_python(SUM_PROG, stdio_cases=[["1\n1\n", "1"], ["x"]])
    with pytest.raises(ValueError, match=r"stdio_cases\[0\] input and output must be strings"):
        run_python(SUM_PROG, stdio_cases=[["1", 1]])
    with pytest.raises(ValueError, match="cannot be combined"):
        run_python(SUM_PROG, stdio_cases=SUM_CASES, io_cases=ADD_IO, entry_point="add")


# ----------------------------------------------------------------------------- seccomp and Landlock
SECCOMP_PROBE = src("""
    import ctypes, os, subprocess, threading
    def probe():
        libc = ctypes.CDLL(None, use_errno=True)
        out = {}
        pid = os.fork()
        if pid == 0:  # PTRACE_TRACEME (always allowed otherwise), in a child: a traced solution could hang
            os._exit(0 if libc.ptrace(0, 0, None, None) == 0 else 1)
        out["ptrace_traceme"] = os.waitpid(pid, 0)[1] == 0
        out["unshare_user"] = libc.unshare(0x10000000) == 0         # CLONE_NEWUSER: allowed to any uid here
        params = ctypes.create_string_buffer(120)
        fd = libc.syscall(425, 4, params)                            # io_uring_setup
        out["io_uring"] = fd >= 0
        t = threading.Thread(target=lambda: None)                    # clone3 → ENOSYS → the libc falls back
        t.start(); t.join()
        out["spawn"] = subprocess.run(["/bin/true"]).returncode == 0
        return out
""")


def test_seccomp_refuses_kernel_attack_surface_and_keeps_threads_and_processes():
    if os.uname().machine != "x86_64":
        pytest.fail("seccomp is built for x86_64 (CI runs there); on other machines the layer is off")
    on = run_python(SECCOMP_PROBE, io_cases=[[[], None]], entry_point="probe", allow_unconfined=not ROOT)
    off = run_python(SECCOMP_PROBE, io_cases=[[[], None]], entry_point="probe", allow_unconfined=not ROOT,
                     skip_layers=("seccomp",))
    assert "seccomp" in on.layers and "seccomp" not in off.layers
    got_on, got_off = (eval(r.tests[0].reason.split("got ", 1)[1]) for r in (on, off))
    assert got_on == {"ptrace_traceme": False, "unshare_user": False, "io_uring": False, "spawn": True}, got_on
    # without the filter the same calls succeed here: the layer is what refuses them
    assert got_off["unshare_user"] and got_off["ptrace_traceme"] and got_off["spawn"], got_off


def _run_bpf(prog: bytes, nr: int, arch: int = 0xC000003E, args0: int = 0) -> int:
    """A classic-BPF interpreter for the four opcodes the filter uses (hand-checked semantics)."""
    data = nr.to_bytes(4, "little") + arch.to_bytes(4, "little") + bytes(8) + args0.to_bytes(8, "little")
    pc, a = 0, 0
    while True:
        code = int.from_bytes(prog[8 * pc:8 * pc + 2], "little")
        jt, jf = prog[8 * pc + 2], prog[8 * pc + 3]
        k = int.from_bytes(prog[8 * pc + 4:8 * pc + 8], "little")
        if code == 0x20:
            a = int.from_bytes(data[k:k + 4], "little")
        elif code == 0x06:
            return k
        else:
            cond = {0x15: a == k, 0x35: a >= k, 0x45: bool(a & k)}[code]
            pc += jt if cond else jf
        pc += 1


def test_seccomp_program_decides_each_syscall_as_designed():
    from seqrl.sandbox import _driver as d

    prog = d.seccomp_program()
    allow, eperm, enosys, kill = 0x7FFF0000, 0x50001, 0x50026, 0x80000000
    for name, nr in d.SECCOMP_DENY_X86_64.items():
        assert _run_bpf(prog, nr) == eperm, name
    for nr in (0, 1, 2, 3, 9, 39, 57, 59, 60, 61, 231, 257, 334, 445):  # read … fork, execve, exit, rseq, landlock
        assert _run_bpf(prog, nr) == allow, nr
    assert _run_bpf(prog, 56, args0=0x01200011) == allow            # fork-style clone (CHILD_SETTID | …)
    assert _run_bpf(prog, 56, args0=0x003D0F00) == allow            # pthread-style clone
    for flag in (0x00020000, 0x10000000, 0x40000000, 0x20000000):  # NEWNS, NEWUSER, NEWNET, NEWPID
        assert _run_bpf(prog, 56, args0=0x01200011 | flag) == eperm, hex(flag)
    assert _run_bpf(prog, 435) == enosys
    for nr in (253, 254, 255, 294, 300, 301):  # inotify_init, _add_watch, _rm_watch, inotify_init1, fanotify_*
        assert _run_bpf(prog, nr) == eperm, nr
    for family in (2, 10, 16):                                        # AF_INET, AF_INET6, AF_NETLINK
        assert _run_bpf(prog, 41, args0=family) == allow, family
    for family in (1, 17, 40, 0, 3, 38):                              # AF_UNIX, PACKET, VSOCK, UNSPEC, AX25, ALG
        assert _run_bpf(prog, 41, args0=family) == eperm, family
    assert _run_bpf(prog, 53, args0=1) == allow                       # socketpair(AF_UNIX)
    assert _run_bpf(prog, 0x40000000 | 2) == eperm                   # x32 ABI
    assert _run_bpf(prog, 2, arch=0x40000003) == kill                # i386 ABI


LANDLOCK_PROBE = src("""
    import os
    def probe(secret, outside_dir):
        out = {}
        def attempt(key, fn):
            try:
                fn()
                out[key] = True
            except OSError:
                out[key] = False
        attempt("read_secret", lambda: open(secret).read())
        attempt("list_outside", lambda: os.listdir(outside_dir))
        attempt("write_outside", lambda: open(os.path.join(outside_dir, "left.txt"), "w").write("x"))
        attempt("write_dev_shm", lambda: open("/dev/shm/seqrl-left-" + str(os.getpid()), "w").write("x"))
        attempt("write_cwd", lambda: open("mine.txt", "w").write("x"))
        attempt("read_etc", lambda: open("/etc/passwd").read())
        attempt("devnull", lambda: open("/dev/null", "w").write("x"))
        import decimal, fractions, json, statistics  # the standard library stays importable
        return out
""")


@pytest.fixture
def open_tmp():
    """A temporary directory every uid can traverse (pytest's ``tmp_path`` sits in a 0700 one)."""
    d = Path(tempfile.mkdtemp(prefix="seqrl-test-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_landlock_hides_the_hosts_files_and_keeps_writes_in_the_scratch_dir(open_tmp):
    tmp_path = open_tmp
    outside = tmp_path / "outside"
    outside.mkdir()
    os.chmod(outside, 0o777)  # world-writable: only Landlock stops the write
    secret = outside / "secret.txt"
    secret.write_text("s3cret")
    os.chmod(secret, 0o644)   # world-readable: only Landlock stops the read
    args = [[str(secret), str(outside)], None]
    on = run_python(LANDLOCK_PROBE, io_cases=[args], entry_point="probe", allow_unconfined=not ROOT)
    assert "landlock" in on.layers, on.layers
    got = eval(on.tests[0].reason.split("got ", 1)[1])
    assert got == {"read_secret": False, "list_outside": False, "write_outside": False, "write_dev_shm": False,
                   "write_cwd": True, "read_etc": True, "devnull": True}, got
    assert not (outside / "left.txt").exists()
    off = run_python(LANDLOCK_PROBE, io_cases=[args], entry_point="probe", allow_unconfined=not ROOT,
                     skip_layers=("landlock",))
    got = eval(off.tests[0].reason.split("got ", 1)[1])
    assert got["read_secret"] and got["write_outside"], got  # the same program without it: the test has teeth
    for p in Path("/dev/shm").glob("seqrl-left-*"):
        p.unlink()


def test_run_command_reads_only_what_it_is_given(open_tmp):
    from seqrl.sandbox import run_command

    tmp_path = open_tmp
    work, data = tmp_path / "work", tmp_path / "data"
    work.mkdir()
    data.mkdir()
    (data / "f.txt").write_text("payload")
    os.chmod(data / "f.txt", 0o644)
    argv = ["/bin/cat", str(data / "f.txt")]
    r = run_command(argv, cwd=work, allow_unconfined=not ROOT)
    assert "landlock" in r.layers and r.returncode != 0 and "payload" not in r.stdout
    r = run_command(argv, cwd=work, allow_unconfined=not ROOT, read_paths=[data])
    assert r.returncode == 0 and r.stdout == "payload"
    with pytest.raises(ValueError, match="skip_layers"):
        run_command(argv, cwd=work, skip_layers=["netns"])


@needs_root
def test_no_network():
    sol = src("""
        import socket
        def probe():
            out = []
            for addr in [("127.0.0.1", 22), ("1.1.1.1", 53), ("10.0.0.1", 80)]:
                try:
                    socket.create_connection(addr, timeout=1).close()
                    out.append("connected")
                except OSError as e:
                    out.append("refused")
            return [out, sorted(n for _, n in socket.if_nameindex())]
    """)
    r = run_python(sol, io_cases=[[[], [["refused"] * 3, ["lo"]]]], entry_point="probe")
    assert r.all_passed, r.tests


_IPC_PROBE = src("""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    def probe(key):
        host_queue = libc.msgget(key, 0)                    # a queue the host made with this key
        segment = libc.shmget(0, 1 << 20, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
        return [host_queue, segment >= 0, 0 if segment >= 0 else ctypes.get_errno()]
""")


def _host_sysv(kind: str) -> list[str]:
    return Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]


@needs_root
def test_system_v_ipc_of_the_host_is_out_of_reach_and_a_run_leaves_none_behind():
    """A run has its own IPC namespace (seccomp off here: the namespace alone must hold): it cannot
    open the host's message queue, and a segment it makes dies with it instead of pinning memory
    outside every cgroup for the next run to read."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    key = 0x5EC0000 + secrets.randbelow(1 << 16)
    qid = libc.msgget(key, 0o1000 | 0o600)
    assert qid >= 0
    try:
        before = _host_sysv("shm")
        r = run_python(_IPC_PROBE, io_cases=[[[key], [-1, True, 0]]], entry_point="probe", skip_layers=["seccomp"])
        assert "ipcns" in r.layers and r.all_passed, r.tests
        assert _host_sysv("shm") == before
    finally:
        libc.msgctl(qid, 0, None)  # IPC_RMID


@needs_root
def test_seccomp_refuses_system_v_ipc_and_message_queues():
    r = run_python(_IPC_PROBE, io_cases=[[[1234], [-1, False, 1]]], entry_point="probe")  # EPERM
    assert "seccomp" in r.layers and r.all_passed, r.tests


@needs_root
def test_sockets_only_of_the_network_families(tmp_path):
    """No host pathname unix socket (a 0777 one, listening) and no vsock: ``socket(2)`` opens only
    AF_INET, AF_INET6 and AF_NETLINK; ``socketpair`` still works."""
    import socket
    import threading

    path = tmp_path / "host.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    os.chmod(path, 0o777)
    os.chmod(tmp_path, 0o755)
    server.listen(1)
    server.settimeout(15)
    got: list[bytes] = []

    def accept():
        try:
            conn, _ = server.accept()
            got.append(conn.recv(100))
        except OSError:
            pass

    listener = threading.Thread(target=accept, daemon=True)
    listener.start()
    sol = src("""
        import socket
        def probe(path):
            out = {}
            for name, family, kind in [("unix", socket.AF_UNIX, socket.SOCK_STREAM), ("vsock", 40, socket.SOCK_STREAM),
                                       ("packet", 17, socket.SOCK_RAW), ("inet", socket.AF_INET, socket.SOCK_STREAM),
                                       ("inet6", socket.AF_INET6, socket.SOCK_STREAM)]:
                try:
                    s = socket.socket(family, kind)
                except OSError:
                    out[name] = "refused"
                    continue
                if name == "unix":
                    try:
                        s.connect(path)
                        s.sendall(b"from the sandbox")
                    except OSError:
                        pass
                s.close()
                out[name] = "opened"
            a, b = socket.socketpair()
            a.sendall(b"x")
            out["socketpair"] = b.recv(1).decode()
            return out
    """)
    want = {"unix": "refused", "vsock": "refused", "packet": "refused", "inet": "opened", "inet6": "opened",
            "socketpair": "x"}
    r = run_python(sol, io_cases=[[[str(path)], want]], entry_point="probe")
    server.close()
    listener.join(timeout=5)
    assert "seccomp" in r.layers and r.all_passed, r.tests
    assert got == []


INOTIFY_PROBE = src("""
    import ctypes, os, struct, time
    def probe(watched, seconds):
        libc = ctypes.CDLL(None, use_errno=True)
        out = {}
        for name, nr, args in [("inotify_init", 253, ()), ("fanotify_init", 300, (0, 0))]:
            fd = libc.syscall(nr, *args)
            out[name] = "ok" if fd >= 0 else os.strerror(ctypes.get_errno())
        fd = libc.inotify_init1(os.O_NONBLOCK)
        out["inotify_init1"] = "ok" if fd >= 0 else os.strerror(ctypes.get_errno())
        seen = []
        if fd >= 0:
            if libc.inotify_add_watch(fd, watched.encode(), 0x100 | 0x20) < 0:  # IN_CREATE | IN_OPEN
                out["add_watch"] = os.strerror(ctypes.get_errno())
            end = time.monotonic() + seconds
            while time.monotonic() < end and not seen:
                try:
                    buf = os.read(fd, 4096)
                except BlockingIOError:
                    time.sleep(0.02)
                    continue
                at = 0
                while at + 16 <= len(buf):
                    n = struct.unpack_from("iIII", buf, at)[3]
                    seen.append(buf[at + 16:at + 16 + n].rstrip(b"\\0").decode())
                    at += 16 + n
        out["seen"] = seen[:1]  # the verdict's text is capped
        return out
""")


@pytest.mark.parametrize("launch", ["zygote", "classic", "unconfined"])
def test_inotify_and_fanotify_are_refused_so_host_file_names_stay_unseen(open_tmp, monkeypatch, launch):
    """inotify watches any directory the uid can search (neither Landlock nor the namespaces stop it):
    a run could learn the names of files the host, or a concurrent run, creates or opens. The filter
    refuses ``inotify_init``/``inotify_init1`` (and ``fanotify_init``) with EPERM on every launch."""
    import threading

    if os.uname().machine != "x86_64":
        pytest.fail("seccomp is built for x86_64 (CI runs there); on other machines the layer is off")
    if launch != "unconfined" and not ROOT:
        pytest.skip("namespaces/cgroups need root (CI runs as root)")
    monkeypatch.setattr(runner, "USE_ZYGOTE", launch == "zygote")
    if launch == "unconfined":
        monkeypatch.setattr(runner, "_unshare_cmd", lambda: None)
    token = secrets.token_hex(6)
    stop = threading.Event()

    def host_creates_files():  # the host's own activity in a directory the sandbox uid can search
        i = 0
        while not stop.wait(0.05):
            (open_tmp / f"{token}-{i}").write_text("x")
            i += 1

    writer = threading.Thread(target=host_creates_files)
    writer.start()
    try:
        kw = dict(io_cases=[[[str(open_tmp), 1.5], None]], entry_point="probe", timeout_s=10,
                  allow_unconfined=launch == "unconfined")
        on = run_python(INOTIFY_PROBE, **kw)
        off = run_python(INOTIFY_PROBE, **kw, skip_layers=("seccomp",))
    finally:
        stop.set()
        writer.join()
    assert "seccomp" in on.layers and "seccomp" not in off.layers
    assert ("unconfined" in on.layers) == (launch == "unconfined"), on.layers
    got_on, got_off = (eval(r.tests[0].reason.split("got ", 1)[1]) for r in (on, off))
    eperm = os.strerror(1)
    assert got_on == {"inotify_init": eperm, "fanotify_init": eperm, "inotify_init1": eperm, "seen": []}, got_on
    # without the filter the same program watches the host's directory: the filter is what stops it
    assert got_off["inotify_init1"] == "ok" and any(n.startswith(token) for n in got_off["seen"]), got_off


def test_env_is_scrubbed(monkeypatch):
    monkeypatch.setenv("SEQRL_SECRET", "xyz")
    sol = src("""
        import os
        def env():
            try:
                init = open("/proc/1/environ", "rb").read().decode()
            except OSError:
                init = ""
            return sorted(os.environ) + ["xyz" in init]
    """)
    r = run_python(sol, io_cases=[[[], ["HOME", "LANG", "PATH", "PYTHONHASHSEED", False]]], entry_point="env",
                   allow_unconfined=not ROOT)
    assert r.all_passed, r.tests


def test_workdir_is_fresh_and_removed():
    sol = "import os\ndef cwd():\n    return [os.getcwd(), os.listdir('.')]\n"
    r = run_python(sol, io_cases=[[[], None]], entry_point="cwd", allow_unconfined=not ROOT)
    got = r.tests[0].reason.rsplit("got ", 1)[1]
    path, listing = eval(got)  # our own repr of plain data
    assert listing == [] and path.startswith("/") and not os.path.exists(path)


def test_output_is_capped_not_hung():
    sol = "import sys\nsys.stdout.write('x' * 10_000_000)\n" + ADD
    t0 = time.monotonic()
    r = run_python(sol, io_cases=ADD_IO, entry_point="add", max_output_bytes=1000)
    assert time.monotonic() - t0 < 2.0
    assert r.all_passed
    assert r.stdout.startswith("x" * 1000) and "truncated" in r.stdout and len(r.stdout) < 1100


def test_file_size_cap():
    sol = src("""
        def write():
            try:
                with open("big.bin", "wb") as f:
                    f.write(b"x" * 2_000_000)
            except OSError as e:
                return "refused"
            return "written"
    """)
    r = run_python(sol, io_cases=[[[], "refused"]], entry_point="write", max_file_bytes=100_000)
    assert r.all_passed, r.tests


# ----------------------------------------------------------------------------- forgery attacks
EXIT_ATTACKS = {
    "sys_exit": "import sys\nsys.exit(0)\n",
    "os_exit": "import os\nos._exit(0)\n",
    "kill_self": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
}


@pytest.mark.parametrize("name", sorted(EXIT_ATTACKS))
def test_exit_before_tests_does_not_pass(name):
    sol = EXIT_ATTACKS[name] + "def add(a, b):\n    return a - b\n"
    r = run_python(sol, io_cases=ADD_IO, entry_point="add")
    assert r.passed == 0 and not r.all_passed and r.status in ("runtime_error", "killed")
    r = run_python(sol, tests=ADD_TESTS, entry_point="add")
    assert r.passed == 0 and not r.all_passed


VALUE_ATTACKS = {
    "always_equal": src("""
        class Any:
            def __eq__(self, other): return True
            def __ne__(self, other): return False
        def add(a, b):
            return Any()
    """),
    "int_subclass": src("""
        class Int(int):
            def __eq__(self, other): return True
            __hash__ = int.__hash__
        def add(a, b):
            return Int(0)
    """),
    "str_subclass_in_list": src("""
        class S(str):
            def __eq__(self, other): return True
            __hash__ = str.__hash__
        def add(a, b):
            return [S("")]
    """),
    "override_builtins": src("""
        import builtins
        builtins.isinstance = lambda *a: True
        builtins.type = lambda *a: int
        builtins.print = lambda *a, **k: None
        __builtins__["len"] = lambda *a: 0
        def add(a, b):
            return 0
    """),
    "fake_markers": src("""
        import sys
        for m in ["PASSED", "OK", "ALL TESTS PASSED", '{"type": "done"}', "passed 3/3"]:
            print(m); print(m, file=sys.stderr)
        def add(a, b):
            print("PASSED")
            return None
    """),
    "shadow_test_builtins": src("""
        def abs(x): return 0
        def bool(x): return True
        def isinstance(*a): return True
        def add(a, b):
            return 123.0
    """),
    "patch_driver_module": src("""
        import sys, gc
        m = sys.modules.get("__main__")
        for name in ("decode_plain", "encode_plain", "_write_all", "plain_equal"):
            if hasattr(m, name):
                setattr(m, name, lambda *a, **k: None)
        if hasattr(m, "_Proxy"):
            m._Proxy.__call__ = lambda self, *a: True
        def add(a, b):
            return -1
    """),
}


@pytest.mark.parametrize("name", sorted(VALUE_ATTACKS))
def test_forged_values_do_not_pass(name):
    sol = VALUE_ATTACKS[name]
    r = run_python(sol, io_cases=ADD_IO, entry_point="add", timeout_s=1.0)
    assert r.passed == 0, (name, r.tests)
    tests = ADD_TESTS + "    assert abs(candidate(0.5, 0.25) - 0.75) < 1e-9\n    assert isinstance(candidate(1, 1), int)\n"
    r = run_python(sol, tests=tests, entry_point="add", timeout_s=1.0)
    assert r.passed == 0 and r.total >= 1, (name, r.tests)  # breaking its own process only loses


FORGE_FDS = src("""
    import os, json, glob
    recs = []
    for i in range(3):
        recs.append({"type": "io", "i": i, "out": [3, 0, "ab"][i], "elapsed": 0.0})
        recs.append({"type": "assert", "name": f"x{i}", "passed": True, "reason": "", "elapsed": 0.0})
    recs += [{"type": "import", "ok": True}, {"type": "done"}]
    nonces = [None, "", "0" * 32]
    lines = b"".join((json.dumps(dict(r, nonce=n)) + "\\n").encode() for r in recs for n in nonces)
    lines += b'{"import": "ok", "names": ["add"]}\\n' + b'{"ok": 3}\\n' * 10
    for fd in range(3, 21):
        try:
            os.write(fd, lines)
        except OSError:
            pass
    for p in glob.glob("/proc/*/fd/*"):
        try:
            with open(p, "wb") as f:
                f.write(lines)
        except OSError:
            pass
    def add(a, b):
        return None
""")


def test_forged_records_on_every_fd_do_not_pass():
    r = run_python(FORGE_FDS, io_cases=ADD_IO, entry_point="add", allow_unconfined=not ROOT)
    assert r.passed == 0, r.tests
    r = run_python(FORGE_FDS, tests=ADD_TESTS, entry_point="add", allow_unconfined=not ROOT)
    assert r.passed == 0, r.tests


def test_expected_values_cannot_be_found_inside():
    """The answer is a fresh random token that only the tests know: a solution that scans its own
    memory, the work dir, /tmp and the driver's /proc entries for it must still fail."""
    token = "tok" + secrets.token_hex(8)
    sol = src("""
        import gc, os, re
        pat = re.compile(r"tok[0-9a-f]{16}")
        def find():
            for o in gc.get_objects():
                for s in (o if isinstance(o, (list, tuple)) else [o]):
                    if isinstance(s, (str, bytes)):
                        m = pat.search(s if isinstance(s, str) else s.decode("latin-1"))
                        if m:
                            return m.group(0)
            paths = []
            for d in (".", "/tmp"):
                try:
                    paths += [os.path.join(d, f) for f in os.listdir(d)]
                except OSError:  # Landlock: /tmp is not readable
                    pass
            paths += ["/proc/1/" + f for f in ("cmdline", "environ", "mem", "fd/0", "fd/3")]
            for p in paths:
                try:
                    with open(p, "rb") as fh:
                        m = pat.search(fh.read(1 << 20).decode("latin-1"))
                except OSError:
                    continue
                if m:
                    return m.group(0)
            return "not found"
    """)
    r = run_python(sol, io_cases=[[[], token]], entry_point="find", timeout_s=5, allow_unconfined=not ROOT)
    assert r.passed == 0 and r.tests[0].reason.endswith("got 'not found'"), r.tests
    r = run_python(sol, tests=f"def check(candidate):\n    assert candidate() == {token!r}\n", entry_point="find",
                   timeout_s=10, allow_unconfined=not ROOT)
    assert r.passed == 0, r.tests


# ----------------------------------------------------------------------------- modes and pool
def test_unconfined_needs_opt_in(monkeypatch):
    monkeypatch.setattr(runner, "_unshare_cmd", lambda: None)
    with pytest.raises(SandboxUnavailable, match="allow_unconfined"):
        run_python(ADD, io_cases=ADD_IO, entry_point="add")
    r = run_python(ADD, io_cases=ADD_IO, entry_point="add", allow_unconfined=True)
    # no namespaces, uid or cgroup; seccomp and Landlock need neither root nor namespaces, so they stay
    assert r.all_passed and r.layers == ["rlimits", "unconfined", *runner._confine_spec(sys.executable, (), [], [])[1]]


def test_bad_arguments_fail_by_name():
    with pytest.raises(ValueError, match="entry_point"):
        run_python(ADD, io_cases=ADD_IO)
    with pytest.raises(ValueError, match="io_cases\\[0\\]"):
        run_python(ADD, io_cases=[[1, 2, 3]], entry_point="add")
    with pytest.raises(ValueError, match="tests, io_cases or stdio_cases"):
        run_python(ADD)


def test_run_many_preserves_order():
    jobs = [dict(solution=f"def f():\n    return {i}\n", io_cases=[[[], i]], entry_point="f",
                 allow_unconfined=not ROOT) for i in range(5)]
    jobs[2]["io_cases"] = [[[], -1]]
    rs = run_many(jobs, max_workers=2)
    assert [r.all_passed for r in rs] == [True, True, False, True, True]
    assert run_many([]) == []
