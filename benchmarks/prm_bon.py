"""PRM / ORM / majority best-of-N on arithmetic, with Math-Shepherd labels, one-forward scoring speed and
search overhead. Not a test.

    python benchmarks/prm_bon.py --quick                      # a few minutes on one CPU thread
    python benchmarks/prm_bon.py --backbone runs/sft_arith_tiny/checkpoint-400 --policy runs/sft_arith_tiny/checkpoint-400

Steps: (1) automatic labels from the policy (`seqrl.search.labels`; accuracy against the exact step
truth, hard and soft); (2) a PRM and an ORM trained on them (`seqrl.algos.prm`); (3) best-of-N curves
(`seqrl.search.curves`) up to N = 64 over seeds: first, majority, PRM/ORM max and weighted, pass@N;
(4) scoring speed of one forward per solution against one forward per step prefix, same model,
8-step solutions; (5) the share of best-of-N time outside generation and scoring at N = 64.
Without --policy the policy is `NoisyArithmeticPolicy` (simulated, known step error rate), so the
pipeline runs in minutes; with a checkpoint it samples through the rollout engine.
The last stdout line is one JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import torch

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.prm import PRMConfig, PRMDataConfig, train
from seqrl.data import ArithmeticTask
from seqrl.data.stepwise import split_steps
from seqrl.models.lm import ModelConfig, load_policy
from seqrl.models.prm import ProcessRewardModel
from seqrl.rollout import SamplingParams
from seqrl.search import PolicySampler, best_of_n
from seqrl.search.curves import bon_curves, write_outputs
from seqrl.search.labels import LabelConfig, label_problems
from seqrl.search.simulated import NoisyArithmeticPolicy


class Seeded:
    def __init__(self, policy, seed):
        self.policy, self.seed = policy, seed

    def sample(self, problems, n):
        return self.policy.sample(problems, n, seed=self.seed)


def score_speed(prm: ProcessRewardModel, repeats: int) -> float:
    """Median time of per-prefix scoring ÷ one-forward scoring, 32 solutions of 8 steps (7-digit sums)."""
    task = ArithmeticTask(digits=7)
    problems = task.problems("test", 32, seed=0)
    sols = [split_steps(p.target) for p in problems]
    assert all(len(s) == 8 for s in sols)
    one, per = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        prm.score(problems, sols)
        one.append(time.perf_counter() - t)
        t = time.perf_counter()
        qs = [p for p, s in zip(problems, sols) for _ in s]
        prefixes = [s[: k + 1] for s in sols for k in range(len(s))]
        prm.score(qs, prefixes)  # the same batching: T forwards of growing prefixes per solution
        per.append(time.perf_counter() - t)
    one.sort(), per.sort()
    return per[len(per) // 2] / one[len(one) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer problems, steps and seeds' problems")
    ap.add_argument("--policy", help="a policy checkpoint (default: the simulated noisy policy)")
    ap.add_argument("--step-error", type=float, default=0.3, help="simulated policy: step error rate")
    ap.add_argument("--error", default="value", choices=("value", "carry"), help="simulated policy: kind of step error")
    ap.add_argument("--backbone", help="PRM/ORM backbone checkpoint (default: the tiny preset from scratch)")
    ap.add_argument("--digits", type=int, default=2)
    ap.add_argument("--rollouts", type=int, default=4)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="runs/bench-prm-bon")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    n_label, train_steps, n_eval = (400, 150, 60) if args.quick else (2000, 600, 200)
    task = ArithmeticTask(digits=args.digits)
    t0 = time.perf_counter()

    if args.policy:
        policy = load_policy(ModelConfig(path=args.policy))
        labeller = policy
        make_sampler = lambda seed: PolicySampler(policy, SamplingParams(temperature=1.0, max_new_tokens=64, seed=seed))  # noqa: E731
    else:
        sim = NoisyArithmeticPolicy(step_error=args.step_error, error=args.error)
        labeller = sim
        make_sampler = lambda seed: Seeded(sim, seed)  # noqa: E731
    stats = label_problems(labeller, task, task.problems("train", n_label, 0),
                           LabelConfig(n=2, rollouts=args.rollouts, max_new_tokens=64), out / "labels.jsonl",
                           progress=False)
    print(f"labels: {stats.rows} solutions, {stats.steps} steps, hard acc {stats.label_acc_hard:.3f}, "
          f"soft acc {stats.label_acc_soft:.3f}, {stats.generated_tokens:,} generated tokens", file=sys.stderr)

    backbone = ModelConfig(path=args.backbone) if args.backbone else ModelConfig(preset="tiny", max_seq_len=96)
    models, fits = {}, {}
    for kind in ("prm", "orm"):
        cfg = PRMConfig(run=RunConfig(name=kind, out_dir=str(out), progress=False, log_every=50, threads=args.threads, bf16=False),
                        model=backbone, task=TaskConfig(name="arith", kwargs={"digits": args.digits}),
                        data=PRMDataConfig(path=str(out / "labels.jsonl")), optim=OptimConfig(lr=2e-3, warmup_steps=20),
                        kind=kind, steps=train_steps, batch_size=32)
        fits[kind] = train(cfg)
        models[kind] = ProcessRewardModel.load(out / kind / f"checkpoint-{train_steps}")
        print(f"{kind}: held-out AUC vs its labels {fits[kind]['eval/auc']:.3f}", file=sys.stderr)

    seeds = [int(s) for s in args.seeds.split(",")]
    budgets = [1, 2, 4, 8, 16, 32, 64]
    problems = task.problems("test", n_eval, 0)
    curves = bon_curves(problems, make_sampler, models, task, budgets, seeds, aggregation="min")
    curves.update(policy=args.policy or f"simulated:{args.step_error}:{args.error}", backbone=args.backbone or "tiny preset")
    write_outputs(curves, out / "bon", f"best-of-N on arith {args.digits}-digit")
    print((out / "bon" / "bon.md").read_text(), file=sys.stderr)
    acc = curves["accuracy"]
    at = {n: budgets.index(n) for n in (16, 64)}

    speed_prm = ProcessRewardModel.build(ModelConfig(preset="tiny", max_seq_len=256))
    speedup = score_speed(speed_prm, 3 if args.quick else 7)

    run = best_of_n(problems, make_sampler(seeds[0]), 64, models["prm"], select="weighted", aggregation="min", task=task)
    overhead = run.account.other_s / run.account.total_s

    caps = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "unknown"
    print(json.dumps({
        "weighted_minus_majority_acc_at_16": acc["prm_weighted"][at[16]] - acc["majority"][at[16]],
        "weighted_minus_majority_acc_at_64": acc["prm_weighted"][at[64]] - acc["majority"][at[64]],
        "prm_minus_orm_acc_at_64": acc["prm_weighted"][at[64]] - acc["orm_weighted"][at[64]],
        "label_acc_hard": stats.label_acc_hard, "label_acc_soft": stats.label_acc_soft,
        "prm_auc_vs_labels": fits["prm"]["eval/auc"], "orm_auc_vs_labels": fits["orm"]["eval/auc"],
        "score_speedup_vs_per_step": speedup, "search_overhead_frac": overhead,
        "acc_at_64": {k: v[at[64]] for k, v in acc.items()},
        "policy": curves["policy"], "backbone": curves["backbone"], "quick": args.quick, "cpu": caps,
        "total_s": time.perf_counter() - t0,
    }))


if __name__ == "__main__":
    main()
