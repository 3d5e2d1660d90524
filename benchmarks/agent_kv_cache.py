#!/usr/bin/env python
"""Multi-turn sampling with the episode's keys and values kept between turns, against re-prefilling the
history at every turn (`seqrl.agents.rollout.engine_sampler`, ``agent.kv_cache_mb`` vs 0).

    python benchmarks/agent_kv_cache.py --policy smollm2 --episodes 8 --turns 6 --repeats 3   # one thread

A turn is the policy writing up to `--turn-tokens` tokens or to a line break (standing in for a closed
tool call); a tool turn of `--tool-tokens` tokens (a tool result as the chat template frames it) then joins
the history and the next turn samples. Both arms sample the same tokens (same seeds; checked) — only
where the history's keys and values come from differs. Arms alternate within each repeat; the ratio is
per repeat. The last printed line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def episodes(policy, prompts, tool, turns: int, turn_tokens: int, cache_bytes: int, seed: int):
    """Sample `turns` turns of every prompt; returns (seconds, sampled tokens per turn, cache hits)."""
    from seqrl.agents.rollout import engine_sampler
    from seqrl.rollout import SamplingParams

    sample = engine_sampler(policy, SamplingParams(temperature=1.0, max_new_tokens=turn_tokens, stop=("\n",)),
                            cache_bytes)
    contexts = [list(p) for p in prompts]
    tokens = []
    t0 = time.perf_counter()
    for t in range(turns):
        got = sample(contexts, turn_tokens, seed + t)
        tokens.append([s.tokens for s in got])
        contexts = [c + s.tokens + tool for c, s in zip(contexts, got)]
    seconds = time.perf_counter() - t0
    return seconds, tokens, (sample.cache.hits if sample.cache is not None else 0), max(map(len, contexts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="smollm2", help="smollm2 or a preset (tiny, small)")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--turn-tokens", type=int, default=48)
    ap.add_argument("--tool-tokens", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import torch

    from _machine import machine_info
    from _warm_start import preset_policy
    from seqrl.prompts import render

    torch.set_num_threads(1)
    torch.manual_seed(0)
    policy = preset_policy(args.policy, max_seq_len=2048)
    tok = policy.tokenizer
    questions = ["Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                 "How many clips did Natalia sell altogether in April and May? Use the python tool.",
                 "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total? "
                 "Check your arithmetic with the python tool."]
    prompts = [tok.encode(render(tok, [{"role": "user", "content": questions[i % 2]}]), add_special_tokens=False)
               for i in range(args.episodes)]
    tool = tok.encode("<tool_response>" + " ".join(str(7 * k) for k in range(200)) + "</tool_response>\n",
                      add_special_tokens=False)[: args.tool_tokens]
    rows, ratios, same = [], [], True
    for r in range(args.repeats):
        arms = {}
        for name, cache_bytes in (("re-prefill", 0), ("kv-cache", 1 << 31))[:: 1 if r % 2 == 0 else -1]:
            arms[name] = episodes(policy, prompts, tool, args.turns, args.turn_tokens, cache_bytes, 1000 * r)
        same &= arms["re-prefill"][1] == arms["kv-cache"][1]
        ratio = arms["kv-cache"][0] / arms["re-prefill"][0]
        ratios.append(ratio)
        rows.append({"repeat": r, "re-prefill_s": round(arms["re-prefill"][0], 2), "kv-cache_s": round(arms["kv-cache"][0], 2),
                     "ratio": round(ratio, 3), "cache_hits": arms["kv-cache"][2], "history_tokens": arms["kv-cache"][3]})
        print(json.dumps(rows[-1]), flush=True)
    summary = {"benchmark": "agent_kv_cache", "policy": args.policy, "episodes": args.episodes, "turns": args.turns,
               "turn_tokens": args.turn_tokens, "tool_tokens": args.tool_tokens, "same_tokens": same,
               "ratio_median": round(statistics.median(ratios), 3), "ratios": [round(x, 3) for x in ratios],
               "repeats": rows, "machine": machine_info()}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
