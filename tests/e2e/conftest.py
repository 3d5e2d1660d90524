"""One SFT run shared by the end-to-end tests (the SFT test checks it learned, GRPO and PPO start from it),
and the standard errors the "it learns" tests set their margins by.

A test's margin is three standard errors of the gain it measured (`seqrl.core.metrics.rate_diff_se`,
from the rates and the counts it evaluated), not a fixed number: the shared SFT model's accuracy differs
by CPU (the same seed trains to another model where the float kernels differ), and so does the noise. `benchmarks/e2e_margins.py` runs each test's
setting over seeds and starting points and reports the gain against this margin.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.sft import SFTConfig, train
from seqrl.core.metrics import rate_diff_se
from seqrl.evaluation import EvalConfig
from seqrl.models import ModelConfig
from seqrl.utils.metrics import read_metrics


@dataclass
class SFTRun:
    cfg: SFTConfig
    metrics: dict[str, float]
    checkpoint: Path


def sft_config(out: str | Path, seed: int = 0, steps: int = 240) -> SFTConfig:
    """The tiny preset, SFT on 2-digit addition; at 240 steps held-out greedy ≈ 0.75–0.93 and sampled
    (T = 1) pass@1 ≈ 0.3–0.7, depending on the seed and the CPU."""
    return SFTConfig(
        run=RunConfig(name="e2e", out_dir=str(out), seed=seed, progress=False),
        model=ModelConfig(preset="tiny", max_seq_len=64),
        task=TaskConfig(name="arith", kwargs={"digits": 2}, n_train=4000, n_test=200),
        optim=OptimConfig(lr=3e-3, warmup_steps=30),
        eval=EvalConfig(max_new_tokens=32),
        steps=steps,
        batch_size=32,
    )


@pytest.fixture(scope="session")
def sft_two_digit(tmp_path_factory) -> SFTRun:
    """`sft_config` at seed 0, 240 steps (≈ 20–50 s), trained once per pytest run: under pytest-xdist the
    first worker to ask trains it in the run's shared temporary folder, the others wait on its lock and
    read it (the run folder and its final metrics)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # every worker's base folder sits in this run's folder
    out, done = shared / "sft_e2e", shared / "sft_e2e.metrics.json"
    cfg = sft_config(out)
    with FileLock(str(shared / "sft_e2e.lock")):
        if done.exists():
            metrics = json.loads(done.read_text())
        else:
            shutil.rmtree(out, ignore_errors=True)  # what a worker that failed half-way left
            metrics = train(cfg)
            part = done.with_suffix(".part")
            part.write_text(json.dumps(metrics))
            part.replace(done)
    return SFTRun(cfg, metrics, cfg.run.dir / f"checkpoint-{cfg.steps}")


def pass1_gain(metrics_path: Path, problems: int, samples: int) -> tuple[dict, dict, float]:
    """(first evaluation, last evaluation, three standard errors of the pass@1 gain) from a finished run's
    metrics.jsonl, whose evaluations each sampled `samples` completions of `problems` problems."""
    evals = [r for r in read_metrics(metrics_path) if "eval/pass@1" in r]
    before, after = evals[0], evals[-1]
    return before, after, 3 * rate_diff_se(before["eval/pass@1"], after["eval/pass@1"], problems * samples)


@pytest.fixture(name="pass1_gain")
def pass1_gain_fixture():
    """`pass1_gain` for a test (test modules cannot import this file)."""
    return pass1_gain
