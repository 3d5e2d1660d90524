"""`SFTConfig`, importable without torch (the command line checks a config before it loads torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig, accepts_trl_names
from seqrl.evaluation import EvalConfig
from seqrl.models.config import ModelConfig
from seqrl.prompts import PromptConfig

__all__ = ["SFTConfig"]


@accepts_trl_names
@dataclass
class SFTConfig:
    run: RunConfig = field(default_factory=lambda: RunConfig(name="sft"))
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    """How problems are rendered; the same rendering trains and evaluates."""
    steps: int = 1000
    """Optimizer steps."""
    batch_size: int = 64
    """Sequences per optimizer step."""
    grad_accum: int = 1
    """Micro-batches per step (batch_size / grad_accum sequences each)."""
    target: Literal["solution", "completion"] = "solution"
    """What the model learns to write: solution, the task's worked solution in the house format
    (``<think>`` steps, ``<answer>``); completion, a row's own reply as written — TRL's prompt–completion
    rows (a ``completion`` column, text or one assistant message) or the last assistant turn of a
    ``messages`` row."""

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "grad_accum"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.target not in ("solution", "completion"):
            raise ValueError(f"target must be 'solution' or 'completion' (got {self.target!r})")
        if self.batch_size % self.grad_accum:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be divisible by grad_accum ({self.grad_accum})"
            )
