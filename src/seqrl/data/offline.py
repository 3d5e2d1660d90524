"""Offline trajectory datasets: the one in-memory form Decision Transformer, ODT, BC and %BC read.

An `Episode` follows Minari's layout (DESIGN.md §8): T+1 observations (the last one is the state
reached after the final action), T actions, T rewards, T termination and truncation flags. An
`OfflineDataset` is a list of episodes plus what evaluation needs: the environment id, the action
space kind and the reference returns of the D4RL normaliser ``100 · (R − R_random) / (R_expert − R_random)``.

Minari datasets (by id or path) load through `seqrl.data.minari_data`; tests build episodes directly.
Every check names the episode and the field, so a bad row never reaches a trainer silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["DatasetError", "Episode", "OfflineDataset", "normalized_score"]


class DatasetError(ValueError):
    """A dataset that cannot be trained on; the message names the episode and the field."""


@dataclass
class Episode:
    """One trajectory in Minari's layout.

    observations: (T+1, obs_dim) float32 — s_0 … s_T
    actions:      (T, act_dim) float32 for continuous spaces, (T,) int64 for discrete ones
    rewards:      (T,) float32
    terminations: (T,) bool — the environment ended the episode (no bootstrapping past it)
    truncations:  (T,) bool — a time limit cut it
    id:           the episode's index in its dataset (named in errors)
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    id: int = 0

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def ret(self) -> float:
        """Undiscounted return Σ r_t."""
        return float(self.rewards.sum())

    def validate(self) -> None:
        """Raise `DatasetError` naming this episode's first inconsistency (lengths, NaN, shapes)."""
        where = f"episode {self.id}"
        T = self.rewards.shape[0] if self.rewards.ndim == 1 else -1
        if self.rewards.ndim != 1:
            raise DatasetError(f"{where}: rewards must be 1-D (got shape {tuple(self.rewards.shape)})")
        if T < 1:
            raise DatasetError(f"{where}: has no steps (0 rewards)")
        if self.observations.ndim < 2 or self.observations.shape[0] != T + 1:
            raise DatasetError(f"{where}: observations must have T+1 = {T + 1} rows for {T} rewards "
                               f"(got shape {tuple(self.observations.shape)})")
        if self.actions.shape[0] != T:
            raise DatasetError(f"{where}: actions must have T = {T} rows (got shape {tuple(self.actions.shape)})")
        for name in ("terminations", "truncations"):
            arr = getattr(self, name)
            if arr.shape != (T,):
                raise DatasetError(f"{where}: {name} must have shape ({T},) (got {tuple(arr.shape)})")
        for name in ("observations", "actions", "rewards"):
            arr = getattr(self, name)
            if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
                bad = int(np.argwhere(~np.isfinite(arr.reshape(arr.shape[0], -1)).any(axis=1))[0, 0])
                raise DatasetError(f"{where}: {name} has a NaN or infinite value at step {bad}")


@dataclass
class OfflineDataset:
    """Episodes plus the facts evaluation needs.

    env_id:           gymnasium id to evaluate in (e.g. ``Hopper-v5``); "" when there is none
    discrete:         actions are integers in [0, action_dim)
    action_dim:       continuous: size of the action vector; discrete: number of actions
    action_low/high:  continuous bounds (the tanh head is rescaled to them); None for discrete
    ref_min_score:    R_random of the normaliser (None: normalised scores unavailable)
    ref_max_score:    R_expert of the normaliser
    name:             dataset id or path, for logs
    """

    episodes: list[Episode]
    env_id: str = ""
    discrete: bool = False
    action_dim: int = 0
    action_low: np.ndarray | None = None
    action_high: np.ndarray | None = None
    ref_min_score: float | None = None
    ref_max_score: float | None = None
    name: str = ""
    metadata: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.episodes:
            raise DatasetError(f"dataset {self.name or '?'}: has no episodes")
        for ep in self.episodes:
            ep.validate()
        dims = {ep.observations.shape[1:] for ep in self.episodes}
        if len(dims) != 1:
            raise DatasetError(f"dataset {self.name or '?'}: episodes disagree on the observation shape {sorted(dims)}")
        if self.action_dim <= 0:
            first = self.episodes[0].actions
            self.action_dim = int(first.max()) + 1 if self.discrete else int(first.shape[1])

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.episodes[0].observations.shape[1:]))

    @property
    def returns(self) -> np.ndarray:
        """Return of each episode, (N,)."""
        return np.array([ep.ret for ep in self.episodes], dtype=np.float64)

    @property
    def n_steps(self) -> int:
        return sum(len(ep) for ep in self.episodes)

    def state_stats(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of s_0 … s_{T−1} over all episodes (the states actions are taken in), std ≥ 1e-6."""
        obs = np.concatenate([ep.observations[:-1].reshape(len(ep), -1) for ep in self.episodes])
        return obs.mean(axis=0), np.maximum(obs.std(axis=0), 1e-6)

    def normalized(self, ret: float | np.ndarray) -> float | np.ndarray:
        """D4RL normalised score ×100; raises when the dataset carries no reference returns."""
        if self.ref_min_score is None or self.ref_max_score is None:
            raise DatasetError(f"dataset {self.name or '?'}: no ref_min_score/ref_max_score, so no normalised score")
        return normalized_score(ret, self.ref_min_score, self.ref_max_score)


def normalized_score(ret, ref_min: float, ref_max: float):
    """``100 · (R − R_random) / (R_expert − R_random)`` (D4RL; Minari's `get_normalized_score` is this / 100).

    >>> normalized_score(1500.0, 0.0, 3000.0)
    50.0
    >>> normalized_score(-20.0, -20.0, 3000.0)
    0.0
    """
    if ref_max == ref_min:
        raise DatasetError(f"reference returns are equal ({ref_min}): the normalised score is undefined")
    return 100.0 * (ret - ref_min) / (ref_max - ref_min)
