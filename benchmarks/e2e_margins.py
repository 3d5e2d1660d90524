#!/usr/bin/env python
"""The end-to-end "it learns" tests' settings over seeds and starting points: is each test's gain
well clear of its margin on any CPU?

    python benchmarks/e2e_margins.py --quick                  # PPO, GRPO, STaR, ODT; seeds 0-4; 2 jobs
    python benchmarks/e2e_margins.py --tests ppo --seeds 0,1,2 --starts 0:240,1:240,0:200

A test runs with a fixed seed, but what it starts from is not fixed: the shared SFT model of the PPO
and GRPO tests trains to another model on another CPU (float kernels differ), and STaR and ODT train
their own. So each test's exact setting (the builders in tests/e2e) runs here over training seeds and,
for PPO and GRPO, over SFT starting points (`--starts SEED:STEPS`; fewer SFT steps give a weaker
start, standing in for a CPU that trains a weaker model). Per run: the metric before and after, the
gain, and the test's margin (3 standard errors of the gain where the test computes one, else its fixed
threshold); per test: the gain's mean, standard deviation and minimum, and the smallest slack
(gain − margin). Runs go to `runs/bench-cache/e2e_margins/` (SFT starts are cached and reused). The last
stdout line is one JSON object with the machine and every test's summary.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
E2E = HERE.parent / "tests" / "e2e"
sys.path.insert(0, str(HERE))

from _machine import machine_info  # noqa: E402

OUT = Path("runs/bench-cache/e2e_margins")
TESTS = ("ppo", "grpo", "star", "odt")


def _module(path: Path, name: str):
    """A test file as a module (registered, as dataclasses need, and loaded once)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sft_start(start: str) -> tuple[str, dict]:
    """The SFT checkpoint `SEED:STEPS` of the tests' shared SFT configuration (cached)."""
    from _warm_start import cached_sft

    conftest = _module(E2E / "conftest.py", "e2e_conftest")
    seed, steps = (int(x) for x in start.split(":"))
    out = OUT / f"sft_s{seed}_{steps}"
    info = cached_sft(out / "e2e", steps, lambda: conftest.sft_config(out, seed=seed, steps=steps))
    return info["checkpoint"], info


def run_one(test: str, start: str, seed: int) -> dict:
    """One run of `test`'s setting; in a fresh process (`--one`) so that runs do not share state."""
    out = OUT / f"{test}_{start.replace(':', '_')}_s{seed}"
    row: dict = {"test": test, "start": start, "seed": seed}
    t0 = time.perf_counter()
    if test in ("ppo", "grpo"):
        conftest = _module(E2E / "conftest.py", "e2e_conftest")
        checkpoint, info = _sft_start(start)
        row["start_greedy"] = info.get("greedy_accuracy")
        module = _module(E2E / f"test_{test}_learns.py", f"e2e_{test}")
        if test == "ppo":
            from seqrl.algos.ppo import train

            cfg = module.ppo_config(checkpoint, out, seed)
        else:
            from seqrl.algos.grpo import train

            cfg = module.grpo_config(checkpoint, out, seed)
        train(cfg)
        before, after, margin = conftest.pass1_gain(cfg.run.dir / "metrics.jsonl", module.PROBLEMS, module.SAMPLES)
        row.update(before=before["eval/pass@1"], after=after["eval/pass@1"], margin=margin,
                   greedy_before=before["eval/accuracy"], greedy_after=after["eval/accuracy"])
    elif test == "star":
        from seqrl.algos.star import train

        module = _module(E2E / "test_star_learns.py", "e2e_star")
        cfg = module.star_config(out, seed)
        train(cfg)
        base, after, margin = module.accuracy_gain(cfg)
        row.update(before=base, after=after, margin=margin)
    elif test == "odt":
        sys.path.insert(0, str(E2E.parent))  # the drift toy env lives in tests/conftest.py
        import gymnasium as gym

        toy = _module(E2E.parent / "conftest.py", "conftest")
        if toy.DRIFT_ENV_ID not in gym.registry:
            gym.register(toy.DRIFT_ENV_ID, entry_point="conftest:DriftEnv", max_episode_steps=toy.DRIFT_H)
        module = _module(E2E / "test_odt_learns.py", "e2e_odt")
        result = module.online_vs_offline(out, toy.drift_dataset(64, seed=0), seed)
        # the test's tightest claim: online fine-tuning beats offline-only training with the same updates
        row.update(before=result["offline"], after=result["online"], margin=module.MARGIN_OVER_OFFLINE,
                   best_in_data=result["best"], after_pretrain=result["after_pretrain"])
    else:
        raise ValueError(f"unknown test {test!r}; valid: {', '.join(TESTS)}")
    row["gain"] = row["after"] - row["before"]
    row["slack"] = row["gain"] - row["margin"]
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    return row


def summary(rows: list[dict]) -> dict:
    gains = [r["gain"] for r in rows]
    return {"runs": len(rows), "gain_mean": round(statistics.mean(gains), 4),
            "gain_sd": round(statistics.stdev(gains), 4) if len(gains) > 1 else None,
            "gain_min": round(min(gains), 4), "margin_max": round(max(r["margin"] for r in rows), 4),
            "slack_min": round(min(r["slack"] for r in rows), 4), "failed": sum(r["slack"] < 0 for r in rows)}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the default set: every test, seeds 0-4, starts 0:240,1:240,0:220,0:200")
    p.add_argument("--tests", default=",".join(TESTS))
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--starts", default="0:240,1:240,0:220,0:200",
                   help="SFT starts SEED:STEPS for PPO and GRPO; seeds run on the first, seed 0 on the others")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time, one torch thread each")
    p.add_argument("--one", help=argparse.SUPPRESS)  # TEST,START,SEED: one run in this process
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.one:
        test, start, seed = args.one.split(",")
        print("E2E_MARGIN " + json.dumps(run_one(test, start, int(seed))), flush=True)
        return
    tests = [t for t in args.tests.split(",") if t]
    for t in tests:
        if t not in TESTS:
            raise SystemExit(f"--tests: unknown test {t!r}; valid: {', '.join(TESTS)}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    starts = [s for s in args.starts.split(",") if s]
    jobs = []
    for t in tests:
        if t in ("ppo", "grpo"):
            jobs += [(t, starts[0], s) for s in seeds] + [(t, st, 0) for st in starts[1:]]
        else:
            jobs += [(t, "-", s) for s in seeds]
    # SFT starts first, one process each, so that parallel runs never train the same start twice
    for st in {j[1] for j in jobs if j[0] in ("ppo", "grpo")}:
        _sft_start(st)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    rows, running, queue = [], [], list(jobs)
    while queue or running:
        while queue and len(running) < max(1, args.jobs):
            job = queue.pop(0)
            cmd = [sys.executable, __file__, "--one", ",".join(map(str, job))]
            running.append((job, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                                  env=env)))
        time.sleep(1)
        for job, proc in list(running):
            if proc.poll() is None:
                continue
            running.remove((job, proc))
            lines = [ln for ln in proc.stdout.read().splitlines() if ln.startswith("E2E_MARGIN ")]
            if proc.returncode or not lines:
                print(f"{job}: failed (exit {proc.returncode}); rerun with --one {','.join(map(str, job))}",
                      file=sys.stderr)
                continue
            row = json.loads(lines[-1][len("E2E_MARGIN "):])
            rows.append(row)
            print(f"[{len(rows)}/{len(jobs)}] {row['test']} start {row['start']} seed {row['seed']}: "
                  f"{row['before']:.3f} -> {row['after']:.3f} (gain {row['gain']:+.3f}, margin {row['margin']:.3f}, "
                  f"slack {row['slack']:+.3f}) {row['wall_s']} s", file=sys.stderr, flush=True)
    result = {"machine": machine_info(), "runs": rows,
              "summary": {t: summary([r for r in rows if r["test"] == t]) for t in tests
                          if any(r["test"] == t for r in rows)}}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
