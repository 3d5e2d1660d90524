#!/usr/bin/env python
"""GRPO's training phase with the shared-prompt forward against the padded forward, on the same batches.

    python benchmarks/shared_prompt_forward.py --quick     # ≈ 3 min on one idle thread
    python benchmarks/shared_prompt_forward.py             # 8 timed steps per side, batch 128 on both presets

What is timed: `GRPOLearner.train_step` (forward, backward, optimizer step; μ = 1, one minibatch,
β = 0) — the training phase only; sampling is the same code either way and is not timed. Two
trainers start from the same weights, one with ``shared_prompt_forward=off`` (every row is prompt +
completion, right-padded to the longest prompt + the batch's longest completion) and one with
``on`` (each prompt but its last token once per micro-batch, its KV cache indexed to the group's
completions, completions cut to the micro-batch's longest, micro-batches packed by prompt and
length). They train on the same batches, interleaved step by step (off, on, on, off, …), so load on
this shared machine hits both alike; the first step of each is a warm-up and not counted.

Batches: sampled by GRPO's own `collect` from the warm start of `grpo_vs_trl.py` when it is cached
(``runs/bench-cache/grpo-warm-<preset>-*``; else the fresh preset, said in the JSON), 2-digit addition,
128 completions per step (``--quick``: 64 on tiny, 32 on small; both forwards scale with the batch
alike), G = 8, micro-batch 64, at most 48 new tokens, natural EOS. Every row's
advantage is set to ±1 so every completion is trained (skipping zero-advantage groups is a separate
saving that works with either forward and would hide this one).

Two prompt settings (``--quick``: the second on tiny only): ``arith`` — the task's own prompts (8 tokens with the tiny
tokenizer's chat template), so the prompt is a small part of each row and the saving comes mostly
from not computing padding; ``long_prompt`` — the same batches with the R1 system instruction
(`seqrl.prompts.SYSTEM_PRESETS["r1"]`, a few hundred tokens here) in front of every prompt, the
shape of LLM RL prompts, where computing each prompt once per group saves most.

``--memory`` adds the peak RSS growth (``VmHWM``) of one training step of the tiny long-prompt setting
per forward, each in a fresh process (activations kept for the backward: 64 rows × the whole prompt
padded, against the prompt once per group).

The last line is one JSON object: ``speedup_<preset>[_long_prompt]`` (padded median s / shared median
s; > 1: the shared forward is faster), the medians, the batch geometry and the CPU's capabilities
(``avx512_bf16``, ``amx_bf16``).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # runnable from a checkout without installing the package
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from seqrl.algos.config import TaskConfig  # noqa: E402

from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.algos.grpo import GRPOConfig, GRPOLearner, LossConfig, SamplingConfig  # noqa: E402
from seqrl.models import ModelConfig, load_policy, load_pretrained  # noqa: E402
from seqrl.prompts import SYSTEM_PRESETS  # noqa: E402
from _machine import machine_info  # noqa: E402 — benchmarks/, the script's own folder


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="few steps (≈ 2–3 min)")
    p.add_argument("--presets", default="tiny,small", help="comma-separated presets (tiny, small)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per forward and setting (default 8; 3 quick)")
    p.add_argument("--long-prompt-presets", default=None,
                   help="presets that also run the long-prompt setting (default: all; tiny with --quick)")
    p.add_argument("--batch-size", type=int, default=None, help="completions per step (default 128; 64 quick)")
    p.add_argument("--small-batch-size", type=int, default=None,
                   help="completions per step on small (default: --batch-size; 32 quick)")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--micro-batch-size", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--memory", action="store_true",
                   help="also: peak RSS of one train_step per forward, each in a fresh process (tiny, long prompt)")
    p.add_argument("--memory-worker", choices=("off", "on"), help=argparse.SUPPRESS)
    p.add_argument("--cache-dir", default=str(ROOT / "runs" / "bench-cache"), help="where grpo_vs_trl.py keeps warm starts")
    args = p.parse_args(argv)
    args.steps = args.steps or (3 if args.quick else 8)
    args.batch_size = args.batch_size or (64 if args.quick else 128)
    args.small_batch_size = args.small_batch_size or (32 if args.quick else args.batch_size)
    args.presets = [x for x in args.presets.split(",") if x]
    long = args.long_prompt_presets if args.long_prompt_presets is not None else ("tiny" if args.quick else ",".join(args.presets))
    args.long_prompt_presets = [x for x in long.split(",") if x]
    return args


def warm_start(cache: Path, preset: str) -> Path | None:
    """The newest cached warm-start checkpoint of `preset` (grpo_vs_trl.py writes them), or None."""
    found = sorted(cache.glob(f"grpo-warm-{preset}-*/checkpoint-*"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def make_trainer(args, preset: str, checkpoint: Path | None, setting: str) -> GRPOLearner:
    batch_size = args.small_batch_size if preset == "small" else args.batch_size
    cfg = GRPOConfig(
        run=RunConfig(name="bench", out_dir=tempfile.gettempdir(), seed=0, threads=args.threads, bf16=False,
                      progress=False),
        model=ModelConfig(preset=preset, path=str(checkpoint) if checkpoint else None),
        task=TaskConfig(name="arith", kwargs={"digits": 2}, n_train=2000, seed=0),
        optim=OptimConfig(lr=5e-5, weight_decay=0.0, betas=(0.9, 0.95), warmup_steps=0, schedule="constant",
                          grad_clip=1.0),
        sampling=SamplingConfig(temperature=1.0, max_new_tokens=args.max_new_tokens),
        loss=LossConfig(beta=0.0), batch_size=batch_size, group_size=args.group_size,
        micro_batch_size=args.micro_batch_size, shared_prompt_forward=setting,
    )
    torch.manual_seed(0)
    policy = load_pretrained(str(checkpoint)) if checkpoint else load_policy(cfg.model)
    task = cfg.task.build()
    trainer = GRPOLearner(cfg, policy, task, task.problems("train", cfg.task.n_train, 0))
    assert trainer.shared_forward == (setting == "on")
    return trainer


def timed_step(trainer: GRPOLearner, batch) -> float:
    t0 = time.perf_counter()
    trainer.train_step(batch)
    return time.perf_counter() - t0


def bench_preset(args, preset: str) -> dict:
    checkpoint = warm_start(Path(args.cache_dir), preset)
    off = make_trainer(args, preset, checkpoint, "off")
    on = make_trainer(args, preset, checkpoint, "on")
    on.policy.model.load_state_dict(off.policy.model.state_dict())
    tok = off.policy.tokenizer
    prefix = tok(SYSTEM_PRESETS["r1"] + "\n\n", add_special_tokens=False)["input_ids"]
    batches = []
    gen = torch.Generator().manual_seed(0)
    for step in range(args.steps + 1):
        batch = off.collect(step)
        batch.advantages = torch.where(torch.rand(len(batch.rewards), generator=gen) < 0.5, -1.0, 1.0)
        batches.append(batch)
    out: dict = {"weights": "warm start" if checkpoint else "fresh preset", "batch_size": off.cfg.batch_size}
    lengths = torch.cat([b.completion_mask.sum(1) for b in batches])
    out["completion_len_mean"] = round(float(lengths.mean()), 2)
    out["completion_len_max"] = int(lengths.max())
    out["batch_width_mean"] = round(statistics.mean(b.completion_ids.shape[1] for b in batches), 2)
    for setting in ("arith", "long_prompt") if preset in args.long_prompt_presets else ("arith",):
        if setting == "long_prompt":
            for b in batches:
                b.prompt_ids = [prefix + list(p) for p in b.prompt_ids]
        out[f"prompt_len_{setting}"] = round(statistics.mean(len(p) for p in batches[0].prompt_ids), 1)
        times = {"off": [], "on": []}
        for i, batch in enumerate(batches):
            pair = (("off", off), ("on", on)) if i % 2 == 0 else (("on", on), ("off", off))
            for name, trainer in pair:
                seconds = timed_step(trainer, copy.copy(batch))
                if i > 0:  # the first step of each is a warm-up
                    times[name].append(seconds)
            print(f"{preset} {setting} step {i}: " + ", ".join(f"{k} {v[-1]:.3f}s" for k, v in times.items() if v),
                  file=sys.stderr, flush=True)
        med_off, med_on = statistics.median(times["off"]), statistics.median(times["on"])
        suffix = "" if setting == "arith" else "_long_prompt"
        out[f"train_s_padded{suffix}"] = round(med_off, 4)
        out[f"train_s_shared{suffix}"] = round(med_on, 4)
        out[f"speedup{suffix}"] = round(med_off / med_on, 3)
    return out


def peak_rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("VmHWM not in /proc/self/status")


def memory_worker(args) -> None:
    """One train_step of the tiny long-prompt setting with one forward; prints the peak RSS growth."""
    checkpoint = warm_start(Path(args.cache_dir), "tiny")
    trainer = make_trainer(args, "tiny", checkpoint, args.memory_worker)
    batch = trainer.collect(0)
    batch.advantages = torch.where(torch.arange(len(batch.rewards)) % 2 == 0, -1.0, 1.0)
    prefix = trainer.policy.tokenizer(SYSTEM_PRESETS["r1"] + "\n\n", add_special_tokens=False)["input_ids"]
    batch.prompt_ids = [prefix + list(p) for p in batch.prompt_ids]
    before = peak_rss_kib()
    trainer.train_step(batch)
    print(json.dumps({"peak_rss_growth_mib": round((peak_rss_kib() - before) / 1024, 1)}))


def memory_runs(args) -> dict:
    """Peak RSS growth of one step per forward, each in a fresh process."""
    import subprocess

    out = {}
    for setting in ("off", "on"):
        cmd = [sys.executable, __file__, "--memory-worker", setting, "--batch-size", str(args.batch_size),
               "--cache-dir", args.cache_dir, "--threads", str(args.threads)]
        line = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        out["padded" if setting == "off" else "shared"] = json.loads(line)["peak_rss_growth_mib"]
    return {"peak_rss_growth_mib_padded_long_prompt_tiny": out["padded"],
            "peak_rss_growth_mib_shared_long_prompt_tiny": out["shared"]}


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.memory_worker:
        memory_worker(args)
        return
    t0 = time.perf_counter()
    result: dict = {"bench": "shared_prompt_forward", "quick": args.quick, "steps": args.steps,
                    "group_size": args.group_size,
                    "micro_batch_size": args.micro_batch_size, "max_new_tokens": args.max_new_tokens}
    load_start = [round(x, 2) for x in os.getloadavg()]
    for preset in args.presets:
        for key, value in bench_preset(args, preset).items():
            result[f"{key}_{preset}" if not key.startswith("speedup") else key.replace("speedup", f"speedup_{preset}", 1)] = value
    if args.memory:
        result.update(memory_runs(args))
    result.update(machine_info())
    result["load_avg_start_1_5_15"] = load_start
    result["total_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
