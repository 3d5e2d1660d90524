#!/usr/bin/env python
"""PPO with a critic vs GRPO, both seqrl's, from the same weak SFT model with the verifier as reward.

    python benchmarks/ppo_vs_grpo.py --quick     # 1 seed × 30 steps of 64 completions each
    python benchmarks/ppo_vs_grpo.py --quick --seeds 0,1,2   # 3 seeds × 30 steps
    python benchmarks/ppo_vs_grpo.py             # 3 seeds × 60 steps

No maintained CPU-runnable PPO trainer exists to pair ours with (TRL 1.x removed its PPOTrainer),
so this compares our two loops on equal work: the same warm start (the end-to-end tests' weak SFT
model, tiny preset, 240 steps on 2-digit addition, cached in `runs/bench-cache/ppo_sft2/`), the same
task (200 distinct held-out problems), 64 completions per step, the same steps, lr (3e-5) and
μ = 2 passes × 2 minibatches. PPO runs at the `ppo/arith_tiny_ppo` preset's settings (64 prompts
once, G = 1, GAE λ = 1, β = 0.05 k1 in the reward, a critic from the SFT weights), GRPO 8 prompts ×
G = 8 with β = 0. Reported per method: median step seconds (generation + update, from
metrics.jsonl), generated tokens, held-out pass@1 and greedy accuracy before and after. The last
stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _warm_start import cached_sft  # noqa: E402

from seqrl.algos import grpo, ppo  # noqa: E402
from seqrl.algos.config import TaskConfig  # noqa: E402
from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.algos.sft import SFTConfig  # noqa: E402
from seqrl.cli import preset_file  # noqa: E402
from seqrl.config import load_config  # noqa: E402
from seqrl.evaluation import EvalConfig  # noqa: E402
from seqrl.models import ModelConfig  # noqa: E402
from seqrl.utils.metrics import read_metrics  # noqa: E402

TASK = TaskConfig(name="arith", kwargs={"digits": 2}, n_train=4000, n_test=200)
SFT_CACHE, SFT_STEPS = Path("runs/bench-cache/ppo_sft2"), 240


def sft_config(out: Path) -> SFTConfig:
    """The end-to-end tests' shared SFT model (tests/e2e/conftest.py)."""
    return SFTConfig(run=RunConfig(name=out.name, out_dir=str(out.parent), seed=0, progress=False),
                     model=ModelConfig(preset="tiny", max_seq_len=64), task=TASK,
                     optim=OptimConfig(lr=3e-3, warmup_steps=30), eval=EvalConfig(max_new_tokens=32, samples=4),
                     steps=SFT_STEPS, batch_size=32)


def ppo_config(run: RunConfig, model_path: str, steps: int, eval_every: int = 0,
               extra: tuple[str, ...] = ()) -> ppo.PPOConfig:
    """The PPO preset's settings at 64 completions per step on TASK (`extra`: more overrides)."""
    return load_config(ppo.PPOConfig, preset_file("ppo/arith_tiny_ppo"), [
        f"--run.name={run.name}", f"--run.out_dir={run.out_dir}", f"--run.seed={run.seed}", "--run.progress=false",
        f"--run.log_every={run.log_every}", f"--run.threads={run.threads}", "--run.save_every=0",
        f"--model.path={model_path}", "--task.kwargs={digits: 2}", f"--task.n_train={TASK.n_train}",
        f"--task.n_test={TASK.n_test}", f"--eval.every={eval_every}", "--eval.max_new_tokens=32", "--eval.samples=4",
        "--sampling.max_new_tokens=32", f"--steps={steps}", "--batch_size=64", "--micro_batch_size=64", *extra])


def summary(run_dir: Path) -> dict:
    rows = read_metrics(run_dir / "metrics.jsonl")
    evals = [r for r in rows if "eval/pass@1" in r]
    steps = [r for r in rows if "perf/gen_s" in r]
    return {"step_s_median": statistics.median(r["perf/gen_s"] + r["perf/train_s"] for r in steps),
            "gen_tokens": sum(r["perf/gen_tokens"] for r in steps),
            "pass1_before": evals[0]["eval/pass@1"], "pass1_after": evals[-1]["eval/pass@1"],
            "greedy_before": evals[0]["eval/accuracy"], "greedy_after": evals[-1]["eval/accuracy"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--retrain", action="store_true", help="retrain the cached SFT warm start")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seeds", help="comma-separated RL seeds (default: 0 with --quick, else 0,1,2)")
    args = parser.parse_args()
    seeds, steps = ([0], 30) if args.quick else ([0, 1, 2], 60)
    if args.seeds:
        seeds = [int(x) for x in args.seeds.split(",")]
    info = cached_sft(SFT_CACHE, SFT_STEPS, lambda: sft_config(SFT_CACHE), args.retrain)
    common = dict(model=ModelConfig(path=info["checkpoint"]), task=TASK,
                  optim=OptimConfig(lr=3e-5, warmup_steps=0, schedule="constant"),
                  eval=EvalConfig(max_new_tokens=32, samples=4), steps=steps, batch_size=64,
                  num_iterations=2, minibatches=2, micro_batch_size=64)
    out: dict[str, list[dict]] = {"ppo": [], "grpo": []}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for name in ("ppo", "grpo"):
                run = RunConfig(name=f"{name}{seed}", out_dir=tmp, seed=seed, progress=False, log_every=1, bf16=False,
                                threads=args.threads)
                if name == "ppo":
                    cfg = ppo_config(run, info["checkpoint"], steps)
                    assert (cfg.optim.lr, cfg.num_iterations, cfg.minibatches) == (
                        common["optim"].lr, common["num_iterations"], common["minibatches"])
                    ppo.train(cfg)
                else:
                    grpo.train(grpo.GRPOConfig(run=run, sampling=grpo.SamplingConfig(max_new_tokens=32),
                                               loss=grpo.LossConfig(beta=0.0), group_size=8, **common))
                out[name].append(summary(Path(tmp) / run.name))
                print(name, seed, out[name][-1], file=sys.stderr)
    result = {"seeds": seeds, "steps": steps}
    for name, runs in out.items():
        for key in runs[0]:
            result[f"{name}_{key}"] = round(statistics.mean(r[key] for r in runs), 4)
        result[f"{name}_pass1_gain_per_seed"] = [round(r["pass1_after"] - r["pass1_before"], 4) for r in runs]
    result["step_time_ratio_ppo_vs_grpo"] = round(result["ppo_step_s_median"] / result["grpo_step_s_median"], 3)
    result["pass1_gain_delta_ppo_minus_grpo"] = round(
        (result["ppo_pass1_after"] - result["ppo_pass1_before"]) - (result["grpo_pass1_after"] - result["grpo_pass1_before"]), 4)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
