#!/usr/bin/env python
"""Reward model: held-out pairwise accuracy against the number of preference pairs and the label noise.

    python benchmarks/rm_pairs_scaling.py              # 3 seeds × (100, 300, 1000 pairs) + noise 0.2, 0.4 at 1000
    python benchmarks/rm_pairs_scaling.py --quick      # 1 seed, 100 and 1000 pairs, no noise runs

The policy is the PPO e2e test's weak SFT model (tiny preset, 100 SFT steps on 1-digit addition,
lr 3e-3, batch 32; cached under ``runs/bench-cache/``); ``build_preferences`` samples 4 answers per
prompt from it and pairs a verified with an unverified one (``seqrl data preferences``). The pool
is split once by prompt, as the trainer splits (hash of the prompt text < ``--heldout-frac``): the
held-out pairs are the same in every run and never noisy. Run (n, seed, noise) trains on n pairs
drawn from the training side with seed ``seed``, each pair's sides swapped with probability
``noise`` (seeded), written with the held-out pairs to one JSONL file; ``seqrl train rm`` with
``data.heldout_frac`` equal to the pool's split then holds out exactly those pairs. Every run has
the same steps, batch, learning rate and model; ``run.seed`` = seed (head initialisation, data
order). Runs go one after another, each printed as its exact command.

The last printed line is one JSON object: per setting the mean held-out pairwise accuracy, its
standard error over seeds and the per-seed values.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1 seed, 100 and 1000 pairs, no noise runs")
    p.add_argument("--sizes", default=None, help="comma-separated pair counts (default 100,300,1000)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per setting (default 3; 1 quick)")
    p.add_argument("--noise", default=None, help="comma-separated label-noise rates at the largest size (default 0.2,0.4)")
    p.add_argument("--steps", type=int, default=150, help="optimizer steps per run")
    p.add_argument("--bf16", choices=("false", "true", "auto"), default="false",
                   help="the RM runs' run.bf16 (the policy and its pool are fp32 either way)")
    p.add_argument("--lr", type=float, default=3e-4, help="peak learning rate (10 warm-up steps, cosine)")
    p.add_argument("--prompts", type=int, default=2000, help="training problems the pool is sampled from")
    p.add_argument("--heldout-frac", type=float, default=0.2, help="fraction of prompts held out")
    p.add_argument("--cache-dir", default=str(ROOT / "runs" / "bench-cache"), help="policy, pool, run folders")
    args = p.parse_args(argv)
    args.sizes = [int(x) for x in (args.sizes or ("100,1000" if args.quick else "100,300,1000")).split(",") if x]
    args.noise = [float(x) for x in (args.noise if args.noise is not None else ("" if args.quick else "0.2,0.4"))
                  .split(",") if x]
    args.seeds = args.seeds or (1 if args.quick else 3)
    return args


def prompt_hash(text: str) -> float:
    """The trainer's split key (`seqrl.algos.rm.split_by_prompt`)."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 16**8


def pool(args: argparse.Namespace) -> tuple[Path, list[dict], list[dict], dict]:
    """The weak SFT policy and its preference pool, split into (train rows, held-out rows)."""
    from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
    from seqrl.algos.rm import build_preferences, write_jsonl
    from seqrl.algos.sft import EvalConfig, SFTConfig
    from seqrl.data import get_task
    from seqrl.models.lm import ModelConfig

    from _warm_start import cached_sft  # benchmarks/, the script's own folder

    cache = Path(args.cache_dir)
    run_dir = cache / "rm-weak-sft-1digit"
    sft = lambda: SFTConfig(  # noqa: E731 — the PPO e2e test's weak SFT model
        run=RunConfig(name=run_dir.name, out_dir=str(cache), seed=0, progress=False, save_every=0, keep_last=1),
        model=ModelConfig(preset="tiny", max_seq_len=48),
        task=TaskConfig(name="arith", kwargs={"digits": 1}, n_train=2000, n_test=100),
        optim=OptimConfig(lr=3e-3, warmup_steps=10), eval=EvalConfig(max_new_tokens=16), steps=100, batch_size=32)
    warm = cached_sft(run_dir, 100, sft)
    path = cache / f"rm-prefs-1digit-{args.prompts}.jsonl"
    stats_path = path.with_suffix(".stats.json")
    if not path.exists() or not warm["cached"]:
        path.unlink(missing_ok=True)
        rows, stats = build_preferences(warm["checkpoint"], get_task("arith", digits=1), args.prompts, samples=4,
                                        seed=0, max_new_tokens=16)
        write_jsonl(rows, path)
        stats_path.write_text(json.dumps(stats))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    held = [r for r in rows if prompt_hash(r["prompt"]) < args.heldout_frac]
    train = [r for r in rows if prompt_hash(r["prompt"]) >= args.heldout_frac]
    return Path(warm["checkpoint"]), train, held, {**json.loads(stats_path.read_text()), **warm}


def run_file(train: list[dict], held: list[dict], n: int, seed: int, noise: float, out: Path) -> Path:
    """n training rows drawn with `seed`, sides swapped with probability `noise`, then the held-out rows."""
    if n > len(train):
        raise SystemExit(f"{n} pairs asked, the pool has {len(train)} training pairs: raise --prompts")
    rng = random.Random(seed)
    rows = []
    for r in rng.sample(train, n):
        if rng.random() < noise:
            r = {**r, "chosen": r["rejected"], "rejected": r["chosen"], "flipped": True}
        rows.append(r)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows + held))
    return out


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    started = time.perf_counter()
    ckpt, train, held, info = pool(args)
    print(f"policy {ckpt}: sample accuracy {info['sample_accuracy']:.3f}; pool {len(train)} train / {len(held)} "
          f"held-out pairs ({len(set(r['prompt'] for r in held))} held-out prompts)", flush=True)
    settings = [(n, 0.0) for n in args.sizes] + [(max(args.sizes), x) for x in args.noise]
    out_dir = Path(args.cache_dir) / "rm-scaling"
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    results: dict[str, dict] = {}
    for n, noise in settings:
        accs = []
        for seed in range(args.seeds):
            name = f"rm-n{n}-noise{noise:g}-seed{seed}" + ("" if args.bf16 == "false" else f"-bf16{args.bf16}")
            data = run_file(train, held, n, seed, noise, out_dir / f"{name}.jsonl")
            cmd = [sys.executable, "-m", "seqrl", "train", "rm", "--config", "arith_tiny_rm",
                   f"--model.path={ckpt}", f"--data.path={data}", f"--data.heldout_frac={args.heldout_frac}",
                   f"--run.seed={seed}", f"--steps={args.steps}", f"--optim.lr={args.lr}", "--eval.every=0",
                   "--run.save_every=0", "--run.keep_last=1", "--run.progress=false", f"--run.out_dir={out_dir}",
                   f"--run.name={name}", f"--run.bf16={args.bf16}"]
            if (out_dir / name).exists():
                import shutil

                shutil.rmtree(out_dir / name)
            print("$ " + " ".join(cmd[1:]), flush=True)
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            final = [json.loads(line) for line in (out_dir / name / "metrics.jsonl").read_text().splitlines()][-1]
            if final["eval/pairs"] != len(held):
                raise RuntimeError(f"{name}: {final['eval/pairs']} held-out pairs, expected {len(held)}")
            accs.append(final["eval/pairwise_accuracy"])
            print(f"  held-out pairwise accuracy {accs[-1]:.4f}, margin {final['eval/margin']:.3f} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        se = statistics.stdev(accs) / len(accs) ** 0.5 if len(accs) > 1 else float("nan")
        results[f"n{n}_noise{noise:g}"] = {"pairs": n, "noise": noise, "mean": round(statistics.fmean(accs), 4),
                                          "se": round(se, 4), "per_seed": [round(a, 4) for a in accs]}
        print(f"n={n} noise={noise:g}: {statistics.fmean(accs):.4f} ± {se:.4f} (s.e., {len(accs)} seeds)", flush=True)
    summary = {"benchmark": "rm_pairs_scaling", "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
               "steps": args.steps, "lr": args.lr, "bf16": args.bf16, "heldout_pairs": len(held), "pool_train_pairs": len(train),
               "sample_accuracy": info["sample_accuracy"], "results": results,
               "load_avg_1_5_15": [round(x, 2) for x in os.getloadavg()], "total_s": round(time.perf_counter() - started, 1)}
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    main()
