"""The offline-data config, importable without torch or numpy (the command line checks a config first).

`seqrl.data.minari_data` uses and re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["DataConfig", "QUICK_PREFIX"]

QUICK_PREFIX = "quick:"


@dataclass
class DataConfig:
    """Which offline dataset and which of its episodes."""

    dataset: str = "quick:medium-replay"
    """A Minari dataset id present locally (``seqrl/hopper/medium-v0``; build it with `seqrl data minari`),
    a Minari dataset folder, or ``quick:<level>``: the small Pendulum-v1 dataset built in memory
    (`seqrl.data.minari_data.quick_dataset`)."""
    quick_steps: int = 4000
    """Steps of the ``quick:`` dataset (Pendulum episodes are 200 steps)."""
    quick_seed: int = 0
    """Seed of the ``quick:`` dataset (independent of the run seed)."""
    top_fraction: float = 1.0
    """Train on the best episodes by return holding this fraction of the steps (%BC: 0.1 = 10%BC;
    the official code's ``pct_traj``). 1: all episodes."""
    windows: Literal["start", "cover"] = "start"
    """How training windows are drawn (episodes ∝ their weight). ``start``: a start step uniform in the
    episode, K steps from there, left-padded near its end (the official code's rule; an episode's first
    K − 1 steps are then in fewer windows than the rest, step 0 in one). ``cover``: a start uniform in
    [−(K − 1), T − 1], so every step of an episode is in exactly K windows (left-padded near its start,
    as at evaluation, and near its end)."""

    def __post_init__(self) -> None:
        if self.windows not in ("start", "cover"):
            raise ValueError(f"data.windows must be 'start' or 'cover' (got {self.windows!r})")
        if not self.dataset:
            raise ValueError("data.dataset must name a dataset (a Minari id, a folder or quick:<level>)")
        if not 0 < self.top_fraction <= 1:
            raise ValueError(f"data.top_fraction must be in (0, 1] (got {self.top_fraction})")
        if self.quick_steps < 1:
            raise ValueError(f"data.quick_steps must be >= 1 (got {self.quick_steps})")
