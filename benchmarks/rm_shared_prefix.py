#!/usr/bin/env python
"""Reward-model scoring: a pair's shared start computed once (`shared_prefix_pair_scores`) vs the padded
forward of both sides (`sequence_scores`), the same scores and gradients, on equal work.

    python benchmarks/rm_vs_trl.py --quick          # builds runs/bench-cache/rm-prefs-tiny-1500.jsonl once
    python benchmarks/rm_shared_prefix.py --model runs/bench-cache/rm-init-tiny --pairs-per-batch 32
    python benchmarks/rm_shared_prefix.py --model smollm2-135m-instruct --pairs-per-batch 8

Each batch: forward of both sides, the Bradley–Terry-shaped sum r_c − r_r, backward; process CPU time per
batch (other jobs' load does not stretch it), the two ways interleaved batch by batch on the same
batches, the first round not counted; one torch thread. The last line is one JSON object: the median CPU
seconds of each way, their ratio (< 1: sharing is faster), the tokens per side and shared per pair, and
the machine."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _machine import machine_info  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=str(ROOT / "runs" / "bench-cache" / "rm-init-tiny"),
                   help="a reward-model or causal-LM folder, or a catalogue name (a fresh head is drawn)")
    p.add_argument("--pairs", default=str(ROOT / "runs" / "bench-cache" / "rm-prefs-tiny-1500.jsonl"),
                   help="TRL preference rows")
    p.add_argument("--system", default=None, help="a system prompt preset or text (longer shared prompts)")
    p.add_argument("--pairs-per-batch", type=int, default=32)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()

    import torch

    from seqrl.algos.rm import encode_pairs, pair_scores
    from seqrl.data.preferences import load_preferences
    from seqrl.models.heads import load_scalar_model
    from seqrl.models.lm import ModelConfig
    from seqrl.prompts import PromptConfig

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, tok = load_scalar_model(ModelConfig(path=args.model))
    enc = encode_pairs(load_preferences(args.pairs, -1, None), tok, PromptConfig(system=args.system),
                       int(model.config.max_position_embeddings), False)

    def shared_len(a: list[int], b: list[int]) -> int:
        k = 0
        while k < min(len(a), len(b)) - 1 and a[k] == b[k]:
            k += 1
        return k

    n = args.pairs_per_batch
    batches = [enc[i * n:(i + 1) * n] for i in range(args.batches + 1)]
    times: dict[bool, list[float]] = {False: [], True: []}
    for i, mb in enumerate(batches):
        for shared in (False, True) if i % 2 == 0 else (True, False):
            model.zero_grad()
            t0 = time.process_time()
            c, r = pair_scores(model, mb, tok.pad_token_id, False, shared)
            (c - r).sum().backward()
            if i:
                times[shared].append(time.process_time() - t0)
        print(f"batch {i}: padded {times[False][-1] if i else float('nan'):.3f} s, shared "
              f"{times[True][-1] if i else float('nan'):.3f} s", file=sys.stderr)
    used = [p for mb in batches[1:] for p in mb]
    padded, shared = statistics.median(times[False]), statistics.median(times[True])
    print(json.dumps({"benchmark": "rm_shared_prefix", "model": args.model, "pairs_per_batch": n,
                      "batches": args.batches, "padded_cpu_s": round(padded, 4), "shared_cpu_s": round(shared, 4),
                      "shared_over_padded": round(shared / padded, 3),
                      "tokens_per_side": round(statistics.fmean(len(p.chosen) + len(p.rejected) for p in used) / 2, 1),
                      "shared_tokens_per_pair": round(statistics.fmean(shared_len(p.chosen, p.rejected) for p in used), 1),
                      "threads": args.threads, **machine_info()}))


if __name__ == "__main__":
    main()
