"""The sandbox's CPU quota (cgroup ``cpu``) and its capped scratch space (a private tmpfs)."""

from __future__ import annotations

import os
import tempfile
import textwrap
import threading
import time

import pytest

from seqrl.sandbox import run_python

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="sandbox layers need root")


def src(s: str) -> str:
    return textwrap.dedent(s).lstrip("\n")


# Busy work that holds no GIL: 4 threads hashing 1 MiB buffers (hashlib releases the GIL), or 4
# forked processes spinning; each returns (CPU seconds the solution's tree used, its wall seconds).
BURN = src("""
    import hashlib, os, threading, time

    def _cpu():
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def threads(n, secs):
        buf = b"x" * (1 << 20)
        c0, w0 = _cpu(), time.monotonic()
        def spin():
            while time.monotonic() - w0 < secs:
                hashlib.sha256(buf).digest()
        ts = [threading.Thread(target=spin) for _ in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return [_cpu() - c0, time.monotonic() - w0]

    def procs(n, secs):
        c0, w0 = _cpu(), time.monotonic()
        kids = []
        for _ in range(n):
            pid = os.fork()
            if pid == 0:
                while time.monotonic() - w0 < secs:
                    pass
                os._exit(0)
            kids.append(pid)
        for p in kids:
            os.waitpid(p, 0)
        return [_cpu() - c0, time.monotonic() - w0]
""")


def _trainer_loop(stop: threading.Event, out: dict) -> None:
    """A trainer-like loop beside the sandbox: steps of pure-Python arithmetic, counted."""
    steps, c0 = 0, time.process_time()
    while not stop.is_set():
        sum(i * i for i in range(2000))
        steps += 1
    out["steps"], out["cpu"] = steps, time.process_time() - c0


@needs_root
@pytest.mark.parametrize("kind", ["threads", "procs"])
def test_cpu_quota_caps_busy_threads_and_processes(kind):
    """4 GIL-free busy threads (or 4 processes) under a quota of 0.25 CPU use ≤ 0.25 CPU-s per wall
    second (measured from inside: the tree's CPU time over its wall time; CFS enforces the quota per
    100 ms period, so the bound holds however loaded the host is; uncapped they would take ≈ 1–2
    CPUs on 2 cores)."""
    stop, trainer = threading.Event(), {}
    th = threading.Thread(target=_trainer_loop, args=(stop, trainer))
    th.start()
    try:
        r = run_python(BURN, io_cases=[[[4, 1.5], None]], entry_point=kind, timeout_s=8, cpus=0.25)
    finally:
        stop.set()
        th.join()
    assert "cpu_cgroup" in r.layers, r.layers
    assert r.status == "wrong_answer" and r.total == 1, (r.status, r.reason, r.tests)
    cpu, wall = (float(x) for x in r.tests[0].reason.rsplit("got ", 1)[1].strip("[]").split(","))
    assert wall >= 1.4
    # one period's slack: the first period may start with a full quota unused
    assert cpu / wall <= 0.25 * 1.2 + 0.1 / wall, (cpu, wall, trainer)
    assert cpu > 0.05  # it did run


@needs_root
def test_cpu_quota_is_validated():
    with pytest.raises(ValueError, match="cpus"):
        run_python("x = 1\n", tests="assert True\n", cpus=0)


FLOOD = src("""
    import os, time

    def files(token, hold):
        n, err = 0, ""
        try:
            while n < 200_000:
                open(f"flood-{token}-{n}", "w").close()
                n += 1
        except OSError as e:
            err = f"{type(e).__name__}: {e.strerror}"
        time.sleep(hold)  # the files exist now: the host looks for them meanwhile
        return [n, err]

    def big(token, hold):
        written, err = 0, ""
        try:
            with open(f"flood-{token}-big", "wb") as f:
                chunk = bytes(1 << 20)
                while written < 1 << 30:
                    f.write(chunk)
                    f.flush()
                    written += len(chunk)
        except OSError as e:
            err = f"{type(e).__name__}: {e.strerror}"
        time.sleep(hold)
        return [written, err]
""")


def _host_sightings(token: str, stop: threading.Event, seen: list) -> None:
    """Scan every sandbox scratch dir the host can see for the flood's files until ``stop``."""
    base = tempfile.gettempdir()
    while not stop.is_set():
        for d in os.listdir(base):
            if d.startswith("seqrl-sbx-"):
                try:
                    seen += [n for n in os.listdir(os.path.join(base, d)) if token in n][:3]
                except OSError:
                    pass
        time.sleep(0.02)


@needs_root
def test_scratch_flood_fills_a_capped_tmpfs_not_the_host():
    """An inode flood stops at ``scratch_inodes`` and a huge file at ``scratch_mb``, each with the
    kernel's reason, and the host never sees a single file of either (they live on a tmpfs in the
    sandbox's own mount namespace, over the host's empty scratch dir)."""
    token = os.urandom(6).hex()
    stop, seen = threading.Event(), []
    th = threading.Thread(target=_host_sightings, args=(token, stop, seen))
    th.start()
    try:
        r = run_python(FLOOD, io_cases=[[[token, 0.5], None]], entry_point="files", timeout_s=20,
                       scratch_inodes=512)
        rb = run_python(FLOOD, io_cases=[[[token, 0.5], None]], entry_point="big", timeout_s=20, scratch_mb=8,
                        max_file_bytes=1 << 30)
    finally:
        stop.set()
        th.join()
    assert "scratch_tmpfs" in r.layers, r.layers
    n, err = eval(r.tests[0].reason.rsplit("got ", 1)[1])  # a list of an int and a str, from our own code
    assert 400 < n < 512 and "No space left on device" in err, (n, err)
    written, err = eval(rb.tests[0].reason.rsplit("got ", 1)[1])
    assert 4 << 20 <= written <= 8 << 20 and "No space left on device" in err, (written, err)
    assert seen == [], seen[:3]


MOUNTS_PROBE = src("""
    import os, sys
    pid = os.fork()
    if pid == 0:
        import time
        time.sleep(5)
        os._exit(0)
    for path in ("/proc/self/mountinfo", "/proc/self/mounts", f"/proc/{pid}/mountinfo"):
        sys.stdout.write(open(path).read())
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print(os.getcwd(), os.environ["HOME"], os.path.realpath("."))
    def f():
        return 1
""")


@needs_root
@pytest.mark.parametrize("launch", ["zygote", "classic", "command"])
def test_the_mount_table_does_not_name_the_hosts_scratch_dir(monkeypatch, launch):
    """A run's ``/proc/*/mountinfo`` and ``/proc/self/mounts`` list its mounts: the scratch tmpfs sits at a
    fixed path inside the run's mount namespace, so neither they nor the run's cwd, ``HOME`` and
    ``TMPDIR`` name the host's scratch dir (a ``mkdtemp`` path under the host's temp dir)."""
    from seqrl.sandbox import run_command, runner

    made: list[str] = []
    mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(*a, **kw):
        made.append(mkdtemp(*a, **kw))
        return made[-1]

    monkeypatch.setattr(runner.tempfile, "mkdtemp", recording_mkdtemp)
    monkeypatch.setattr(runner, "USE_ZYGOTE", launch != "classic")
    if launch == "command":
        work = mkdtemp(prefix="seqrl-test-")
        os.chmod(work, 0o755)
        try:
            r = run_command(["/bin/sh", "-c", "cat /proc/self/mountinfo /proc/self/mounts /proc/$$/mountinfo; "
                                              "echo \"$HOME $TMPDIR\""], cwd=work, timeout_s=10)
        finally:
            os.rmdir(work)
        assert r.returncode == 0, (r.status, r.stderr)
    else:
        r = run_python(MOUNTS_PROBE, io_cases=[[[], 1]], entry_point="f", timeout_s=10)
        assert r.all_passed, (r.status, r.reason, r.stderr)
    assert "scratch_tmpfs" in r.layers, r.layers
    assert " - tmpfs " in r.stdout and "nr_inodes=" in r.stdout  # the probe read the table, scratch tmpfs included
    scratch = [p for p in made if os.path.basename(p).startswith("seqrl-sbx-")]
    assert len(scratch) == 1, made
    for needle in (scratch[0], os.path.basename(scratch[0]), "seqrl-sbx-"):
        assert needle not in r.stdout, (needle, r.stdout[-600:])


def test_the_scratch_dir_stays_on_the_host_path_where_the_cover_would_hide_what_a_run_needs(monkeypatch, tmp_path):
    from seqrl.sandbox import runner

    cover = tmp_path / "run"
    (cover / "venv").mkdir(parents=True)
    monkeypatch.setattr(runner, "SCRATCH_COVER", str(cover))
    monkeypatch.setattr(runner, "SCRATCH_DIR", str(cover / "sandbox"))
    assert runner._scratch_point("/tmp/w", ["/usr/bin/python3", "/tmp/x"]) == (str(cover / "sandbox"), str(cover))
    assert runner._scratch_point("/tmp/w", ["/usr/bin/python3", str(cover / "venv")]) == ("/tmp/w", None)
    assert runner._scratch_point("/tmp/w", [str(cover)]) == ("/tmp/w", None)
    monkeypatch.setattr(runner, "SCRATCH_COVER", str(tmp_path / "missing"))
    assert runner._scratch_point("/tmp/w", []) == ("/tmp/w", None)
