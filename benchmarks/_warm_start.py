"""A cached SFT warm start, shared by the benchmarks that need a trained model to begin from."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from seqrl.algos.sft import SFTConfig, train
from seqrl.utils.metrics import read_metrics


def cached_sft(run_dir: Path, steps: int, make_config: Callable[[], SFTConfig], retrain: bool = False,
               announce: Callable[[], None] | None = None) -> dict:
    """`run_dir/checkpoint-<steps>` from a previous run, or trained now with `make_config()`.

    Returns {"checkpoint", "cached", "train_s" (when trained), "greedy_accuracy" and
    "sampled_accuracy" (the last held-out evaluation, when the run logged them)}.
    """
    ckpt = run_dir / f"checkpoint-{steps}"
    info: dict = {"checkpoint": str(ckpt)}
    if retrain or not (ckpt / "trainer_state.json").exists():
        if run_dir.exists():
            shutil.rmtree(run_dir)
        if announce is not None:
            announce()
        cfg = make_config()
        if cfg.run.bf16 == "auto":
            cfg.run.bf16 = False  # a warm start is the same fp32 model on every CPU unless a benchmark asks otherwise
        t0 = time.perf_counter()
        train(cfg)
        info["train_s"] = round(time.perf_counter() - t0, 1)
        info["cached"] = False
    else:
        info["cached"] = True
    evals = [r for r in read_metrics(run_dir / "metrics.jsonl") if "eval/accuracy" in r]
    if evals:
        info["greedy_accuracy"] = evals[-1]["eval/accuracy"]
        if "eval/pass@1" in evals[-1]:
            info["sampled_accuracy"] = evals[-1]["eval/pass@1"]
    return info


def preset_policy(name: str, max_seq_len: int = 128):
    """A policy to time: a fresh tiny/small preset model (torch's current RNG), or "smollm2":
    SmolLM2-135M-Instruct as `seqrl models get smollm2-135m-instruct` ships it (fetched once)."""
    from seqrl.models.lm import ModelConfig, load_policy, load_pretrained

    if name == "smollm2":
        from seqrl.models.catalog import fetch

        return load_pretrained(str(fetch("smollm2-135m-instruct")))
    return load_policy(ModelConfig(preset=name, max_seq_len=max_seq_len))
