"""BabyAI (minigrid): level ids, bot demonstrations, held-out seeds and batched evaluation rollouts.

An observation is a dict: ``image`` (7, 7, 3) uint8 — the agent's egocentric view, per cell (object,
colour, state) indices —, ``direction`` in 0..3 and ``mission``, the instruction text. There are 7
discrete actions. An episode succeeds when the environment terminates it with a positive reward.

Seeds: demonstration episode i of seed s resets with `demo_reset_seed` (bit 31 clear) and evaluation
episode i with `eval_reset_seed` (bit 31 set), so evaluation layouts are never ones a demonstration
was recorded on, whatever the seeds.

A policy for `evaluate_babyai` is ``act(images, directions, missions, previous_actions) -> actions``
over the active episodes' histories: images (n, k, 7, 7, 3) uint8, directions (n, k), missions a list
of n strings, previous_actions (n, k) with ``a_{t−1}`` at step t (`BOS` at t = 0); it returns (n,)
actions for the last step. All episodes step in lockstep with one policy call per environment step.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from seqrl.envs.make import EnvError, make_env

__all__ = [
    "BOS",
    "N_ACTIONS",
    "BabyAIEpisode",
    "BabyAIEvalResult",
    "bot_episode",
    "demo_reset_seed",
    "eval_reset_seed",
    "evaluate_babyai",
    "make_babyai",
    "random_act",
    "resolve_level",
]

N_ACTIONS = 7
"""left, right, forward, pickup, drop, toggle, done."""
BOS = N_ACTIONS
"""The 'previous action' of an episode's first step."""
_HIGH_BIT = 1 << 31


def resolve_level(level: str) -> str:
    """``GoToLocal`` → ``BabyAI-GoToLocal-v0``; a full ``BabyAI-*`` id is kept. Unknown → `EnvError`.

    >>> resolve_level("GoToRedBallGrey"), resolve_level("BabyAI-PickupLoc-v0")
    ('BabyAI-GoToRedBallGrey-v0', 'BabyAI-PickupLoc-v0')
    """
    import gymnasium as gym
    import minigrid  # noqa: F401 — registers the BabyAI ids

    env_id = level if level.startswith("BabyAI-") else f"BabyAI-{level}-v0"
    if env_id not in gym.registry:
        known = sorted(k[len("BabyAI-"):-len("-v0")] for k in gym.registry if k.startswith("BabyAI-"))
        raise EnvError(f"BabyAI level {level!r}: no such id {env_id!r}; levels: {', '.join(known[:12])}, …")
    return env_id


def make_babyai(env_id: str):
    """A BabyAI environment (registering minigrid's ids first)."""
    import minigrid  # noqa: F401

    return make_env(resolve_level(env_id))


def demo_reset_seed(seed: int, index: int) -> int:
    """Reset seed of demonstration episode `index` under `seed`: 31 bits, bit 31 clear."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0]) & (_HIGH_BIT - 1)


def eval_reset_seed(seed: int, index: int) -> int:
    """Reset seed of evaluation episode `index` under `seed`: bit 31 set, so never a demonstration's.

    >>> eval_reset_seed(0, 0) >= 2**31 > demo_reset_seed(0, 0)
    True
    """
    return int(np.random.SeedSequence([seed, index, 1]).generate_state(1)[0]) | _HIGH_BIT


def _quiet_reset(env, seed: int):
    # some levels print a line for each rejected layout while sampling one
    with contextlib.redirect_stdout(io.StringIO()):
        return env.reset(seed=seed)


@dataclass
class BabyAIEpisode:
    """One episode: images (T+1, 7, 7, 3) uint8, directions (T+1,) int64, mission, actions (T,) int64,
    rewards (T,) float32, terminations/truncations (T,) bool, reset_seed."""

    images: np.ndarray
    directions: np.ndarray
    mission: str
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    reset_seed: int

    @property
    def success(self) -> bool:
        return bool(self.terminations[-1] and self.rewards[-1] > 0)


def bot_episode(env, reset_seed: int) -> tuple[BabyAIEpisode | None, str]:
    """`BabyAIBot`'s episode from ``env.reset(seed=reset_seed)``: (episode, "") on success, else
    (None, why) — the bot raised, or the episode ended without the goal (time limit)."""
    from minigrid.utils.baby_ai_bot import BabyAIBot

    obs, _ = _quiet_reset(env, reset_seed)
    images, directions, actions, rewards, terms, truncs = [obs["image"]], [obs["direction"]], [], [], [], []
    mission = obs["mission"]
    try:
        bot = BabyAIBot(env.unwrapped)
        while True:
            action = int(bot.replan())
            obs, reward, term, trunc, _ = env.step(action)
            images.append(obs["image"])
            directions.append(obs["direction"])
            actions.append(action)
            rewards.append(reward)
            terms.append(term)
            truncs.append(trunc)
            if term or trunc:
                break
    except Exception as e:  # noqa: BLE001 — the bot's own failures (assertions, unreachable goals) are counted
        return None, f"bot raised {type(e).__name__}"
    ep = BabyAIEpisode(images=np.stack(images).astype(np.uint8), directions=np.asarray(directions, dtype=np.int64),
                       mission=str(mission), actions=np.asarray(actions, dtype=np.int64),
                       rewards=np.asarray(rewards, dtype=np.float32), terminations=np.asarray(terms, dtype=bool),
                       truncations=np.asarray(truncs, dtype=bool), reset_seed=int(reset_seed))
    if not ep.success:
        return None, "goal not reached"
    return ep, ""


Act = Callable[[np.ndarray, np.ndarray, list, np.ndarray], np.ndarray]


def random_act(seed: int = 0) -> Act:
    """A uniform random policy over the 7 actions (the baseline of the learning test)."""
    rng = np.random.default_rng(seed)

    def act(images, directions, missions, previous_actions):
        return rng.integers(N_ACTIONS, size=len(missions))  # (n,)

    return act


@dataclass
class BabyAIEvalResult:
    """Per episode: success (N,) bool, lengths (N,), returns (N,), missions and reset seeds."""

    success: np.ndarray
    lengths: np.ndarray
    returns: np.ndarray
    missions: list[str]
    reset_seeds: list[int]

    def metrics(self) -> dict[str, float]:
        """``eval/success_rate``, ``eval/episode_length`` (mean), ``eval/return`` (mean), ``eval/episodes``."""
        return {"eval/success_rate": float(self.success.mean()), "eval/episode_length": float(self.lengths.mean()),
                "eval/return": float(self.returns.mean()), "eval/episodes": float(len(self.success))}


def evaluate_babyai(act: Act, env_id: str, episodes: int = 100, seed: int = 0, context: int = 1,
                    max_steps: int = 0, record: int | None = None) -> tuple[BabyAIEvalResult, list]:
    """Run `episodes` episodes on held-out layouts (`eval_reset_seed`) in lockstep; one `act` call per step
    over the active episodes with their last `context` steps (left-padded with zeros and `BOS`).

    max_steps: cap on episode length (0: the level's own limit). `record`: index of an episode whose
    RGB frames are returned (for a picture strip); else the list is empty.
    """
    if episodes < 1 or context < 1 or max_steps < 0:
        raise ValueError(f"evaluate_babyai: episodes and context must be >= 1, max_steps >= 0 "
                         f"(got {episodes}, {context}, {max_steps})")
    envs = [make_babyai(env_id) for _ in range(episodes)]
    seeds = [eval_reset_seed(seed, i) for i in range(episodes)]
    first = [_quiet_reset(env, s)[0] for env, s in zip(envs, seeds)]
    limit = max_steps or max(int(env.unwrapped.max_steps) for env in envs)
    N = episodes
    images = np.zeros((N, limit + 1, 7, 7, 3), dtype=np.uint8)  # (N, T+1, 7, 7, 3)
    directions = np.zeros((N, limit + 1), dtype=np.int64)  # (N, T+1)
    prev = np.full((N, limit + 1), BOS, dtype=np.int64)  # (N, T+1): prev[:, t] = a_{t-1}
    missions = [str(o["mission"]) for o in first]
    for i, o in enumerate(first):
        images[i, 0], directions[i, 0] = o["image"], o["direction"]
    success = np.zeros(N, dtype=bool)
    returns = np.zeros(N, dtype=np.float64)
    lengths = np.zeros(N, dtype=np.int64)
    active = np.ones(N, dtype=bool)
    frames = [envs[record].unwrapped.get_frame(highlight=True)] if record is not None else []
    try:
        for t in range(limit):
            idx = np.flatnonzero(active)
            if not len(idx):
                break
            w0 = max(0, t - context + 1)
            pad = context - (t + 1 - w0)
            win = lambda a, fill: np.concatenate(  # noqa: E731 — (n, context, ...) left-padded window
                [np.full((len(idx), pad, *a.shape[2:]), fill, dtype=a.dtype), a[idx, w0 : t + 1]], axis=1)
            actions = np.asarray(act(win(images, 0), win(directions, 0), [missions[i] for i in idx],
                                     win(prev, BOS))).reshape(-1)  # (n,)
            for row, i in enumerate(idx):
                a = int(actions[row])
                if not 0 <= a < N_ACTIONS:
                    raise ValueError(f"evaluate_babyai: the policy returned action {a}, outside [0, {N_ACTIONS})")
                obs, reward, term, trunc, _ = envs[i].step(a)
                images[i, t + 1], directions[i, t + 1], prev[i, t + 1] = obs["image"], obs["direction"], a
                returns[i] += float(reward)
                lengths[i] = t + 1
                if record is not None and i == record:
                    frames.append(envs[i].unwrapped.get_frame(highlight=True))
                if term or trunc or t + 1 == limit:
                    active[i] = False
                    success[i] = bool(term and reward > 0)
    finally:
        for env in envs:
            env.close()
    return BabyAIEvalResult(success=success, lengths=lengths, returns=returns, missions=missions,
                            reset_seeds=seeds), frames
