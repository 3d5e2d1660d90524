"""`VLAConfig` and its sections, importable without torch (the command line checks a config before it
loads torch)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.models.config import VLAModelConfig

__all__ = ["VLAConfig", "VLADaggerConfig", "VLADataConfig", "VLAEvalConfig"]


@dataclass
class VLADataConfig:
    """Which demonstrations."""

    dataset: str = "quick:GoToRedBallGrey"
    """A BabyAI Minari dataset id present locally (``seqrl/babyai/GoToLocal-n5000-s0-v0``; build it with
    ``seqrl data babyai``), a dataset folder, or ``quick:<level>``: bot demonstrations built in memory."""
    quick_episodes: int = 300
    """Episodes of a ``quick:`` dataset."""
    quick_seed: int = 0
    """Seed of a ``quick:`` dataset (independent of the run seed)."""
    max_episodes: int = 0
    """Train on the first this many episodes only (0: all) — demonstration-count sweeps from one dataset."""

    def __post_init__(self) -> None:
        if not self.dataset:
            raise ValueError("data.dataset must name a dataset (a Minari id, a folder or quick:<level>)")
        if self.quick_episodes < 1 or self.max_episodes < 0:
            raise ValueError(f"data.quick_episodes must be >= 1 and data.max_episodes >= 0 "
                             f"(got {self.quick_episodes}, {self.max_episodes})")


@dataclass
class VLAEvalConfig:
    """Rollouts (greedy, or sampled at `temperature`) on held-out layouts of the dataset's level."""

    every: int = 0
    """Steps between evaluations (0: only after the last step)."""
    episodes: int = 100
    """Held-out episodes per evaluation (0: no evaluation)."""
    seed: int = 0
    """Seed of the held-out layouts (`eval_reset_seed`; disjoint from every demonstration seed)."""
    max_steps: int = 0
    """Cap on episode length (0: the level's own limit)."""
    strip: bool = True
    """After the last step, draw one evaluation episode as a PNG strip (plots/episode.png)."""
    temperature: float = 0.0
    """0: greedy actions; > 0: actions drawn from softmax(logits / temperature), seeded by `seed` (a greedy
    behaviour-cloned policy can repeat one action forever where the demonstrations never went)."""

    def __post_init__(self) -> None:
        if self.every < 0 or self.episodes < 0 or self.max_steps < 0 or self.temperature < 0:
            raise ValueError("eval.every, eval.episodes, eval.max_steps and eval.temperature must be >= 0")


@dataclass
class VLADaggerConfig:
    """DAgger (Ross, Gordon & Bagnell 2011): every `every` steps the current policy plays `episodes` fresh
    training layouts (never evaluation ones), a bot following each episode labels every state it reaches,
    and those states join the demonstrations for the rest of training — so the policy learns what to do
    where its own mistakes take it, which the bot's demonstrations never show."""

    every: int = 0
    """Steps between collection rounds (0: off — plain behaviour cloning). Rounds run at every, 2·every, … < steps."""
    episodes: int = 200
    """Episodes the policy plays per round (each capped like the evaluation's, `eval.max_steps`)."""
    beta: float = 0.0
    """Probability that a step executes the bot's action instead of the policy's (DAgger's mixture β)."""
    temperature: float = 0.0
    """The policy's actions while collecting: 0 greedy (the evaluation's behaviour), > 0 sampled."""
    bot_memory: int = 0
    """Observations the labelling bot remembers: 0 the whole episode (it may know where a target was long
    ago), k ≥ 1 the last k (rebuilt each step from k − 1 steps back) — ``-1``: the policy's context K."""

    def __post_init__(self) -> None:
        if self.bot_memory < -1:
            raise ValueError(f"dagger.bot_memory must be >= -1 (got {self.bot_memory})")
        if self.every < 0 or self.episodes < 1:
            raise ValueError(f"dagger.every must be >= 0 and dagger.episodes >= 1 (got {self.every}, {self.episodes})")
        if not 0.0 <= self.beta <= 1.0:
            raise ValueError(f"dagger.beta must be in [0, 1] (got {self.beta})")
        if self.temperature < 0:
            raise ValueError(f"dagger.temperature must be >= 0 (got {self.temperature})")


def _optim_defaults() -> OptimConfig:
    return OptimConfig(lr=1e-3, weight_decay=0.01, warmup_steps=100, schedule="cosine", grad_clip=1.0)


@dataclass
class VLAConfig:
    run: RunConfig = field(default_factory=lambda: RunConfig(name="auto"))
    """``run.name: auto`` becomes ``vla_<level>_<fusion>_<language>_s<seed>``."""
    data: VLADataConfig = field(default_factory=VLADataConfig)
    model: VLAModelConfig = field(default_factory=VLAModelConfig)
    optim: OptimConfig = field(default_factory=_optim_defaults)
    eval: VLAEvalConfig = field(default_factory=VLAEvalConfig)
    dagger: VLADaggerConfig = field(default_factory=VLADaggerConfig)
    steps: int = 2000
    """Gradient steps."""
    batch_size: int = 64
    """Windows of K steps per gradient step."""

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError(f"steps and batch_size must be >= 1 (got {self.steps}, {self.batch_size})")
        if self.run.name == "auto":
            slug = re.sub(r"[^A-Za-z0-9.]+", "-", self.data.dataset.split("/")[-1]).strip("-")
            self.run.name = f"vla_{slug}_{self.model.fusion}_{self.model.language}_s{self.run.seed}"
