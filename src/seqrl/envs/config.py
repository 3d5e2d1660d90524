"""The evaluation-rollout config, importable without torch or gymnasium (the command line checks a
config first). `seqrl.envs.evaluate` uses and re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DTEvalConfig"]

@dataclass
class DTEvalConfig:
    """Evaluation rollouts in the dataset's environment."""

    every: int = 0
    """Steps between evaluations (0: only after the last step)."""
    episodes: int = 10
    """Episodes per target return (0: no evaluation)."""
    target_returns: list[float] = field(default_factory=lambda: [3600.0, 1800.0])
    """Raw target returns R̂_0 the DT is conditioned on (paper: hopper 3600/1800, halfcheetah
    12000/6000, walker 5000/2500); ignored by BC."""
    max_steps: int = 0
    """Stop episodes after this many steps (0: the environment's time limit)."""
    seed: int = 100
    """Seed of the evaluation episodes (the same start states for every run and target)."""

    def __post_init__(self) -> None:
        if self.every < 0 or self.episodes < 0 or self.max_steps < 0:
            raise ValueError("eval.every, eval.episodes and eval.max_steps must be >= 0")
        if not self.target_returns:
            raise ValueError("eval.target_returns must hold at least one target return")
