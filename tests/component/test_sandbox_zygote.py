"""The pre-started sandbox driver (zygote): runs forked from one interpreter share nothing, a run
killed at its limit or a killed zygote leave the sandbox serving, and a forked run sees exactly what
a freshly started driver's run sees (fds, environment, rlimits, signal handlers, cgroups)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import textwrap
import threading
import time

import pytest

from seqrl.sandbox import run_command, run_python
from seqrl.sandbox import runner
from seqrl.sandbox.runner import STRONG_LAYERS

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the zygote serves confined runs only (root)")


@pytest.fixture
def zygote(monkeypatch):
    """Zygote launches on, starting from no idle zygote (so one zygote serves the test's runs)."""
    monkeypatch.setattr(runner, "USE_ZYGOTE", True)
    runner.close_zygotes()
    yield
    runner.close_zygotes()


def src(s: str) -> str:
    return textwrap.dedent(s).lstrip("\n")


def memory_holds(pid: int, token: bytes) -> bool:
    """Whether ``token`` is anywhere in process ``pid``'s readable memory (root reads /proc/PID/mem)."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if "r" not in perms or hi - lo > 1 << 30:
                continue
            try:
                mem.seek(lo)
                if token in mem.read(hi - lo):
                    return True
            except (OSError, OverflowError, ValueError):
                continue
    return False


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _sandbox_uid(pid: str) -> bool:
    for line in _read(f"/proc/{pid}/status").splitlines():
        if line.startswith("Uid:"):
            return 200_000 <= int(line.split()[1]) < 260_000
    return False


PROBE = src("""
    import os, resource, signal, sys
    def probe():
        fds = {}
        for name in sorted(os.listdir("/proc/self/fd"), key=int):
            try:
                target = os.readlink(f"/proc/self/fd/{name}")
            except OSError:
                continue
            fds[name] = target.split(":")[0]
        rl = {n: list(resource.getrlimit(getattr(resource, n))) for n in dir(resource) if n.startswith("RLIMIT_")}
        sigs = {}
        for s in signal.valid_signals():
            if s in (signal.SIGKILL, signal.SIGSTOP):
                continue
            h = signal.getsignal(s)
            sigs[str(int(s))] = h if isinstance(h, int) else str(h)
        with open("/proc/self/cgroup") as f:
            cg = sorted(line.split(":")[1] + ":" + ("run" if "/seqrl-" in line else line.split(":")[2].strip())
                        for line in f if line.strip())
        with open("/proc/self/status") as f:
            st = {k: v.strip() for k, v in (l.split(":", 1) for l in f)
                  if k in ("NoNewPrivs", "Seccomp", "CapEff", "CapBnd", "Threads", "Groups")}
        env = dict(os.environ)
        home = env.pop("HOME", "")
        return {"fds": sorted(fds.values()), "rlimits": rl, "signals": sigs, "cgroups": cg, "status": st, "env": env,
                "cwd_is_home": os.getcwd() == home, "pid": os.getpid(), "ppid": os.getppid(),
                "umask": os.umask(0o022), "uid": os.getuid() >= 200000,
                "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
    import json
    print(json.dumps(probe()))
""")


def _probe(zygote_on: bool, monkeypatch) -> dict:
    monkeypatch.setattr(runner, "USE_ZYGOTE", zygote_on)
    r = run_python(PROBE, tests="assert True\n")
    assert r.all_passed, (r.status, r.reason, r.stderr)
    assert set(STRONG_LAYERS) <= set(r.layers), r.layers
    return json.loads(r.stdout)


def test_forked_run_sees_what_a_started_driver_run_sees(zygote, monkeypatch):
    """fds, environment, rlimits, signal handlers, cgroups, privileges: the same with and without the
    zygote (the solution prints what it sees at import)."""
    classic, forked = _probe(False, monkeypatch), _probe(True, monkeypatch)
    assert classic and forked
    for key in ("fds", "rlimits", "signals", "cgroups", "status", "env", "cwd_is_home", "pid", "ppid", "umask",
                "uid", "procs"):
        assert forked[key] == classic[key], (key, classic[key], forked[key])
    assert forked["fds"] == ["/dev/null", "pipe", "pipe", "pipe", "pipe"]  # stdin, out, err, its request pipes
    assert forked["procs"] == [1, 2] and forked["status"]["NoNewPrivs"] == "1"
    assert forked["status"]["Seccomp"] == "2" and forked["status"]["Threads"] == "1"


def test_consecutive_runs_in_one_zygote_share_nothing(zygote):
    token = secrets.token_hex(16)
    first = src(f"""
        import os, sys, builtins, json
        SECRET = "{token}"
        os.environ["SEQRL_LEAK"] = SECRET
        builtins.SEQRL_LEAK = SECRET
        json.SEQRL_LEAK = SECRET
        sys.modules["seqrl_leak"] = json
        open(os.path.join(os.environ["HOME"], "leak.txt"), "w").write(SECRET)
        def f():
            return 1
    """)
    r1 = run_python(first, tests=f"assert f() == 1  # {token}\n")
    assert r1.all_passed, (r1.status, r1.reason, r1.stderr)
    pids = runner.zygote_pids()
    assert len(pids) == 1
    second = src("""
        import os, sys, builtins, json, glob
        def seen():
            return {"env": os.environ.get("SEQRL_LEAK"), "builtins": getattr(builtins, "SEQRL_LEAK", None),
                    "module": getattr(json, "SEQRL_LEAK", None), "sys.modules": "seqrl_leak" in sys.modules,
                    "files": glob.glob(os.path.join(os.environ["HOME"], "*")) + glob.glob("/tmp/seqrl-sbx-*/*")}
    """)
    r2 = run_python(second, io_cases=[[[], {"env": None, "builtins": None, "module": None, "sys.modules": False,
                                            "files": []}]], entry_point="seen")
    assert r2.all_passed, (r2.status, r2.reason, r2.stderr)
    assert runner.zygote_pids() == pids  # the same zygote served both
    # the zygote (whose memory every later run starts from) never held the first run's source or tests
    assert memory_holds(os.getpid(), token.encode())  # the probe finds it where it is
    assert not memory_holds(pids[0], token.encode())
    assert len(os.listdir(f"/proc/{pids[0]}/task")) == 1  # single-threaded: fork copies one thread


def test_run_killed_at_its_limit_leaves_the_zygote_serving(zygote):
    r = run_python("def f():\n    return 1\n", tests="assert f() == 1\n")
    assert r.all_passed
    (zpid,) = runner.zygote_pids()
    for spin, status in (("while True: pass\n", "timeout"),
                         ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "killed")):
        r = run_python(spin, tests="assert True\n", timeout_s=1.0)
        assert r.status == status, (r.status, r.reason)
        assert runner.zygote_pids() == [zpid]
    r = run_python("def f():\n    return 2\n", tests="assert f() == 2\n")
    assert r.all_passed and runner.zygote_pids() == [zpid]


def test_killed_zygote_is_replaced(zygote):
    assert run_python("x = 1", tests="assert True\n").all_passed
    (zpid,) = runner.zygote_pids()
    os.kill(zpid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{zpid}") and time.monotonic() < deadline:
        try:
            os.waitpid(zpid, os.WNOHANG)  # reaped by its Popen; this only hurries it
        except ChildProcessError:
            break
        time.sleep(0.01)
    r = run_python("x = 1", tests="assert True\n")
    assert r.all_passed, (r.status, r.reason)
    (new,) = runner.zygote_pids()
    assert new != zpid

    # killed mid-run: that run fails (its tree dies with the zygote), nothing hangs, the next run works
    def kill_soon() -> None:  # once the run's solution process exists (a sandbox uid in our run's cgroup)
        mine, deadline = f"/seqrl-{os.getpid()}-", time.monotonic() + 5
        while time.monotonic() < deadline and not any(
                _sandbox_uid(p) and mine in _read(f"/proc/{p}/cgroup") for p in os.listdir("/proc") if p.isdigit()):
            time.sleep(0.01)
        os.kill(new, signal.SIGKILL)

    t = threading.Thread(target=kill_soon)
    t.start()
    t0 = time.monotonic()
    r = run_python("import time\ntime.sleep(5)\n", tests="assert True\n", timeout_s=8.0)
    t.join()
    assert not r.all_passed and time.monotonic() - t0 < 5.0, (r.status, r.reason)
    r = run_python("x = 1", tests="assert True\n")
    assert r.all_passed and runner.zygote_pids() and runner.zygote_pids()[0] not in (zpid, new)


def test_commands_and_stdio_through_the_zygote(zygote):
    r = run_command(["/bin/sh", "-c", "ls /proc/self/fd; echo hi >&3"], cwd="/usr", report=True,
                    timeout_s=10)
    assert r.status == "ok" and r.returncode == 0, (r.status, r.reason, r.stderr)
    assert r.report == b"hi\n"
    assert sorted(r.stdout.split()) == ["0", "1", "2", "3", "4"]  # + ls's own directory fd
    r = run_python("print(int(input()) * 2)\n", stdio_cases=[["2\n", "4"], ["5\n", "10"]])
    assert r.all_passed, (r.status, r.reason)
    assert runner.zygote_pids()



def test_zygote_reaps_its_leaders_and_leaves_no_cgroups(zygote):
    for _ in range(5):
        assert run_python("x = 1", tests="assert True\n").all_passed
    (zpid,) = runner.zygote_pids()
    time.sleep(0.2)  # the last release's reap is a message the zygote handles on its own time
    with open(f"/proc/{zpid}/task/{zpid}/children") as f:
        kids = f.read().split()
    assert len(kids) <= 2, kids  # the next run's leader, waiting (+ the last run's, if not reaped yet)
    runner.close_zygotes()
    mine = f"seqrl-{os.getpid()}-"
    left = [p for root in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu")
            for p, dirs, _ in os.walk(root) if os.path.basename(p).startswith(mine)]
    assert left == []


def test_no_zygote_falls_back_to_the_classic_launch(zygote, monkeypatch):
    def broken(self, *a, **k):
        raise RuntimeError("sandbox zygote did not start")

    monkeypatch.setattr(runner._Zygote, "__init__", broken)
    r = run_python("def f():\n    return 3\n", tests="assert f() == 3\n")
    assert r.all_passed, (r.status, r.reason)
    assert set(STRONG_LAYERS) <= set(r.layers)
    assert runner.zygote_pids() == []


def test_a_wedged_zygote_is_not_the_programs_timeout(zygote, monkeypatch):
    """A zygote that does not answer costs the runner up to 10 s before the classic launch; that wait
    used to count against the run's clock, so a program that never ran got a `timeout` verdict."""
    real = runner._zygote_popen

    def wedged(z, meta, res_w, rep_w):
        time.sleep(2.5)  # the zygote's reply never comes within the program's limit
        return None  # then the classic launch, as when no zygote answers

    monkeypatch.setattr(runner, "_zygote_popen", wedged)
    r = run_python("def f():\n    return 3\n", tests="assert f() == 3\n", timeout_s=2.0)
    assert r.status == "ok" and r.all_passed, (r.status, r.reason)
    monkeypatch.setattr(runner, "_zygote_popen", real)
    spin = run_python("def f():\n    while True:\n        pass\n", tests="assert f() == 3\n", timeout_s=1.0)
    assert spin.status == "timeout"  # a program's own timeout is still one
