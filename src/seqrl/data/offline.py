"""Offline trajectory datasets: the one in-memory form Decision Transformer, ODT, BC and %BC read.

An `Episode` follows Minari's layout: T+1 observations (the last one is the state
reached after the final action), T actions, T rewards, T termination and truncation flags. An
`OfflineDataset` is a list of episodes plus what evaluation needs: the environment id, the action
space kind and the reference returns of the D4RL normaliser ``100 · (R − R_random) / (R_expert − R_random)``.

Minari datasets (by id or path) load through `seqrl.data.minari_data`; tests build episodes directly.
Every check names the episode and the field, so a bad row never reaches a trainer silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from seqrl.core.advantages import returns_to_go
from seqrl.core.sequences import top_return_episodes

__all__ = ["DatasetError", "Episode", "OfflineDataset", "Trajectories", "normalized_score"]


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


class Trajectories:
    """The selected episodes as flat tensors, and the batch of each step.

    states (N, S) raw s_t, actions (N, A) / (N,), rtg (N,) raw R̂_t, timestep (N,) t within the
    episode, for all N steps of the episodes back to back; `starts`/`lengths` (E,) locate each episode.
    """

    def __init__(self, dataset: OfflineDataset, top_fraction: float, max_ep_len: int, field_prefix: str,
                 windows: str = "start") -> None:
        if windows not in ("start", "cover"):
            raise ValueError(f"windows must be 'start' or 'cover' (got {windows!r})")
        self.windows = windows
        for ep in dataset.episodes:  # the dataset may have been changed since it was built
            ep.validate()
        returns = torch.tensor(dataset.returns)  # (E_all,)
        lengths = torch.tensor([len(ep) for ep in dataset.episodes])  # (E_all,)
        keep = top_return_episodes(returns, lengths, top_fraction).tolist()
        self.episodes = [dataset.episodes[i] for i in sorted(keep)]
        for ep in self.episodes:
            where = f"dataset {dataset.name or '?'}: episode {ep.id}"
            if len(ep) > max_ep_len:
                raise DatasetError(f"{where} has {len(ep)} steps, more than {field_prefix}.max_ep_len = {max_ep_len}; "
                                   f"raise {field_prefix}.max_ep_len")
            if dataset.discrete:
                if ep.actions.ndim != 1 or ep.actions.min() < 0 or ep.actions.max() >= dataset.action_dim:
                    raise DatasetError(f"{where}: discrete actions must be integers in [0, {dataset.action_dim})")
            elif ep.actions.ndim != 2 or ep.actions.shape[1] != dataset.action_dim:
                raise DatasetError(f"{where}: actions must have shape (T, {dataset.action_dim}) "
                                   f"(got {tuple(ep.actions.shape)})")
        self.discrete = dataset.discrete
        self.returns = np.array([ep.ret for ep in self.episodes])  # (E,)
        self.lengths = torch.tensor([len(ep) for ep in self.episodes])  # (E,)
        self.starts = torch.cumsum(self.lengths, 0) - self.lengths  # (E,)
        self.states = torch.from_numpy(np.concatenate(
            [ep.observations[:-1].reshape(len(ep), -1) for ep in self.episodes]).astype(np.float32))  # (N, S)
        acts = np.concatenate([ep.actions for ep in self.episodes])
        self.actions = torch.from_numpy(acts.astype(np.int64 if self.discrete else np.float32))  # (N, A) / (N,)
        self.rtg = torch.cat([returns_to_go(torch.from_numpy(ep.rewards.astype(np.float64))).float()
                              for ep in self.episodes])  # (N,)
        self.timestep = torch.cat([torch.arange(len(ep)) for ep in self.episodes])  # (N,)

    @property
    def n_steps(self) -> int:
        return int(self.lengths.sum())

    def state_stats(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of the training states (std ≥ 1e-6)."""
        s = self.states.double()
        return s.mean(0).numpy(), s.std(0, unbiased=False).clamp(min=1e-6).numpy()

    def batch(self, step: int, batch_size: int, K: int, seed: int) -> dict[str, torch.Tensor]:
        """Batch `step`: B windows of K steps, left-padded; a pure function of (seed, step)."""
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        ep, start = self.draw_starts(g, batch_size, K - 1 if self.windows == "cover" else 0)
        return self.windows_at(ep, start, K)

    def draw_starts(self, g: torch.Generator, batch_size: int, lead: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(episode, start) of B windows: a start uniform in [−lead, T − 1] of an episode drawn ∝ T + lead
        (lead 0: the ``start`` rule; K − 1: ``cover``)."""
        weights = (self.lengths + lead).double()  # (E,)
        ep = torch.multinomial(weights / weights.sum(), batch_size, replacement=True, generator=g)  # (B,)
        span = self.lengths[ep] + lead  # (B,)
        return ep, (torch.rand(batch_size, generator=g, dtype=torch.float64) * span).long() - lead  # (B,), (B,)

    def windows_at(self, ep: torch.Tensor, start: torch.Tensor, K: int) -> dict[str, torch.Tensor]:
        """The K-step windows of episodes `ep` (B,) from `start` (B,; may be < 0), cut to the episode and
        left-padded: states, actions, returns (R̂), timesteps and mask (1 on real steps)."""
        first = start.clamp(min=0)  # (B,) the window's first real step
        n_real = torch.minimum(self.lengths[ep], start + K) - first  # (B,) in [1, K]
        offset = torch.arange(K)[None, :] - (K - n_real)[:, None]  # (B, K); < 0 on the left padding
        mask = (offset >= 0).long()  # (B, K)
        flat = self.starts[ep][:, None] + first[:, None] + offset.clamp(min=0)  # (B, K)
        keep = mask.bool()
        states = self.states[flat] * keep[..., None]  # (B, K, S)
        actions = self.actions[flat] * (keep if self.discrete else keep[..., None])  # (B, K[, A])
        return {"states": states, "actions": actions, "returns": self.rtg[flat] * keep,  # (B, K)
                "timesteps": self.timestep[flat] * keep, "mask": mask}
