#!/usr/bin/env python
"""GRPO with bf16 autocast on vs off (`run.bf16`): step time interleaved in one process, and the learning gain.

    python benchmarks/grpo_bf16.py --quick     # tiny, 30 steps per side (≈ 3 min on an idle machine)
    python benchmarks/grpo_bf16.py             # tiny, 90 steps per side: the GRPO e2e test's setting

Two `GRPOLearner`s start from the same warm start (the tiny preset after the SFT of
`grpo_vs_trl.py`, cached under ``runs/bench-cache/``) with the same config and seed, except
``run.bf16``: false (fp32) and true (bf16 autocast for the training forward, fp32 master weights).
The config is the GRPO e2e test's (`tests/e2e/test_grpo_learns.py`): 2-digit addition, 128
completions per step, G 8, one micro-batch, β 0, lr 3e-5 constant, 32 new tokens. The two trainers
alternate step by step (which goes first alternates too), so the machine's load hits both alike;
step time = ``collect`` + ``train_step``, split into generation+scoring and training. Sampling uses
the trainer's own per-step seeds, so the first step's completions are the same on both sides.

The bf16 trainer samples under autocast too (``run.bf16`` covers ``collect``'s generation: the
lean decode path then runs its projections in bf16, `seqrl.rollout.lean`).

Learning: held-out greedy accuracy and pass@1 (8 samples at T = 1 on 200 test problems, fp32 for
both) before training and after each side's last step. The last printed line is one JSON object
(``bf16_vs_fp32_step``: paired median fp32 step s / bf16 step s, > 1 = bf16 faster; the gains;
the CPU's capabilities and the load average). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # runnable from a checkout without installing the package
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from _machine import machine_info  # noqa: E402 — benchmarks/, the script's own folder

SIDES = ("fp32", "bf16")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="30 steps per side")
    p.add_argument("--steps", type=int, default=None, help="GRPO steps per side (90; quick 30)")
    p.add_argument("--seeds", default="0", help="comma-separated run seeds")
    p.add_argument("--preset", choices=("tiny", "small"), default="tiny", help="warm start of grpo_vs_trl.py")
    p.add_argument("--no-eval", action="store_true", help="step times only")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cache-dir", default=str(ROOT / "runs" / "bench-cache"))
    a = p.parse_args(argv)
    a.steps = a.steps or (30 if a.quick else 90)
    a.seed_list = [int(s) for s in a.seeds.split(",") if s.strip()]
    if a.steps < 2 or not a.seed_list:
        p.error("--steps must be >= 2 (the first step is a warm-up) and --seeds non-empty")
    return a


def make_trainer(checkpoint: str, seed: int, bf16: bool, steps: int, threads: int):
    from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
    from seqrl.algos.grpo import GRPOConfig, GRPOLearner, LossConfig, SamplingConfig
    from seqrl.evaluation import EvalConfig
    from seqrl.models import ModelConfig, load_pretrained

    cfg = GRPOConfig(  # tests/e2e/test_grpo_learns.py
        run=RunConfig(name="bench_bf16", out_dir=tempfile.gettempdir(), seed=seed, threads=threads, bf16=bf16,
                      progress=False),
        model=ModelConfig(path=checkpoint),
        task=TaskConfig(name="arith", kwargs={"digits": 2}, n_train=4000, n_test=200),
        optim=OptimConfig(lr=3e-5, warmup_steps=0, schedule="constant"),
        eval=EvalConfig(max_new_tokens=32, samples=8),
        sampling=SamplingConfig(max_new_tokens=32),
        loss=LossConfig(beta=0.0),
        steps=steps, batch_size=128, group_size=8, micro_batch_size=128,
    )
    task = cfg.task.build()
    policy = load_pretrained(checkpoint)
    trainer = GRPOLearner(cfg, policy, task, task.problems("train", cfg.task.n_train, cfg.task.seed))
    policy.model.train()
    return cfg, task, policy, trainer


def evaluate(cfg, task, policy, seed: int) -> dict:
    from seqrl.evaluation import run_evaluation

    out = run_evaluation(policy, task, task.problems("test", cfg.task.n_test, cfg.task.seed), cfg.eval, seed)
    policy.model.train()
    return {"greedy": round(out["eval/accuracy"], 4), "pass@1": round(out["eval/pass@1"], 4)}


def one_step(trainer, step: int) -> dict:
    t0 = time.perf_counter()
    batch = trainer.collect(step)
    metrics = trainer.train_step(batch)
    return {"seconds": time.perf_counter() - t0, "gen_s": batch.metrics["perf/gen_s"],
            "train_s": metrics["perf/train_s"], "reward": batch.metrics["reward/accuracy/mean"],
            "zero_var_groups": batch.metrics["stats/zero_var_groups"]}


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    started, load_start = time.perf_counter(), [round(x, 2) for x in os.getloadavg()]
    from rich.console import Console

    import grpo_vs_trl

    warm = grpo_vs_trl.warm_start(args.preset, grpo_vs_trl.parse_args(["--presets", args.preset,
                                                                       "--cache-dir", args.cache_dir]),
                                  Console(stderr=True))
    per_seed, all_rows = [], []
    for seed in args.seed_list:
        runs = {side: make_trainer(warm["checkpoint"], seed, side == "bf16", args.steps, args.threads)
                for side in SIDES}
        entry: dict = {"seed": seed, "use_bf16": {s: runs[s][0].run.use_bf16 for s in SIDES}}
        if not args.no_eval:
            cfg, task, policy, _ = runs["fp32"]
            entry["before"] = evaluate(cfg, task, policy, seed)  # both sides start from these weights
            log(f"seed {seed}: before {entry['before']}")
        for step in range(args.steps):
            order = SIDES if step % 2 == 0 else SIDES[::-1]
            row = {}
            for side in order:
                row[side] = one_step(runs[side][3], step)
            row.update(seed=seed, step=step)
            all_rows.append(row)
            if step % 10 == 0 or step == args.steps - 1:
                log(f"  seed {seed} step {step}: " + ", ".join(
                    f"{s} {row[s]['seconds']:.2f} s (train {row[s]['train_s']:.2f}) reward {row[s]['reward']:.3f}"
                    for s in SIDES))
        if not args.no_eval:
            for side in SIDES:
                cfg, task, policy, _ = runs[side]
                entry[f"after_{side}"] = evaluate(cfg, task, policy, seed)
                entry[f"pass1_gain_{side}"] = round(entry[f"after_{side}"]["pass@1"] - entry["before"]["pass@1"], 4)
            log(f"seed {seed}: after fp32 {entry['after_fp32']}, bf16 {entry['after_bf16']}")
        per_seed.append(entry)

    rows = [r for r in all_rows if r["step"] > 0]  # each seed's first step is a warm-up

    def med(side, key):
        return statistics.median(r[side][key] for r in rows)

    out = {
        "benchmark": "grpo_bf16", "preset": args.preset, "steps": args.steps, "seeds": args.seed_list,
        "bf16_vs_fp32_step": round(statistics.median(r["fp32"]["seconds"] / r["bf16"]["seconds"] for r in rows), 3),
        "bf16_vs_fp32_train": round(statistics.median(r["fp32"]["train_s"] / r["bf16"]["train_s"] for r in rows), 3),
        "bf16_vs_fp32_gen": round(statistics.median(r["fp32"]["gen_s"] / r["bf16"]["gen_s"] for r in rows), 3),
        **{f"{s}_{k}_median_s": round(med(s, k), 4) for s in SIDES for k in ("seconds", "gen_s", "train_s")},
        **{f"{s}_mean_reward": round(statistics.fmean(r[s]["reward"] for r in all_rows), 4) for s in SIDES},
        **{f"{s}_zero_var_groups": round(statistics.fmean(r[s]["zero_var_groups"] for r in all_rows), 3)
           for s in SIDES},
        "per_seed": per_seed,
        "warm_start": {k: warm.get(k) for k in ("checkpoint", "sft_steps", "greedy_accuracy", "sampled_accuracy")},
        "machine": machine_info(), "load_avg_start_1_5_15": load_start, "torch": torch.__version__,
        "total_s": round(time.perf_counter() - started, 1),
    }
    if not args.no_eval:
        for side in SIDES:
            out[f"pass1_gain_{side}"] = round(statistics.fmean(e[f"pass1_gain_{side}"] for e in per_seed), 4)
    path = Path(args.cache_dir) / f"grpo_bf16-{args.preset}-{args.steps}.json"
    path.write_text(json.dumps({**out, "steps_detail": all_rows}, indent=1))
    print(json.dumps(out), flush=True)
    return out


if __name__ == "__main__":
    main()
