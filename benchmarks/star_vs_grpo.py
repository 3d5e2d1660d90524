#!/usr/bin/env python
"""STaR vs rejection-sampling fine-tuning (RFT) vs GRPO at an equal generated-token budget.

    python benchmarks/star_vs_grpo.py --quick     # seed 0: 2 STaR iterations on 512 problems (≈ 8 min on a shared 2-core CPU)
    python benchmarks/star_vs_grpo.py             # seeds 0-2: the arith_tiny_star preset, 4 iterations

All three start from the same base model (the STaR run's short SFT, saved in its run folder) and
are scored on the same held-out problems by greedy accuracy:

* STaR: the preset (rationalization on, one sample per problem);
* RFT: rationalization off, 4 samples per problem on as many problems as give an iteration
  STaR's tokens per iteration (at STaR's tokens per sample);
* GRPO: the arith_tiny_grpo settings (β = 0.04, lr 5e-5) with 64 completions per step (groups of 8),
  for as many steps as STaR's training tokens buy at the base's mean completion length.

The budget is the tokens STaR generated for training (evaluation excluded). Each method's own count
is printed beside its accuracy. The last line is one JSON object: star_acc, rft_acc, grpo_acc (means
over seeds), base_acc, and the tokens each used. It is also written, with every seed's curves, to
``--json`` (default ``runs/bench-star/star_vs_grpo[-quick].json``), and held-out accuracy against
generated training tokens, the three methods on one plot, to the PNG of the same name beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from seqrl.algos.config import TaskConfig  # noqa: E402

from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.algos.grpo import GRPOConfig, LossConfig, SamplingConfig  # noqa: E402
from seqrl.algos.grpo import train as train_grpo  # noqa: E402
from seqrl.algos.star import BaseConfig, STaRConfig  # noqa: E402
from seqrl.algos.star import train as train_star  # noqa: E402
from seqrl.cli import resolve_config  # noqa: E402
from seqrl.config import load_config  # noqa: E402
from seqrl.evaluation import EvalConfig  # noqa: E402
from seqrl.models import ModelConfig  # noqa: E402
from seqrl.utils.metrics import read_metrics  # noqa: E402


def star_config(quick: bool, seed: int, out: Path, name: str, **changes) -> STaRConfig:
    cfg = load_config(STaRConfig, resolve_config("arith_tiny_star", "star"), root="star")
    cfg.run = RunConfig(name=name, out_dir=str(out), seed=seed, progress=False, bf16=False)
    if quick:
        cfg.task = TaskConfig(name="arith", kwargs={"digits": 2}, n_train=512, n_test=100)
        cfg.iterations = 2
    for key, value in changes.items():
        setattr(cfg, key, value)
    return cfg


def run_seed(quick: bool, seed: int, out: Path) -> dict:
    star = star_config(quick, seed, out, f"star-{seed}")
    train_star(star)
    records = read_metrics(star.run.dir / "metrics.jsonl")
    base_acc, base_len = records[0]["eval/accuracy"], records[0]["eval/mean_length"]
    budget = records[-1]["star/generated_tokens"]
    base_path = str(star.run.dir / "base")

    # RFT gets STaR's tokens per iteration: 4 samples on as many problems as they buy at STaR's
    # tokens per sample of iteration 1 (its rationalization samples counted)
    first = records[1]
    samples = star.task.n_train * (1 + (1 - first["star/solved"]))
    per_sample = first["star/iteration_generated_tokens"] / samples
    rft_problems = max(1, round(budget / star.iterations / (4 * per_sample)))
    rft = star_config(quick, seed, out, f"rft-{seed}", rationalize=False, samples_per_problem=4,
                      base=BaseConfig(path=base_path))
    rft.task = TaskConfig(name="arith", kwargs={"digits": 2}, n_train=rft_problems, n_test=star.task.n_test)
    train_star(rft)
    rft_records = read_metrics(rft.run.dir / "metrics.jsonl")

    batch = 64
    steps = max(1, round(budget / (batch * max(base_len, 1.0))))
    grpo = GRPOConfig(
        run=RunConfig(name=f"grpo-{seed}", out_dir=str(out), seed=seed, progress=False, log_every=1, bf16=False),
        model=ModelConfig(path=base_path),
        task=TaskConfig(name="arith", kwargs={"digits": 2}, n_train=5000, n_test=star.task.n_test),
        optim=OptimConfig(lr=5e-5, warmup_steps=4, schedule="constant"),
        eval=EvalConfig(max_new_tokens=star.eval.max_new_tokens, every=max(1, steps // 4)),
        sampling=SamplingConfig(temperature=1.0, max_new_tokens=star.max_new_tokens),
        loss=LossConfig(beta=0.04),
        steps=steps, batch_size=batch, group_size=8, micro_batch_size=64,
    )
    grpo_final = train_grpo(grpo)
    grpo_tokens, grpo_curve = 0.0, []
    for r in read_metrics(grpo.run.dir / "metrics.jsonl"):
        grpo_tokens += r.get("perf/gen_tokens", 0.0)
        if "eval/accuracy" in r:
            grpo_curve.append((grpo_tokens, r["eval/accuracy"]))
    if not grpo_curve or grpo_curve[0][0] > 0:  # GRPO's own evaluation before its first step is the base's
        grpo_curve.insert(0, (0.0, base_acc))
    row = {"seed": seed, "base_acc": base_acc, "budget_tokens": budget,
           "star_acc": records[-1]["eval/accuracy"], "star_tokens": budget,
           "rft_acc": rft_records[-1]["eval/accuracy"], "rft_tokens": rft_records[-1]["star/generated_tokens"],
           "grpo_acc": grpo_final["eval/accuracy"], "grpo_tokens": grpo_tokens, "grpo_steps": steps,
           "star_curve": [(r["star/generated_tokens"], r["eval/accuracy"]) for r in records],
           "rft_curve": [(r["star/generated_tokens"], r["eval/accuracy"]) for r in rft_records],
           "grpo_curve": grpo_curve}
    print(json.dumps(row), flush=True)
    return row


def mean_curve(curves: list[list[tuple[float, float]]]) -> tuple[list[float], list[float], list[float]]:
    """Point by point over seeds: mean tokens, mean accuracy, and its standard error (0 for one
    seed). Curves of different lengths are aligned on their first points and on their last (the
    final evaluation), the extra middle points of the longer ones left out.

    >>> mean_curve([[(0, 0.1), (10, 0.3)], [(0, 0.3), (20, 0.5), (30, 0.9)]])
    ([0.0, 20.0], [0.2, 0.6], [0.1, 0.3])
    """
    n = min(len(c) for c in curves)
    xs, ys, ses = [], [], []
    for i in range(n):
        points = [c[i] if i < n - 1 else c[-1] for c in curves]
        x = [pt[0] for pt in points]
        y = [pt[1] for pt in points]
        m = sum(y) / len(y)
        xs.append(round(sum(x) / len(x), 6))
        ys.append(round(m, 6))
        ses.append(round(math.sqrt(sum((v - m) ** 2 for v in y) / (len(y) - 1) / len(y)), 6) if len(y) > 1 else 0.0)
    return xs, ys, ses


def plot(rows: list[dict], path: Path, title: str) -> Path:
    """Held-out accuracy against generated training tokens on one plot: a thin line per method and
    seed, and per method the point-by-point mean over seeds with its standard error."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    for method, name, color in (("star", "STaR", "C0"), ("rft", "RFT", "C1"), ("grpo", "GRPO", "C2")):
        curves = [row[f"{method}_curve"] for row in rows]
        for curve in curves:
            xs, ys = zip(*curve)
            ax.plot(xs, ys, color=color, alpha=0.3, linewidth=1)
        xs, ys, ses = mean_curve(curves)
        ax.errorbar(xs, ys, yerr=ses, color=color, marker="o", linewidth=2, capsize=3,
                    label=f"{name} (mean of {len(rows)} seed{'s' * (len(rows) > 1)})")
    ax.set_xlabel("generated training tokens")
    ax.set_ylabel("held-out greedy accuracy")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one seed, 2 iterations on 512 problems")
    parser.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default: 1 quick, 3 full)")
    parser.add_argument("--out", default=None, help="run folders (default: a temporary folder)")
    parser.add_argument("--json", default=None, help="the result file (default runs/bench-star/star_vs_grpo[-quick].json); "
                                                     "the plot goes beside it, as .png")
    args = parser.parse_args()
    seeds = args.seeds or (1 if args.quick else 3)
    json_path = Path(args.json or ROOT / "runs" / "bench-star" / f"star_vs_grpo{'-quick' if args.quick else ''}.json")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        rows = [run_seed(args.quick, s, out) for s in range(seeds)]

    def mean(key):
        return sum(r[key] for r in rows) / len(rows)

    def se(key):
        return math.sqrt(sum((r[key] - mean(key)) ** 2 for r in rows) / max(len(rows) - 1, 1) / len(rows))

    print(f"{'method':<8} {'held-out acc':>14} {'tokens':>10}")
    print(f"{'base':<8} {mean('base_acc'):>14.3f} {0:>10}")
    for m in ("star", "rft", "grpo"):
        print(f"{m:<8} {mean(m + '_acc'):>8.3f} ± {se(m + '_acc'):.3f} {mean(m + '_tokens'):>10.0f}")
    summary = {"star_acc": round(mean("star_acc"), 4), "rft_acc": round(mean("rft_acc"), 4),
               "grpo_acc": round(mean("grpo_acc"), 4), "base_acc": round(mean("base_acc"), 4),
               "star_acc_se": round(se("star_acc"), 4), "rft_acc_se": round(se("rft_acc"), 4),
               "grpo_acc_se": round(se("grpo_acc"), 4),
               "budget_tokens": round(mean("budget_tokens")), "rft_tokens": round(mean("rft_tokens")),
               "grpo_tokens": round(mean("grpo_tokens")), "seeds": seeds, "quick": args.quick}
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    png = plot(rows, json_path.with_suffix(".png"),
               f"STaR vs RFT vs GRPO, 2-digit addition, tiny preset ({seeds} seed{'s' * (seeds > 1)})")
    print(f"wrote {json_path} and {png}", file=sys.stderr)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
