"""One SFT run shared by the end-to-end tests: the SFT test checks it learned, GRPO starts from it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from seqrl.algos.common import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.sft import SFTConfig, train
from seqrl.evaluation import EvalConfig
from seqrl.models import ModelConfig


@dataclass
class SFTRun:
    cfg: SFTConfig
    metrics: dict[str, float]
    checkpoint: Path


@pytest.fixture(scope="session")
def sft_two_digit(tmp_path_factory) -> SFTRun:
    """The tiny preset, SFT for 240 steps on 2-digit addition (≈ 35–50 s here); held-out greedy ≈ 0.85."""
    out = tmp_path_factory.mktemp("sft_e2e")
    cfg = SFTConfig(
        run=RunConfig(name="e2e", out_dir=str(out), seed=0, progress=False),
        model=ModelConfig(preset="tiny", max_seq_len=64),
        task=TaskConfig(name="arith", kwargs={"digits": 2}, n_train=4000, n_test=200),
        optim=OptimConfig(lr=3e-3, warmup_steps=30),
        eval=EvalConfig(max_new_tokens=32),
        steps=240,
        batch_size=32,
    )
    metrics = train(cfg)
    return SFTRun(cfg, metrics, cfg.run.dir / f"checkpoint-{cfg.steps}")
