#!/usr/bin/env python
"""The end-to-end "it learns" tests' settings over seeds and starting points: is each test's gain
well clear of its margin on any CPU?

    python benchmarks/e2e_margins.py --quick                  # PPO, GRPO, STaR, ODT; seeds 0-4; 2 jobs
    python benchmarks/e2e_margins.py --tests ppo --seeds 0,1,2 --starts 0:240,1:240,0:200
    python benchmarks/e2e_margins.py --tests sft,prm,ppo,star,odt,vla --seeds 0,1,2 --starts 0:240 \
        --precision fp32,bf16                                 # run.bf16=auto's learning parity, per trainer

A test runs with a fixed seed, but what it starts from is not fixed: the shared SFT model of the PPO
and GRPO tests trains to another model on another CPU (float kernels differ), and STaR and ODT train
their own. So each test's exact setting (the builders in tests/e2e) runs here over training seeds and,
for PPO and GRPO, over SFT starting points (`--starts SEED:STEPS`; fewer SFT steps give a weaker
start, standing in for a CPU that trains a weaker model). Per run: the metric before and after, the
gain, and the test's margin (3 standard errors of the gain where the test computes one, else its fixed
threshold); per test: the gain's mean, standard deviation and minimum, and the smallest slack
(gain − margin). Runs go to `runs/bench-cache/e2e_margins/` (SFT starts are cached and reused). `--precision`
runs every setting in fp32 and/or bf16 autocast (what ``run.bf16: auto`` picks on a CPU with AVX-512 BF16
or AMX; the PPO and GRPO SFT starts stay fp32), and the summary gives, per test, each precision's gain and
the paired bf16 − fp32 difference. The last stdout line is one JSON object with the machine and every
test's summary.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
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
TESTS = ("ppo", "grpo", "star", "odt", "sft", "prm", "dt", "vla")
QUICK_TESTS = ("ppo", "grpo", "star", "odt")
PRECISIONS = ("fp32", "bf16")


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


def pin_precision(precision: str) -> None:
    """Make ``run.bf16: auto`` (every builder's default) resolve to `precision` (fp32 or bf16) in this
    process, whatever this CPU has."""
    from seqrl.utils import dist

    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    dist.bf16_fast = lambda device: precision == "bf16"


def run_one(test: str, start: str, seed: int, precision: str = "fp32") -> dict:
    """One run of `test`'s setting; in a fresh process (`--one`) so that runs do not share state."""
    suffix = "" if precision == "fp32" else f"_{precision}"
    out = (OUT / f"{test}_{start.replace(':', '_')}_s{seed}{suffix}").resolve()
    row: dict = {"test": test, "start": start, "seed": seed, "precision": precision}
    shutil.rmtree(out, ignore_errors=True)  # a fresh run folder (the SFT starts' cache is elsewhere)
    t0 = time.perf_counter()
    pin_precision(precision)
    if test in ("ppo", "grpo"):
        conftest = _module(E2E / "conftest.py", "e2e_conftest")
        pin_precision("fp32")  # the SFT starts are fp32 in every run
        checkpoint, info = _sft_start(start)
        pin_precision(precision)
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
    elif test == "sft":
        from seqrl.algos.sft import train

        conftest = _module(E2E / "conftest.py", "e2e_conftest")
        cfg = conftest.sft_config(out, seed=seed)
        before = _module(E2E / "test_sft_learns.py", "e2e_sft").untrained_accuracy(cfg, seed)
        after = train(cfg)
        row.update(before=before, after=after["eval/accuracy"], margin=0.5, pass1_after=after.get("eval/pass@1"))
    elif test == "prm":
        module = _module(E2E / "test_prm_learns.py", "e2e_prm")
        label_acc, before, after = module.prm_auc_gain(out, seed)
        row.update(before=before, after=after, margin=0.2, label_acc=label_acc)
    elif test == "dt":
        from seqrl.algos.dt import train
        from seqrl.data.minari_data import quick_dataset

        module = _module(E2E / "test_dt_learns.py", "e2e_dt")
        dataset = quick_dataset(level="medium-expert", n_steps=50_000, seed=0)
        final = train(module.dt_config(out, seed), dataset)
        # the test's claim: the expert-level target beats the dataset's mean return by 50
        row.update(before=float(dataset.returns.mean()), after=final["eval/return/-150"], margin=50.0,
                   low_target=final["eval/return/-800"])
    elif test == "vla":
        from seqrl.algos.vla import train
        from seqrl.utils.metrics import read_metrics

        module = _module(E2E / "test_vla_learns.py", "e2e_vla")
        cfg = module.vla_config(out, seed)
        final = train(cfg)
        random_rate = read_metrics(cfg.run.dir / "metrics.jsonl")[0]["eval/random_success_rate"]
        row.update(before=random_rate, after=final["eval/success_rate"], margin=0.4)
    else:
        raise ValueError(f"unknown test {test!r}; valid: {', '.join(TESTS)}")
    row["gain"] = row["after"] - row["before"]
    row["slack"] = row["gain"] - row["margin"]
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    return row


def paired(rows: list[dict]) -> dict | None:
    """bf16 − fp32 gain over the (start, seed) pairs that ran in both precisions."""
    by = {(r["start"], r["seed"], r["precision"]): r["gain"] for r in rows}
    diffs = [by[(st, sd, "bf16")] - g for (st, sd, p), g in by.items() if p == "fp32" and (st, sd, "bf16") in by]
    if not diffs:
        return None
    se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else None
    return {"pairs": len(diffs), "mean": round(statistics.mean(diffs), 4), "se": round(se, 4) if se is not None else None,
            "diffs": [round(d, 4) for d in diffs]}


def summary(rows: list[dict]) -> dict:
    precisions = sorted({r.get("precision", "fp32") for r in rows})
    if len(precisions) > 1:
        out = {p: summary([r for r in rows if r.get("precision", "fp32") == p]) for p in precisions}
        out["bf16_minus_fp32"] = paired(rows)
        return out
    gains = [r["gain"] for r in rows]
    return {"wall_s_mean": round(statistics.mean(r["wall_s"] for r in rows), 1), "runs": len(rows), "gain_mean": round(statistics.mean(gains), 4),
            "gain_sd": round(statistics.stdev(gains), 4) if len(gains) > 1 else None,
            "gain_min": round(min(gains), 4), "margin_max": round(max(r["margin"] for r in rows), 4),
            "slack_min": round(min(r["slack"] for r in rows), 4), "failed": sum(r["slack"] < 0 for r in rows)}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the default set: PPO, GRPO, STaR, ODT, seeds 0-4, starts 0:240,1:240,0:220,0:200")
    p.add_argument("--tests", default=",".join(QUICK_TESTS), help=f"any of {','.join(TESTS)}")
    p.add_argument("--precision", default="fp32", help="fp32, bf16 or fp32,bf16: what run.bf16=auto resolves to")
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--starts", default="0:240,1:240,0:220,0:200",
                   help="SFT starts SEED:STEPS for PPO and GRPO; seeds run on the first, seed 0 on the others")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time, one torch thread each")
    p.add_argument("--one", help=argparse.SUPPRESS)  # TEST,START,SEED,PRECISION: one run in this process
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.one:
        test, start, seed, precision = args.one.split(",")
        print("E2E_MARGIN " + json.dumps(run_one(test, start, int(seed), precision)), flush=True)
        return
    tests = [t for t in args.tests.split(",") if t]
    for t in tests:
        if t not in TESTS:
            raise SystemExit(f"--tests: unknown test {t!r}; valid: {', '.join(TESTS)}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    precisions = [p for p in args.precision.split(",") if p]
    for p in precisions:
        if p not in PRECISIONS:
            raise SystemExit(f"--precision: unknown {p!r}; valid: {', '.join(PRECISIONS)}")
    starts = [s for s in args.starts.split(",") if s]
    jobs = []
    for t in tests:
        if t in ("ppo", "grpo"):
            jobs += [(t, starts[0], s) for s in seeds] + [(t, st, 0) for st in starts[1:]]
        else:
            jobs += [(t, "-", s) for s in seeds]
    jobs = [(*job, p) for job in jobs for p in precisions]  # a seed's precisions run side by side
    # SFT starts first, one process each, so that parallel runs never train the same start twice
    pin_precision("fp32")
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
            print(f"[{len(rows)}/{len(jobs)}] {row['test']} start {row['start']} seed {row['seed']} {row['precision']}: "
                  f"{row['before']:.3f} -> {row['after']:.3f} (gain {row['gain']:+.3f}, margin {row['margin']:.3f}, "
                  f"slack {row['slack']:+.3f}) {row['wall_s']} s", file=sys.stderr, flush=True)
    result = {"machine": machine_info(), "runs": rows,
              "summary": {t: summary([r for r in rows if r["test"] == t]) for t in tests
                          if any(r["test"] == t for r in rows)}}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
