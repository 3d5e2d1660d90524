"""`DTConfig` / `BCConfig` and their sections, importable without torch (the command line checks a
config before it loads torch)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from seqrl.algos.config import OptimConfig, RunConfig, accepts_trl_names
from seqrl.data.config import DataConfig
from seqrl.envs.config import DTEvalConfig
from seqrl.models.config import DTModelConfig

__all__ = ["BCConfig", "BCModelConfig", "DTConfig", "auto_run_name"]


@dataclass
class BCModelConfig:
    """The behaviour-cloning MLP (used by ``seqrl train bc``)."""

    hidden_size: int = 256
    """Width of each hidden layer."""
    n_layer: int = 2
    """Hidden layers."""
    dropout: float = 0.1
    """Dropout after each hidden layer."""

    def __post_init__(self) -> None:
        if self.hidden_size < 1 or self.n_layer < 1:
            raise ValueError(f"bc.hidden_size and bc.n_layer must be >= 1 (got {self.hidden_size}, {self.n_layer})")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"bc.dropout must be in [0, 1) (got {self.dropout})")


def _optim_defaults() -> OptimConfig:
    # The official DT: AdamW lr 1e-4, weight decay 1e-4, warm-up 10k steps, then constant; clip 0.25.
    return OptimConfig(lr=1e-4, weight_decay=1e-4, betas=(0.9, 0.999), warmup_steps=10_000, schedule="constant",
                       grad_clip=0.25)


def auto_run_name(method: str, data: DataConfig, seed: int) -> str:
    """What ``run.name: auto`` becomes: ``<method>_<dataset>[_top<percent>]_s<seed>``."""
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", data.dataset).strip("-")
    top = f"_top{data.top_fraction * 100:g}" if data.top_fraction < 1 else ""
    return f"{method}_{slug}{top}_s{seed}"


@accepts_trl_names
@dataclass
class DTConfig:
    run: RunConfig = field(default_factory=lambda: RunConfig(name="auto"))
    """``run.name: auto`` becomes ``<method>_<dataset>[_top<percent>]_s<seed>``."""
    data: DataConfig = field(default_factory=DataConfig)
    model: DTModelConfig = field(default_factory=DTModelConfig)
    bc: BCModelConfig = field(default_factory=BCModelConfig)
    optim: OptimConfig = field(default_factory=_optim_defaults)
    eval: DTEvalConfig = field(default_factory=DTEvalConfig)
    method: Literal["dt", "bc"] = "dt"
    """What to train: the Decision Transformer or the BC MLP (``seqrl train bc`` sets bc)."""
    return_scale: float = 1000.0
    """R̂ is divided by this before embedding (official: 1000 for MuJoCo)."""
    steps: int = 100_000
    """Gradient steps (paper: 100k — ≈ 9 h at the paper's size on one CPU thread; presets use fewer)."""
    batch_size: int = 64
    """Windows (DT) or single steps (BC) per gradient step."""

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError(f"steps and batch_size must be >= 1 (got {self.steps}, {self.batch_size})")
        if not self.return_scale > 0:
            raise ValueError(f"return_scale must be > 0 (got {self.return_scale})")
        if self.run.name == "auto":
            self.run.name = auto_run_name(self.method, self.data, self.run.seed)


@accepts_trl_names
@dataclass
class BCConfig(DTConfig):
    """`DTConfig` with BC as the method (what ``seqrl train bc`` builds)."""

    method: Literal["dt", "bc"] = "bc"
