"""Evaluation rollouts of sequence policies (Decision Transformer, BC), conditioned on target returns.

All episodes of an evaluation — every target return × every episode — run in lockstep, one
environment copy each, and the policy sees the active ones as one batch: one forward pass per
environment step, however many targets and episodes. Episode ``i`` resets with the same seed for
every target (`seqrl.envs.rollout.episode_rngs`), so targets are compared on the same start states.

Return conditioning follows the Decision Transformer (Chen et al. 2021, Algorithm 1 and the official
evaluation): R̂_0 = target, and after each step R̂_{t+1} = R̂_t − r_t with the observed reward. The
policy acts on the last K steps of its history (states, actions, R̂, timesteps), left-padded at the
start of an episode, and its deterministic action is used (tanh output / argmax; Online DT: the mean).

A policy is any object with ``context_len`` (K), ``max_ep_len``, ``discrete`` and
``get_action(states, actions, returns_to_go, timesteps, attention_mask) -> actions`` on batched
histories — `seqrl.models.dt.DecisionTransformer` and `seqrl.models.dt.MLPPolicy` are.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from seqrl.data.offline import Episode, normalized_score
from seqrl.envs.config import DTEvalConfig
from seqrl.envs.make import make_env
from seqrl.envs.rollout import episode_rngs

__all__ = [
    "DTEvalConfig",
    "EvalResult",
    "Histories",
    "conditioned_rollouts",
    "env_factory",
    "evaluate_policy",
    "far_targets",
    "run_evaluation",
    "target_label",
    "time_limit",
    "warn_far_targets",
]


@dataclass
class EvalResult:
    """Returns and lengths of each (target, episode): arrays of shape (n_targets, episodes)."""

    targets: list[float | None]
    returns: np.ndarray
    lengths: np.ndarray

    def metrics(self, normalize: Callable[[np.ndarray], np.ndarray] | None = None) -> dict[str, float]:
        """``eval/return/<target>`` (mean), ``eval/return_std/<target>``, ``eval/length/<target>`` and,
        with `normalize`, ``eval/normalized/<target>`` (mean normalised score ×100). A target of None
        (an unconditioned policy such as BC) gives the keys without the ``/<target>`` suffix."""
        out: dict[str, float] = {}
        for j, target in enumerate(self.targets):
            suffix = "" if target is None else f"/{target_label(target)}"
            out[f"eval/return{suffix}"] = float(self.returns[j].mean())
            out[f"eval/return_std{suffix}"] = float(self.returns[j].std())
            out[f"eval/length{suffix}"] = float(self.lengths[j].mean())
            if normalize is not None:
                out[f"eval/normalized{suffix}"] = float(np.mean(normalize(self.returns[j])))
        return out


def target_label(target: float) -> str:
    """``3600.0`` → ``"3600"``, ``-150.5`` → ``"-150.5"`` (metric key suffixes)."""
    return str(int(target)) if float(target).is_integer() else f"{target:g}"


def far_targets(targets: Sequence[float], data_returns: np.ndarray, factor: float = 1.0) -> list[float]:
    """Targets more than `factor` × the data's return range outside it (min − f·span, max + f·span).

    A Decision Transformer only learned what R̂ means inside the returns it saw; far outside, the
    achieved return usually stops following the target (Chen et al. 2021, Fig. 4). A dataset whose
    returns are all equal uses max(|R|, 1) as the span.
    """
    lo, hi = float(np.min(data_returns)), float(np.max(data_returns))
    span = hi - lo if hi > lo else max(abs(hi), 1.0)
    return [t for t in targets if t > hi + factor * span or t < lo - factor * span]


def warn_far_targets(targets: Sequence[float], data_returns: np.ndarray, field: str) -> list[float]:
    """`warnings.warn` for each target `far_targets` finds; the message names `field`. Returns them."""
    far = far_targets(targets, data_returns)
    lo, hi = float(np.min(data_returns)), float(np.max(data_returns))
    for t in far:
        warnings.warn(f"{field}: target return {t:g} is far outside the dataset's episode returns "
                      f"[{lo:.1f}, {hi:.1f}]; the achieved return will likely not follow it", stacklevel=2)
    return far


def _flat_obs(obs) -> np.ndarray:
    return np.asarray(obs, dtype=np.float32).reshape(-1)


@dataclass
class Histories:
    """What `conditioned_rollouts` recorded, one row per episode (N rows, T = the step limit).

    states (N, T+1, S); actions (N, T+1[, A]) — slot ``lengths[i]`` and beyond are zeros; rewards
    (N, T) float64; terminated (N, T) bool; lengths (N,) steps taken.
    """

    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    lengths: np.ndarray

    def episodes(self, first_id: int = 0) -> list[Episode]:
        """Row i as an `Episode` (id ``first_id + i``); an episode that did not terminate is marked truncated."""
        out = []
        for i, T in enumerate(self.lengths.tolist()):
            trunc = np.zeros(T, dtype=bool)
            trunc[-1] = not self.terminated[i, T - 1]
            out.append(Episode(observations=self.states[i, : T + 1].copy(), actions=self.actions[i, :T].copy(),
                               rewards=self.rewards[i, :T].astype(np.float32),
                               terminations=self.terminated[i, :T].copy(), truncations=trunc, id=first_id + i))
        return out


@torch.no_grad()
def conditioned_rollouts(policy: torch.nn.Module, envs: Sequence[gym.Env], initial_returns: Sequence[float],
                         reset_seeds: Sequence[int], limit: int) -> Histories:
    """Episodes of a sequence policy in lockstep, one per environment, conditioned on R̂_0 = initial_returns[i].

    Environment i resets with reset_seeds[i]; R̂_{t+1} = R̂_t − r_t; the policy acts on the last K steps
    (one batched ``get_action`` per step over the active episodes) with whatever action it returns
    (deterministic in eval mode; an Online DT inside ``exploring()`` samples). Episodes end at
    termination, truncation or `limit` steps. Timesteps beyond ``max_ep_len − 1`` are clipped to it.
    The policy is put in eval mode and its previous mode restored; the environments are not closed.
    """
    N = len(envs)
    if not N or len(initial_returns) != N or len(reset_seeds) != N:
        raise ValueError(f"conditioned_rollouts: one initial return and one reset seed per environment (got "
                         f"{N} environments, {len(initial_returns)} returns, {len(reset_seeds)} seeds)")
    if limit < 1:
        raise ValueError(f"conditioned_rollouts: limit must be >= 1 (got {limit})")
    space = envs[0].action_space
    discrete = bool(policy.discrete)
    K, max_ep_len = int(policy.context_len), int(policy.max_ep_len)
    first = [env.reset(seed=int(s))[0] for env, s in zip(envs, reset_seeds)]
    S = _flat_obs(first[0]).shape[0]
    A = 1 if discrete else int(np.prod(space.shape))
    states = np.zeros((N, limit + 1, S), dtype=np.float32)  # (N, T+1, S)
    actions = np.zeros((N, limit + 1) if discrete else (N, limit + 1, A),
                       dtype=np.int64 if discrete else np.float32)  # (N, T+1[, A]); slot t+1 is a placeholder
    rtg = np.zeros((N, limit + 1), dtype=np.float32)  # (N, T+1)
    rewards = np.zeros((N, limit), dtype=np.float64)  # (N, T)
    terminated = np.zeros((N, limit), dtype=bool)  # (N, T)
    for i, obs in enumerate(first):
        states[i, 0] = _flat_obs(obs)
        rtg[i, 0] = float(initial_returns[i])
    lengths = np.zeros(N, dtype=np.int64)
    active = np.ones(N, dtype=bool)

    was_training = policy.training
    dev = next(policy.parameters(), torch.empty(0)).device  # the policy may sit on a GPU; environments stay on the CPU
    policy.eval()
    try:
        for t in range(limit):
            idx = np.flatnonzero(active)
            if not len(idx):
                break
            w0 = max(0, t - K + 1)
            steps = torch.arange(w0, t + 1).clamp(max=max_ep_len - 1).expand(len(idx), -1)  # (n, k)
            act = policy.get_action(
                torch.from_numpy(states[idx, w0 : t + 1]).to(dev),  # (n, k, S)
                torch.from_numpy(actions[idx, w0 : t + 1]).to(dev),  # (n, k[, A]); the last is a placeholder
                torch.from_numpy(rtg[idx, w0 : t + 1]).to(dev),  # (n, k)
                steps.to(dev),
            ).cpu().numpy()  # (n, A) or (n,)
            for row, i in enumerate(idx):
                a = act[row]
                env_action = int(a) if discrete else a.reshape(space.shape).astype(space.dtype)
                obs, reward, term, trunc, _ = envs[i].step(env_action)
                actions[i, t] = a
                states[i, t + 1] = _flat_obs(obs)
                rtg[i, t + 1] = rtg[i, t] - float(reward)
                rewards[i, t] = float(reward)
                terminated[i, t] = bool(term)
                lengths[i] = t + 1
                if term or trunc or t + 1 == limit:
                    active[i] = False
    finally:
        policy.train(was_training)
    return Histories(states=states, actions=actions, rewards=rewards, terminated=terminated, lengths=lengths)


def env_factory(env: str | Callable[[], gym.Env]) -> Callable[[], gym.Env]:
    """A factory of environments from a gymnasium id (`make_env`) or a factory."""
    return (lambda: make_env(env)) if isinstance(env, str) else env


def time_limit(envs: Sequence[gym.Env]) -> int:
    """The smallest ``spec.max_episode_steps`` of `envs` (0 when none has one)."""
    return min((e.spec.max_episode_steps for e in envs if e.spec and e.spec.max_episode_steps), default=0)


def evaluate_policy(
    policy: torch.nn.Module,
    env: str | Callable[[], gym.Env],
    target_returns: Sequence[float | None],
    episodes: int = 10,
    seed: int = 0,
    max_steps: int = 0,
) -> EvalResult:
    """Roll out `episodes` episodes per target return and return their returns and lengths.

    env: a gymnasium id (built with `make_env`) or a factory of environments. target_returns: raw
    (unscaled) R̂_0 per condition; None for a policy that ignores returns (R̂ is then 0 throughout).
    max_steps: stop episodes after this many steps (0: only the environment's own time limit).
    Timesteps beyond the policy's ``max_ep_len − 1`` are clipped to it, with one warning.
    The policy is put in eval mode for the rollouts and its previous mode restored.
    """
    if episodes < 1:
        raise ValueError(f"evaluate_policy: episodes must be >= 1 (got {episodes})")
    if not target_returns:
        raise ValueError("evaluate_policy: give at least one target return (None for an unconditioned policy)")
    if max_steps < 0:
        raise ValueError(f"evaluate_policy: max_steps must be >= 0 (got {max_steps})")
    make = env_factory(env)
    n_targets = len(target_returns)
    envs = [make() for _ in range(n_targets * episodes)]
    try:
        limit = max_steps or time_limit(envs)
        if not limit:
            raise ValueError("evaluate_policy: the environment has no time limit; give max_steps")
        max_ep_len = int(policy.max_ep_len)
        if limit > max_ep_len:
            warnings.warn(f"evaluate_policy: episodes may last {limit} steps but the policy knows timesteps < "
                          f"{max_ep_len}; later timesteps are clipped to {max_ep_len - 1}", stacklevel=2)
        initial = [0.0 if t is None else float(t) for t in target_returns for _ in range(episodes)]
        seeds = [episode_rngs(seed, i % episodes)[0] for i in range(len(envs))]
        h = conditioned_rollouts(policy, envs, initial, seeds, limit)
    finally:
        for e in envs:
            e.close()
    returns = h.rewards.sum(axis=1)  # (N,)
    if not np.isfinite(returns).all():
        raise ValueError("evaluate_policy: the environment returned a non-finite reward")
    return EvalResult(targets=list(target_returns), returns=returns.reshape(n_targets, episodes),
                      lengths=h.lengths.reshape(n_targets, episodes))


def run_evaluation(policy: torch.nn.Module, info: dict, targets: list[float], episodes: int, seed: int,
                   max_steps: int = 0, env=None) -> tuple[dict[str, float], object]:
    """Metrics of `evaluate_policy` (BC: one unconditioned condition); normalised ×100 when the data has
    reference returns. `env` overrides the dataset's environment id (an id or a factory)."""
    env = env or info["env_id"]
    if not env:
        raise ValueError("the dataset names no environment (env_id); set eval.episodes=0 or give one")
    conditions = [None] if info["method"] == "bc" else [float(t) for t in targets]
    result = evaluate_policy(policy, env, conditions, episodes=episodes, seed=seed, max_steps=max_steps)
    lo, hi = info.get("ref_min_score"), info.get("ref_max_score")
    normalize = None if lo is None or hi is None else (lambda r: normalized_score(r, lo, hi))
    return result.metrics(normalize), result


def evaluate_on_main(policy: torch.nn.Module, info: dict, eval_cfg: DTEvalConfig, env=None) -> dict[str, float]:
    """`run_evaluation` at `eval_cfg`'s targets, episodes, seed and step limit on the main process; the
    other processes wait for it and get {} (a trainer's held-out evaluation under torchrun)."""
    from seqrl.utils import dist

    metrics: dict[str, float] = {}
    if dist.is_main():
        metrics, _ = run_evaluation(policy, info, eval_cfg.target_returns, eval_cfg.episodes, eval_cfg.seed,
                                    eval_cfg.max_steps, env=env)
    dist.barrier()
    return metrics
