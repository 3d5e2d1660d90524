#!/usr/bin/env python
"""Search overhead: beam search and MCTS at a fixed budget on the tiny policy, against plain sampling.

    python benchmarks/search_overhead.py --quick     # ≈ 3 min with an empty cache (trains a short SFT)

The policy is the tiny preset after a short SFT on 2-digit addition (cached under
``runs/bench-cache/``), so it writes real multi-step solutions; the scorer is a tiny PRM trained for
a few steps on exactly labelled solutions (its quality does not matter here, only its cost). Fixed
budget: N beams of width M (beam search) and N simulations of width M (MCTS) on P held-out problems.

Reported (fp32, one thread):
* ``beam_tokens_per_s_ratio``: generated tokens per generation-second inside beam search ÷ generated
  tokens per second of plain sampling (N samples per problem, one call, the same settings) — goal ≥ 0.8;
* ``beam_no_prefix_cache_ratio``: the same without the K/V kept across rounds (each round prefills every
  candidate's prompt and partial solution again), interleaved in the same repeats: the cache's share;
* ``beam_overhead_frac``, ``mcts_overhead_frac``: time outside generation and scoring ÷ total — goal ≤ 0.10;
* the token accounts and the seconds split, and the CPU's capabilities (bf16 support changes timings).

The last printed line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--problems", type=int, default=None)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--width", type=int, default=4)
    ap.add_argument("--retrain", action="store_true")
    ap.add_argument("--repeats", type=int, default=None, help="beam / plain pairs (default 3 quick, 5 full)")
    args = ap.parse_args()
    import torch

    from _warm_start import cached_sft
    from seqrl.algos import prm as prm_algo
    from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
    from seqrl.algos.sft import SFTConfig
    from seqrl.evaluation import EvalConfig
    from seqrl.models.lm import ModelConfig, load_pretrained
    from seqrl.models.prm import ProcessRewardModel
    from seqrl.rollout import SamplingParams, generate
    from seqrl.search import PolicyStepper, beam_search, mcts
    from seqrl.utils.checkpoint import latest_checkpoint

    torch.set_num_threads(1)
    problems_n = args.problems or (24 if args.quick else 100)
    task_cfg = TaskConfig(name="arith", kwargs={"digits": 2}, n_train=4000, n_test=200)
    cache = ROOT / "runs" / "bench-cache"
    sft_steps = 150
    warm = cached_sft(cache / f"search-sft-{sft_steps}", sft_steps, lambda: SFTConfig(
        run=RunConfig(name=f"search-sft-{sft_steps}", out_dir=str(cache), seed=0, save_every=sft_steps, progress=False),
        model=ModelConfig(preset="tiny", max_seq_len=128), task=replace(task_cfg), optim=OptimConfig(lr=3e-3),
        eval=EvalConfig(every=sft_steps, max_new_tokens=48), steps=sft_steps, batch_size=32), args.retrain,
        lambda: print(f"training the SFT warm start ({sft_steps} steps)…", flush=True))
    prm_dir = cache / "search-prm-40"
    if args.retrain or latest_checkpoint(prm_dir) is None:
        prm_algo.train(prm_algo.PRMConfig(run=RunConfig(name="search-prm-40", out_dir=str(cache), seed=0, progress=False, bf16=False),
                                          model=ModelConfig(preset="tiny", max_seq_len=128), task=replace(task_cfg),
                                          optim=OptimConfig(lr=2e-3, warmup_steps=5), steps=40, batch_size=32))
    policy = load_pretrained(warm["checkpoint"])
    scorer = ProcessRewardModel.load(latest_checkpoint(prm_dir))
    task = task_cfg.build()
    problems = task.problems("test", problems_n, 0)
    max_new = 48

    stepper = PolicyStepper(policy, temperature=1.0, step_tokens=24, solution_tokens=max_new, seed=0)
    beam_search(problems[:2], stepper, scorer, n=args.width, beam_width=args.width, max_steps=2)  # warm-up
    stepper = PolicyStepper(policy, temperature=1.0, step_tokens=24, solution_tokens=max_new, seed=2)
    tree = mcts(problems, stepper, scorer, simulations=args.n, width=args.width, task=task)

    # Beam search and plain sampling alternate `repeats` times (the load of a shared machine moves within
    # seconds); the ratio is the median of the per-repeat ratios.
    repeats = args.repeats or (3 if args.quick else 5)
    ratios, beam_rates, plain_rates, uncached_ratios, hits = [], [], [], [], []
    for r in range(repeats):
        stepper = PolicyStepper(policy, temperature=1.0, step_tokens=24, solution_tokens=max_new, seed=1,
                                prefix_cache=None)
        uncached = beam_search(problems, stepper, scorer, n=args.n, beam_width=args.width, max_steps=8, task=task)
        stepper = PolicyStepper(policy, temperature=1.0, step_tokens=24, solution_tokens=max_new, seed=1)
        beam = beam_search(problems, stepper, scorer, n=args.n, beam_width=args.width, max_steps=8, task=task)
        hits.append(stepper.prefix_cache.hits / max(stepper.prefix_cache.hits + stepper.prefix_cache.misses, 1))
        t = time.perf_counter()
        prompts = policy.encode_prompts(problems)  # rendering the prompts is counted, as it is in beam's gen_s
        plain = generate(policy, prompts, args.n, SamplingParams(temperature=1.0, max_new_tokens=max_new, seed=3))
        plain_s = time.perf_counter() - t
        plain_rates.append(plain.num_generated_tokens / plain_s)
        beam_rates.append(beam.account.generated_tokens / max(beam.account.gen_s, 1e-9))
        ratios.append(beam_rates[-1] / plain_rates[-1])
        uncached_ratios.append(uncached.account.generated_tokens / max(uncached.account.gen_s, 1e-9) / plain_rates[-1])
    plain_rate, beam_rate = statistics.median(plain_rates), statistics.median(beam_rates)

    def split(acc):
        return {"generated_tokens": acc.generated_tokens, "scorer_tokens": acc.scorer_tokens,
                "gen_s": round(acc.gen_s, 3), "score_s": round(acc.score_s, 3), "other_s": round(acc.other_s, 3),
                "total_s": round(acc.total_s, 3)}

    caps = dict(torch.cpu.get_capabilities())
    out = {
        "bench": "search_overhead", "quick": args.quick, "problems": problems_n, "n": args.n, "width": args.width,
        "policy_greedy_accuracy": warm.get("greedy_accuracy"),
        "beam_accuracy": beam.accuracy, "mcts_accuracy": tree.accuracy,
        "plain_tokens": plain.num_generated_tokens, "plain_tokens_per_s": round(plain_rate, 1),
        "beam_tokens_per_s": round(beam_rate, 1),
        "beam_tokens_per_s_ratio": round(statistics.median(ratios), 3),
        "beam_tokens_per_s_ratios": [round(x, 3) for x in ratios],
        "beam_no_prefix_cache_ratio": round(statistics.median(uncached_ratios), 3),
        "beam_no_prefix_cache_ratios": [round(x, 3) for x in uncached_ratios],
        "cache_vs_no_cache": round(statistics.median(a / b for a, b in zip(ratios, uncached_ratios)), 3),
        "prefix_cache_hit_rate": round(statistics.median(hits), 3),
        "same_solutions_with_and_without_cache": beam.chosen == uncached.chosen,
        "beam_overhead_frac": round(beam.account.other_s / beam.account.total_s, 4),
        "mcts_overhead_frac": round(tree.account.other_s / tree.account.total_s, 4),
        "beam": split(beam.account), "mcts": split(tree.account),
        "cpu": _cpu_model(),
        "avx512_bf16": bool(caps.get("avx512_bf16")), "amx_bf16": bool(caps.get("amx_bf16")),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(out))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
