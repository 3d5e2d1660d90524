"""`RMConfig` (a Bradley–Terry reward model), importable without torch (the command line checks a config
before it loads torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from seqrl.algos.config import OptimConfig, RunConfig, accepts_trl_names
from seqrl.models.config import ModelConfig
from seqrl.prompts import PromptConfig

__all__ = ["PreferenceDataConfig", "RMConfig"]


@dataclass
class PreferenceDataConfig:
    """Where the preference pairs come from and how they are split."""

    path: str = ""
    """A JSONL / JSON / parquet / CSV file in TRL's preference format, or a `datasets` name or folder."""
    limit: int = -1
    """Read at most this many pairs (-1: all)."""
    heldout_frac: float = 0.1
    """Fraction of prompts whose pairs are held out (split by a hash of the prompt text)."""
    use_margin: bool = False
    """Subtract each row's ``margin`` column in the loss (every row must have one)."""
    split_field: str | None = None
    """A column saying "train" or "test" for each row (then `heldout_frac` is not used); the Python
    `RewardTrainer` writes one for its eval_dataset."""

    def __post_init__(self) -> None:
        if not 0 < self.heldout_frac < 1:
            raise ValueError(f"data.heldout_frac must be in (0, 1) (got {self.heldout_frac})")
        if self.limit < 1 and self.limit != -1:
            raise ValueError(f"data.limit must be >= 1 or -1 (got {self.limit})")


@dataclass
class RMEvalConfig:
    """Held-out pairwise accuracy."""

    every: int = 0
    """Steps between held-out evaluations (0: only after the last step)."""

    def __post_init__(self) -> None:
        if self.every < 0:
            raise ValueError(f"every must be >= 0 (got {self.every})")


@accepts_trl_names
@dataclass
class RMConfig:
    run: RunConfig = field(default_factory=lambda: RunConfig(name="rm"))
    model: ModelConfig = field(default_factory=ModelConfig)
    """The backbone: a causal-LM or reward-model folder (model.path), or a preset from scratch."""
    data: PreferenceDataConfig = field(default_factory=PreferenceDataConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-4, warmup_steps=10))
    prompt: PromptConfig = field(default_factory=PromptConfig)
    """How a conversational prompt (a message list) is rendered; text prompts are used as written."""
    steps: int = 200
    """Optimizer steps."""
    batch_size: int = 32
    """Pairs per optimizer step."""
    micro_batch_size: int = 32
    """Pairs per forward/backward (memory only: the gradient does not depend on it)."""
    center_coef: float = 0.0
    """Weight of the score-centring term mean((r_c + r_r)²) (TRL's center_rewards_coefficient; 0.01 there)."""
    eval: RMEvalConfig = field(default_factory=RMEvalConfig)
    shared_prompt_forward: Literal["auto", "on", "off"] = "off"
    """Score a pair's two sides with the tokens they share at the start (the prompt) computed once
    (`seqrl.models.heads.shared_prefix_pair_scores`; the same scores and gradients as the padded forward
    of both sides, tested). on: that, or an error naming why the model cannot; auto: where the model
    supports a shared KV cache, else the padded forward with a one-line note; off (default): the padded
    forward, as fast or faster at the shapes measured (`benchmarks/rm_shared_prefix.py`: pairs sharing
    18 of 28 tokens per side, tiny 1.18× the padded CPU time; SmolLM2-135M, 32 of 45 shared,
    0.94–0.96×): both ways pad to the batch's longest rows, so the saving is the shared tokens less
    that padding, and two forwards cost more call overhead than one."""

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "micro_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.center_coef < 0:
            raise ValueError(f"center_coef must be >= 0 (got {self.center_coef})")
