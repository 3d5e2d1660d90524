#!/usr/bin/env python
"""Beam search's generation time with and without the stepper's prefix cache, on any policy.

    python benchmarks/prefix_cache_probe.py --policy smollm2 --problems 8 --repeats 2   # ≈ 6 min, one thread

The policy continues GSM-style problems in its chat template step by step (step = up to a blank line or
`--step-tokens`); the scorer is a fixed function of the text (its cost is not what is measured). Each repeat
runs the same search (same seed) without and with the cache; both must choose the same solutions.
The last printed line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))


class TextScorer:
    """A deterministic score of the text: the search keeps different beams without a model's cost."""

    tokens_scored = 0

    def score(self, problems, solutions):
        return [[float(len(s) % 7)] for s in solutions]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="smollm2", help="smollm2 or a preset (tiny, small)")
    ap.add_argument("--problems", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--width", type=int, default=4)
    ap.add_argument("--step-tokens", type=int, default=48)
    ap.add_argument("--solution-tokens", type=int, default=192)
    args = ap.parse_args()
    import torch

    from _warm_start import preset_policy
    from seqrl.algos.config import TaskConfig
    from seqrl.search import PolicyStepper, beam_search

    torch.set_num_threads(1)
    torch.manual_seed(0)
    policy = preset_policy(args.policy, max_seq_len=512)
    task = TaskConfig(name="gsm", kwargs={"answer_format": "lenient"}, n_train=100, n_test=max(50, args.problems)).build()
    problems = task.problems("test", args.problems, 0)
    rows, ratios, same = [], [], True
    for r in range(args.repeats):
        res = {}
        for cached in (False, True):
            stepper = PolicyStepper(policy, temperature=0.8, step_tokens=args.step_tokens,
                                    solution_tokens=args.solution_tokens, seed=r,
                                    **({} if cached else {"prefix_cache": None}))
            res[cached] = beam_search(problems, stepper, TextScorer(), n=args.n, beam_width=args.width, max_steps=8)
            acc = res[cached].account
            rows.append({"cache": cached, "repeat": r, "gen_s": round(acc.gen_s, 3), "generated_tokens": acc.generated_tokens,
                         "rounds": res[cached].rounds,
                         "hits": stepper.prefix_cache.hits if cached else None,
                         "misses": stepper.prefix_cache.misses if cached else None})
            print(rows[-1], flush=True)
        same &= res[True].chosen == res[False].chosen
        ratios.append(res[False].account.gen_s / res[True].account.gen_s)
    caps = torch.cpu.get_capabilities()
    print(json.dumps({"bench": "prefix_cache_probe", "policy": args.policy, "problems": args.problems,
                      "prompt_tokens_mean": round(statistics.mean(len(p) for p in policy.encode_prompts(problems)), 1),
                      "speedup": round(statistics.median(ratios), 3), "speedups": [round(x, 3) for x in ratios],
                      "same_solutions": same, "rows": rows, "cpu": caps.get("cpu_name"),
                      "avx512_bf16": bool(caps.get("avx512_bf16")), "amx_bf16": bool(caps.get("amx_bf16")),
                      "load_avg_1m": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
