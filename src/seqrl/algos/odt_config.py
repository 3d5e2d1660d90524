"""`ODTConfig` and its sections, importable without torch (the command line checks a config before it
loads torch)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.data.config import DataConfig
from seqrl.envs.config import DTEvalConfig
from seqrl.models.config import DTModelConfig

__all__ = ["ODTConfig", "ODTEvalConfig", "ODTModelConfig", "OnlineConfig"]


@dataclass
class ODTModelConfig(DTModelConfig):
    """The Decision Transformer body (official ODT hopper: d 512, 4 layers, 4 heads, K 20) and the
    squashed Gaussian head."""

    log_std_min: float = -5.0
    """Lower bound of log σ (official: −5)."""
    log_std_max: float = 2.0
    """Upper bound of log σ (official: 2). Lower it (the presets: −1) for data whose actions are a
    noisy policy's samples clipped to the bounds: under the official bound the policy fits that noise
    and its sampled rollouts fall far below its mean action (docs/algorithms/odt.md, Pendulum)."""

    timestep_embedding: bool = True
    """Add the learned timestep embedding to every token, as the Decision Transformer (official ODT:
    false — ``ordering 0``, no timestep or position embedding)."""
    rollout_context: int = 0
    """Steps of history the policy acts on in rollouts and evaluation (0: K; official ODT: 5 with K 20)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.rollout_context <= self.context_len:
            raise ValueError(f"model.rollout_context must be in [0, model.context_len = {self.context_len}] "
                             f"(got {self.rollout_context})")
        if not self.log_std_min < self.log_std_max:
            raise ValueError(f"model.log_std_min must be < model.log_std_max (got {self.log_std_min}, "
                             f"{self.log_std_max})")


@dataclass
class OnlineConfig:
    """Online fine-tuning: rollouts, replay buffer, updates."""

    iterations: int = 100
    """Online iterations (rollouts + updates each); 0: offline pre-training only."""
    rollouts: int = 1
    """Episodes rolled out per iteration (official: 1)."""
    updates: int = 300
    """Gradient updates per iteration (official: 300)."""
    target_return: float = 7200.0
    """Exploration target R̂_0 of the rollouts (paper: ≈ 2× the evaluation target; hopper 7200)."""
    buffer_size: int = 1000
    """Replay buffer capacity in trajectories (official: 1000)."""
    max_steps: int = 0
    """Cap on rollout length (0: the environment's time limit; never beyond model.max_ep_len)."""
    seed: int = 10_000
    """Seed of the rollouts' start states (episode i resets with a seed from (seed, i))."""

    def __post_init__(self) -> None:
        for name in ("iterations", "max_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"online.{name} must be >= 0 (got {getattr(self, name)})")
        for name in ("rollouts", "updates", "buffer_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"online.{name} must be >= 1 (got {getattr(self, name)})")


@dataclass
class ODTEvalConfig(DTEvalConfig):
    """Evaluation with the mean action after pre-training and during online fine-tuning."""

    every: int = 10
    """Online iterations between evaluations (0: only after pre-training and at the end)."""


def _optim_defaults() -> OptimConfig:
    # The official ODT: LAMB lr 1e-4, weight decay 5e-4, linear warm-up 10k updates then constant; clip 0.25.
    return OptimConfig(lr=1e-4, weight_decay=5e-4, betas=(0.9, 0.999), warmup_steps=10_000, schedule="constant",
                       grad_clip=0.25)


@dataclass
class ODTConfig:
    DERIVED: ClassVar[dict[str, str]] = {"steps": "pretrain_steps + online.iterations × online.updates; set those"}
    run: RunConfig = field(default_factory=lambda: RunConfig(name="auto"))
    """``run.name: auto`` becomes ``odt_<dataset>_s<seed>``."""
    data: DataConfig = field(default_factory=DataConfig)
    """The offline dataset (``data.top_fraction`` selects the pre-training episodes; the buffer starts
    with the best ``online.buffer_size`` of them)."""
    model: ODTModelConfig = field(default_factory=ODTModelConfig)
    optim: OptimConfig = field(default_factory=_optim_defaults)
    """The policy's optimiser settings (LAMB or AdamW, see `optimizer`)."""
    optimizer: Literal["lamb", "adamw"] = "lamb"
    """LAMB with the official ODT's rule (`seqrl.utils.optim.Lamb`, one group: decay and trust ratio on every
    parameter) or AdamW (`seqrl.training.run.make_optimizer`: no decay on biases, norms and embeddings)."""
    eval: ODTEvalConfig = field(default_factory=ODTEvalConfig)
    online: OnlineConfig = field(default_factory=OnlineConfig)
    return_scale: float = 1000.0
    """R̂ is divided by this before embedding (official: 1000 for MuJoCo)."""
    pretrain_steps: int = 5000
    """Offline updates before the online phase."""
    batch_size: int = 256
    """Windows per update (official: 256)."""
    init_temperature: float = 0.1
    """α at the start (official: 0.1)."""
    target_entropy: float | None = None
    """β, the entropy α steers towards, in tanh units (None: −|A|, the official choice); the
    action-space entropy the loss sees is compared with β + Σ log((high − low)/2)."""
    temperature_lr: float = 1e-4
    """Adam learning rate of log α (official: 1e-4, betas 0.9/0.999)."""
    entropy_samples: int = 1
    """Samples of the Monte-Carlo entropy estimate per step (official: 1)."""

    def __post_init__(self) -> None:
        if self.pretrain_steps < 0 or self.batch_size < 1:
            raise ValueError(f"pretrain_steps must be >= 0 and batch_size >= 1 "
                             f"(got {self.pretrain_steps}, {self.batch_size})")
        if self.pretrain_steps == 0 and self.online.iterations == 0:
            raise ValueError("pretrain_steps and online.iterations are both 0: nothing to train")
        if not self.return_scale > 0:
            raise ValueError(f"return_scale must be > 0 (got {self.return_scale})")
        if not self.init_temperature > 0:
            raise ValueError(f"init_temperature must be > 0 (got {self.init_temperature})")
        if not self.temperature_lr > 0:
            raise ValueError(f"temperature_lr must be > 0 (got {self.temperature_lr})")
        if self.entropy_samples < 1:
            raise ValueError(f"entropy_samples must be >= 1 (got {self.entropy_samples})")
        if self.run.name == "auto":
            slug = re.sub(r"[^A-Za-z0-9.]+", "-", self.data.dataset).strip("-")
            self.run.name = f"odt_{slug}_s{self.run.seed}"

    @property
    def steps(self) -> int:
        """The run's optimizer steps, as ``steps`` is in every trainer: pre-training + online iterations ×
        updates (set through those; `DERIVED`)."""
        return self.pretrain_steps + self.online.iterations * self.online.updates
