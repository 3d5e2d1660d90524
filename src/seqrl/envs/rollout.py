"""Deterministic batched rollouts: whole episodes from a policy, each a pure function of (seed, index).

Episode ``i`` of a collection with seed ``s`` resets its environment with a seed and draws its action
noise from a generator that both come from ``SeedSequence([s, i])``, so which other episodes run
beside it does not change it. Up to `n_parallel` environments step in lockstep and the policy sees
their observations as one batch (one forward pass per step, not one per environment).

A policy here is any callable ``act(obs, rngs) -> actions`` with ``obs`` of shape (B, obs_dim) and one
`numpy.random.Generator` per row, returning (B, act_dim) actions inside the action space.

>>> eps = collect_episodes("Pendulum-v1", uniform_policy(make_env("Pendulum-v1").action_space), n_episodes=2, seed=0)
>>> [len(e) for e in eps], eps[0].observations.shape, bool(eps[1].truncations[-1])
([200, 200], (201, 3), True)
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

from seqrl.data.offline import Episode
from seqrl.envs.make import make_env

__all__ = ["Policy", "collect_episodes", "episode_rngs", "uniform_policy"]

Policy = Callable[[np.ndarray, list], np.ndarray]


def episode_rngs(seed: int, index: int) -> tuple[int, np.random.Generator]:
    """The environment reset seed and the action-noise generator of episode `index` under `seed`."""
    reset_seq, noise_seq = np.random.SeedSequence([seed, index]).spawn(2)
    return int(reset_seq.generate_state(1)[0]), np.random.default_rng(noise_seq)


def uniform_policy(action_space: gym.spaces.Space) -> Policy:
    """Actions drawn uniformly from a Box (or Discrete) space, from each row's own generator."""
    if isinstance(action_space, gym.spaces.Box):
        low, high = action_space.low.astype(np.float64), action_space.high.astype(np.float64)

        def act(obs: np.ndarray, rngs: list) -> np.ndarray:
            return np.stack([rng.uniform(low, high) for rng in rngs]).astype(np.float32)  # (B, act_dim)

        return act
    if isinstance(action_space, gym.spaces.Discrete):
        n, start = int(action_space.n), int(action_space.start)

        def act_discrete(obs: np.ndarray, rngs: list) -> np.ndarray:
            return np.array([start + rng.integers(n) for rng in rngs], dtype=np.int64)  # (B,)

        return act_discrete
    raise TypeError(f"uniform_policy: unsupported action space {action_space}")


def collect_episodes(
    env_id: str,
    policy: Policy,
    *,
    n_episodes: int | None = None,
    n_steps: int | None = None,
    seed: int = 0,
    first_index: int = 0,
    n_parallel: int = 16,
) -> list[Episode]:
    """Whole episodes of `policy` in `env_id`: exactly `n_episodes`, or the fewest whose steps reach `n_steps`.

    Episodes are indexed ``first_index, first_index + 1, …`` (their `Episode.id`) and returned in
    that order; with `n_steps` the last episode is kept whole, so the total may exceed `n_steps` by
    less than one episode. Observations are float32 (T+1, obs_dim); rewards float32.
    """
    if (n_episodes is None) == (n_steps is None):
        raise ValueError("collect_episodes: give exactly one of n_episodes or n_steps")
    if (n_episodes is not None and n_episodes < 1) or (n_steps is not None and n_steps < 1):
        raise ValueError(f"collect_episodes: n_episodes/n_steps must be >= 1 (got {n_episodes}, {n_steps})")
    if n_parallel < 1:
        raise ValueError(f"collect_episodes: n_parallel must be >= 1 (got {n_parallel})")
    envs = [make_env(env_id) for _ in range(n_parallel if n_episodes is None else min(n_parallel, n_episodes))]
    done: dict[int, Episode] = {}
    slots: list[dict | None] = [None] * len(envs)
    next_index = first_index

    done_steps = [0]  # steps of all finished episodes
    prefix = [first_index, 0]  # the contiguous run of finished episodes: next index, its steps so far

    def enough() -> bool:
        if n_episodes is not None:
            return len(done) >= n_episodes
        while prefix[1] < n_steps and prefix[0] in done:
            prefix[1] += len(done[prefix[0]])
            prefix[0] += 1
        return prefix[1] >= n_steps

    def may_start() -> bool:
        if n_episodes is not None:
            return next_index < first_index + n_episodes
        # Start only as many episodes as the remaining budget needs at the mean length seen so far (one
        # until the first ends), so a small budget does not run n_parallel long episodes to throw away.
        # Which episodes end up in the result does not depend on this: only how fast they are found.
        running = [len(s["rew"]) for s in slots if s is not None]
        remaining = n_steps - done_steps[0] - sum(running)
        if remaining <= 0:
            return False
        if not done:
            return not running
        mean_len = done_steps[0] / len(done)
        return len(running) < -(-remaining // max(mean_len, 1.0))

    try:
        while not enough():
            for k, env in enumerate(envs):
                if slots[k] is None and may_start():
                    reset_seed, rng = episode_rngs(seed, next_index)
                    obs, _ = env.reset(seed=reset_seed)
                    slots[k] = {"index": next_index, "rng": rng, "obs": [obs], "act": [], "rew": [],
                                "term": [], "trunc": []}
                    next_index += 1
            active = [k for k, s in enumerate(slots) if s is not None]
            if not active:
                break
            obs_batch = np.stack([slots[k]["obs"][-1] for k in active]).astype(np.float32)  # (B, obs_dim)
            actions = policy(obs_batch, [slots[k]["rng"] for k in active])  # (B, act_dim) or (B,)
            for row, k in enumerate(active):
                s = slots[k]
                action = actions[row]
                obs, reward, terminated, truncated, _ = envs[k].step(action)
                s["obs"].append(obs)
                s["act"].append(action)
                s["rew"].append(reward)
                s["term"].append(terminated)
                s["trunc"].append(truncated)
                if terminated or truncated:
                    done[s["index"]] = Episode(
                        observations=np.asarray(s["obs"], dtype=np.float32),
                        actions=np.asarray(s["act"]),
                        rewards=np.asarray(s["rew"], dtype=np.float32),
                        terminations=np.asarray(s["term"], dtype=bool),
                        truncations=np.asarray(s["trunc"], dtype=bool),
                        id=s["index"],
                    )
                    done_steps[0] += len(s["rew"])
                    slots[k] = None
    finally:
        for env in envs:
            env.close()
    episodes, total = [], 0
    for i in range(first_index, next_index):
        if i not in done or (n_steps is not None and total >= n_steps):
            break
        episodes.append(done[i])
        total += len(done[i])
    return episodes
