"""`PRMConfig` (process and outcome reward models), importable without torch (the command line checks a
config before it loads torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig, accepts_trl_names
from seqrl.models.config import ModelConfig

__all__ = ["PRMConfig", "PRMDataConfig"]


@dataclass
class PRMDataConfig:
    """Where the step labels come from."""

    path: str | None = None
    """A stepwise file (.jsonl/.json/.parquet/.csv); None: exactly labelled arithmetic solutions
    built from `task`: the `policy`'s own samples when it is set, else gold steps with one value
    moved in about two thirds of them."""
    policy: str | None = None
    """A causal-LM folder (e.g. an SFT checkpoint) whose own solutions to the task's train problems
    (training rows) and test problems (held-out rows) are the data when `path` is None, labelled
    exactly (arithmetic only) with Math-Shepherd semantics: a step is good iff it and every step
    before it are right. Without it a PRM learns only corrupted gold steps, not the policy's errors."""
    samples: int = 4
    """With `policy`: solutions sampled per problem."""
    temperature: float = 1.0
    """With `policy`: sampling temperature."""
    max_new_tokens: int = 64
    """With `policy`: cap on each sampled solution."""
    corrupted: float = 0.0
    """With `policy`: share of the train problems that also give a corrupted-gold row (the rows used
    without `policy`), which teach step arithmetic on its own; held-out rows stay policy samples."""
    test_fraction: float = 0.1
    """Share of `path`'s distinct prompts held out for evaluation, with all their rows (a seeded
    permutation of the prompts: the held-out AUC measures problems never trained on)."""
    overlong: Literal["drop", "error"] = "drop"
    """A solution longer than the context: drop the steps that do not fit (counted), or stop."""
    split_field: str | None = None
    """A column of `path` saying "train" or "test" for each row (then `test_fraction` is not used); the
    Python `PRMTrainer` writes one for its eval_dataset."""

    def __post_init__(self) -> None:
        if not 0 < self.test_fraction < 1:
            raise ValueError(f"data.test_fraction must be in (0, 1) (got {self.test_fraction})")
        if self.overlong not in ("drop", "error"):
            raise ValueError(f"data.overlong must be 'drop' or 'error' (got {self.overlong!r})")
        if self.samples < 1 or self.max_new_tokens < 1:
            raise ValueError(f"data.samples and data.max_new_tokens must be >= 1 "
                             f"(got {self.samples}, {self.max_new_tokens})")
        if not 0 <= self.corrupted <= 1:
            raise ValueError(f"data.corrupted must be in [0, 1] (got {self.corrupted})")
        if self.temperature <= 0:
            raise ValueError(f"data.temperature must be > 0 (got {self.temperature})")


@dataclass
class PRMEvalConfig:
    """Held-out step-label metrics (AUC, accuracy)."""

    every: int = 0
    """Steps between held-out evaluations (0: only after the last step)."""
    batch_size: int = 64
    """Solutions per forward pass in evaluation."""

    def __post_init__(self) -> None:
        if self.every < 0 or self.batch_size < 1:
            raise ValueError(f"every must be >= 0 and batch_size >= 1 (got {self.every}, {self.batch_size})")


@accepts_trl_names
@dataclass
class PRMConfig:
    run: RunConfig = field(default_factory=lambda: RunConfig(name="prm"))
    model: ModelConfig = field(default_factory=ModelConfig)
    """The backbone: a preset (fresh weights) or a causal-LM folder such as an SFT checkpoint."""
    task: TaskConfig = field(default_factory=TaskConfig)
    """Problems for the built-in arithmetic labels (used when data.path is None)."""
    data: PRMDataConfig = field(default_factory=PRMDataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    kind: Literal["prm", "orm"] = "prm"
    """prm: a label at every step; orm: one label at the last step. `seqrl train orm` sets it."""
    head: Literal["2class", "scalar"] = "2class"
    """2class: softmax over (wrong, right); scalar: one logit through a sigmoid."""
    steps: int = 300
    """Optimizer steps."""
    batch_size: int = 32
    """Solutions per optimizer step."""
    eval: PRMEvalConfig = field(default_factory=PRMEvalConfig)

    def __post_init__(self) -> None:
        if self.kind not in ("prm", "orm"):
            raise ValueError(f"kind must be 'prm' or 'orm' (got {self.kind!r})")
        if self.head not in ("2class", "scalar"):
            raise ValueError(f"head must be '2class' or 'scalar' (got {self.head!r})")
        for name in ("steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")
