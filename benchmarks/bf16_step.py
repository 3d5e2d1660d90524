#!/usr/bin/env python
"""bf16 autocast against fp32 for an LM training step on this CPU: is `run.bf16: auto` right here? Not a test.

    python benchmarks/bf16_step.py                          # tiny, small, SmolLM2-135M (fetched once); ≈ 4 min
    python benchmarks/bf16_step.py --grpo --presets smollm2 # seqrl's GRPO train_step itself, ≈ 6 min

One training step = forward of a (B, L) batch, token cross-entropy in fp32, backward (an SFT / GRPO
micro-batch; weights fp32 as the trainers keep them). The same model runs the step in fp32 and under
``torch.autocast(cpu, bfloat16)`` in turn (the load of a shared machine moves within seconds); medians
and their ratio (bf16 / fp32, < 1: bf16 faster). Also the forward alone under ``no_grad`` (a reference
model's or an old policy's log-probs). ``--grpo``: seqrl's `GRPOLearner.train_step` instead (the
shared-prompt forward, packed micro-batches, the clipped loss, AdamW), on one batch collected once
(2-digit addition prompts in the model's chat template, 32 completions, G = 8, skipping of zero-variance
groups off so every row is trained). The last line is one JSON object with the CPU's capabilities:
``bf16_fast`` is what `run.bf16: auto` resolves to on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="tiny,small,smollm2")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--grpo", action="store_true", help="time GRPOLearner.train_step on one collected batch")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    from _warm_start import preset_policy  # benchmarks/, the script's own folder
    from seqrl.utils.dist import bf16_fast

    torch.set_num_threads(args.threads)
    results = []
    for preset in [p for p in args.presets.split(",") if p]:
        torch.manual_seed(0)
        policy = preset_policy(preset, max(128, args.length))
        model = policy.model
        model.train()
        vocab = model.config.vocab_size
        ids = torch.randint(3, vocab, (args.batch, args.length), generator=torch.Generator().manual_seed(1))

        def train_step(bf16: bool) -> None:
            model.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits  # (B, L, V)
            F.cross_entropy(logits[:, :-1].float().reshape(-1, vocab), ids[:, 1:].reshape(-1)).backward()

        def forward(bf16: bool) -> None:
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                model(input_ids=ids, attention_mask=torch.ones_like(ids))

        row = {"preset": preset, "parameters": sum(p.numel() for p in model.parameters()), "batch": args.batch,
               "length": args.length}
        steps = (("train_step", train_step), ("forward", forward))
        if args.grpo:
            learner = grpo_learner(policy, args)
            batch = learner.collect(0)
            row.update(batch=len(batch.rewards), length=int(batch.completion_mask.sum(1).max()),
                       mean_completion=round(float(batch.completion_mask.sum(1).float().mean()), 1))

            def grpo_step(bf16: bool) -> None:
                learner.cfg.run.bf16 = bf16
                learner.train_step(batch)

            steps = (("grpo_train_step", grpo_step),)
        for name, fn in steps:
            fn(False), fn(True)  # warm-up
            times: dict[bool, list[float]] = {False: [], True: []}
            for r in range(args.repeats):
                for bf16 in (False, True) if r % 2 == 0 else (True, False):
                    t = time.perf_counter()
                    fn(bf16)
                    times[bf16].append(time.perf_counter() - t)
            fp32, bf16 = statistics.median(times[False]), statistics.median(times[True])
            row.update({f"{name}_fp32_ms": round(1000 * fp32, 1), f"{name}_bf16_ms": round(1000 * bf16, 1),
                        f"{name}_ratio": round(bf16 / fp32, 3)})
        print(json.dumps(row), flush=True)
        results.append(row)
    caps = dict(torch.cpu.get_capabilities())
    print(json.dumps({"bench": "bf16_step", "results": results, "threads": args.threads, "torch": torch.__version__,
                      "avx512_bf16": bool(caps.get("avx512_bf16")), "amx_bf16": bool(caps.get("amx_bf16")),
                      "bf16_fast": bf16_fast(torch.device("cpu")), "load_avg_1m": round(os.getloadavg()[0], 2)}))


def grpo_learner(policy, args: argparse.Namespace):
    """A GRPOLearner on `policy` (fp32 weights) with grpo_vs_trl.py's settings, every row trained (the
    learner trains the policy it is given, so the config names no model)."""
    import tempfile

    from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
    from seqrl.algos.grpo import GRPOConfig, GRPOLearner, LossConfig, SamplingConfig

    cfg = GRPOConfig(run=RunConfig(name="bf16_step", out_dir=tempfile.gettempdir(), seed=0, threads=args.threads,
                                   bf16=False, progress=False),
                     task=TaskConfig(name="arith", kwargs={"digits": 2}, n_train=500),
                     optim=OptimConfig(lr=1e-6, weight_decay=0.0, warmup_steps=0, schedule="constant"),
                     sampling=SamplingConfig(temperature=1.0, max_new_tokens=96),
                     loss=LossConfig(beta=0.0), steps=10, batch_size=32, group_size=8, micro_batch_size=32,
                     skip_zero_advantage=False)
    task = cfg.task.build()
    return GRPOLearner(cfg, policy, task, task.problems("train", 500, 0))


if __name__ == "__main__":
    main()
