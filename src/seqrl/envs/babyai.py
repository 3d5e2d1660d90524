"""BabyAI (minigrid): level ids, bot demonstrations, held-out seeds and batched evaluation rollouts.

An observation is a dict: ``image`` (7, 7, 3) uint8 — the agent's egocentric view, per cell (object,
colour, state) indices —, ``direction`` in 0..3 and ``mission``, the instruction text. There are 7
discrete actions. An episode succeeds when the environment terminates it with a positive reward.

Seeds: demonstration episode i of seed s resets with `demo_reset_seed` (bit 31 clear) and evaluation
episode i with `eval_reset_seed` (bit 31 set), so evaluation layouts are never ones a demonstration
was recorded on, whatever the seeds; the layouts a policy collects DAgger data on (`dagger_reset_seed`,
`labelled_rollouts`) have bit 31 clear too.

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
from seqrl.utils.extras import require

__all__ = [
    "BOS",
    "N_ACTIONS",
    "BabyAIEpisode",
    "BabyAIEvalResult",
    "BotStuck",
    "GuardedBot",
    "bot_episode",
    "dagger_reset_seed",
    "demo_reset_seed",
    "eval_reset_seed",
    "evaluate_babyai",
    "labelled_rollouts",
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
    require("minigrid", "BabyAI")  # registers the BabyAI ids

    env_id = level if level.startswith("BabyAI-") else f"BabyAI-{level}-v0"
    if env_id not in gym.registry:
        known = sorted(k[len("BabyAI-"):-len("-v0")] for k in gym.registry if k.startswith("BabyAI-"))
        raise EnvError(f"BabyAI level {level!r}: no such id {env_id!r}; levels: {', '.join(known[:12])}, …")
    return env_id


def make_babyai(env_id: str):
    """A BabyAI environment (registering minigrid's ids first)."""
    require("minigrid", "BabyAI")

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


def dagger_reset_seed(seed: int, index: int) -> int:
    """Reset seed of the `index`-th layout the learner collects on (`labelled_rollouts`): bit 31 clear, so
    never an evaluation layout, and a stream apart from the demonstrations'."""
    return int(np.random.SeedSequence([seed, index, 2]).generate_state(1)[0]) & (_HIGH_BIT - 1)


def _quiet_reset(env, seed: int):
    # some levels print a line for each rejected layout while sampling one
    with contextlib.redirect_stdout(io.StringIO()):
        return env.reset(seed=seed)


@dataclass
class BabyAIEpisode:
    """One episode: images (T+1, 7, 7, 3) uint8, directions (T+1,) int64, mission, actions (T,) int64,
    rewards (T,) float32, terminations/truncations (T,) bool, reset_seed. `labels` (T,) int64, when set: the
    bot's action at each step of an episode someone else drove (`actions` are the ones executed)."""

    images: np.ndarray
    directions: np.ndarray
    mission: str
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    reset_seed: int
    labels: np.ndarray | None = None

    @property
    def success(self) -> bool:
        return bool(self.terminations[-1] and self.rewards[-1] > 0)


BOT_PLAN_LIMIT = 2000
"""Subgoal pushes and pops one `BabyAIBot.replan` call may make before it counts as stuck: in states its
own demonstrations never reach (carrying an object next to a blocker) the bot can plan forever."""


class BotStuck(RuntimeError):
    """`BabyAIBot.replan` went past `BOT_PLAN_LIMIT` subgoal changes in one call."""


class _PlanStack(list):
    """The bot's subgoal stack, counting pushes and pops since `ops` was last reset."""

    ops = 0

    def _tick(self) -> None:
        self.ops += 1
        if self.ops > BOT_PLAN_LIMIT:
            raise BotStuck(f"the bot changed its plan more than {BOT_PLAN_LIMIT} times for one action")

    def append(self, item) -> None:
        self._tick()
        super().append(item)

    def pop(self, *args):
        self._tick()
        return super().pop(*args)


class GuardedBot:
    """minigrid's `BabyAIBot` whose `replan` raises `BotStuck` instead of planning forever."""

    def __init__(self, env) -> None:
        BabyAIBot = require("minigrid.utils.baby_ai_bot", "the BabyAI bot").BabyAIBot

        self.bot = BabyAIBot(env)
        self.bot.stack = _PlanStack(self.bot.stack)

    def replan(self, action_taken=None) -> int:
        self.bot.stack.ops = 0
        return int(self.bot.replan(action_taken))


def bot_episode(env, reset_seed: int) -> tuple[BabyAIEpisode | None, str]:
    """`BabyAIBot`'s episode from ``env.reset(seed=reset_seed)``: (episode, "") on success, else
    (None, why) — the bot raised (or was stuck), or the episode ended without the goal (time limit)."""
    obs, _ = _quiet_reset(env, reset_seed)
    images, directions, actions, rewards, terms, truncs = [obs["image"]], [obs["direction"]], [], [], [], []
    mission = obs["mission"]
    try:
        bot = GuardedBot(env.unwrapped)
        while True:
            action = bot.replan()
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
    over the active episodes with their last k ≤ `context` real steps (no fake padding steps: a policy
    pads and masks a short window itself, as training masks the start of an episode).

    max_steps: cap on episode length (0: the level's own limit). `record`: index of an episode whose
    RGB frames are returned (for a picture strip); else the list is empty.
    """
    if episodes < 1:
        raise ValueError(f"evaluate_babyai: episodes must be >= 1 (got {episodes})")
    seeds = [eval_reset_seed(seed, i) for i in range(episodes)]
    run = _lockstep(act, env_id, seeds, context, max_steps, record=record)
    return run.result, run.frames


def labelled_rollouts(act: Act, env_id: str, seeds: list[int], context: int = 1, max_steps: int = 0,
                      beta: float = 0.0, rng: np.random.Generator | None = None, bot_memory: int = 0
                      ) -> tuple[list[BabyAIEpisode], BabyAIEvalResult, dict[str, float]]:
    """DAgger's data (Ross et al. 2011): episodes on the layouts `seeds`, driven by `act`, every visited
    state labelled with the action `BabyAIBot` takes there. One bot follows each episode from its reset and
    is told every executed action (minigrid's bot replans its route from where the policy went; it
    plans to undo a pickup, drop or toggle it did not ask for).
    With probability `beta` per step the bot's own action is executed instead of the policy's (drawn
    from `rng`). `bot_memory` k ≥ 1: the labelling bot has seen only the last k observations — rebuilt at
    every step from the state k − 1 steps back and replayed through the executed actions — so it knows
    what a policy with a k-step context can know; 0: one bot remembers the whole episode.

    Returns (episodes with `labels`, the policy's outcome, stats): ``disagreement`` — the fraction of
    labelled steps where the policy's action differs from the bot's; ``bot_errors`` — episodes whose
    labels stop where the bot raised or was stuck (`BotStuck`; the labelled prefix is kept, the policy
    plays on unlabelled);
    ``labelled_steps``."""
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"labelled_rollouts: beta must be in [0, 1] (got {beta})")
    if bot_memory < 0:
        raise ValueError(f"labelled_rollouts: bot_memory must be >= 0 (got {bot_memory})")
    run = _lockstep(act, env_id, seeds, context, max_steps, label=True, beta=beta,
                    rng=rng if rng is not None else np.random.default_rng(0), bot_memory=bot_memory)
    episodes = []
    for i in range(len(seeds)):
        T = int(run.result.lengths[i]) if run.cut[i] < 0 else int(run.cut[i])
        if T == 0:
            continue
        episodes.append(BabyAIEpisode(
            images=run.images[i, : T + 1].copy(), directions=run.directions[i, : T + 1].copy(),
            mission=run.result.missions[i], actions=run.prev[i, 1 : T + 1].copy(), rewards=run.rewards[i, :T].copy(),
            terminations=run.terms[i, :T].copy(), truncations=run.truncs[i, :T].copy(),
            reset_seed=int(seeds[i]), labels=run.labels[i, :T].copy()))
    labelled = int(sum(len(e.labels) for e in episodes))
    stats = {"disagreement": run.disagree / max(run.proposed, 1), "bot_errors": float((run.cut >= 0).sum()),
             "labelled_steps": float(labelled)}
    return episodes, run.result, stats


@dataclass
class _Lockstep:
    result: BabyAIEvalResult
    frames: list
    images: np.ndarray  # (N, T+1, 7, 7, 3)
    directions: np.ndarray  # (N, T+1)
    prev: np.ndarray  # (N, T+1): prev[:, t] = the action executed at t − 1
    rewards: np.ndarray  # (N, T)
    terms: np.ndarray  # (N, T)
    truncs: np.ndarray  # (N, T)
    labels: np.ndarray  # (N, T): the bot's action (label runs), else -1
    cut: np.ndarray  # (N,): step where the bot raised (labels end there), else -1
    disagree: int = 0
    proposed: int = 0


def _lockstep(act: Act, env_id: str, seeds: list[int], context: int, max_steps: int, record: int | None = None,
              label: bool = False, beta: float = 0.0, rng: np.random.Generator | None = None,
              bot_memory: int = 0) -> _Lockstep:
    """All episodes step together; one `act` call per step over the active ones. With `label`, a bot
    follows each episode and names its action at every step (executed instead with probability `beta`)."""
    if not seeds or context < 1 or max_steps < 0:
        raise ValueError(f"evaluate_babyai: episodes and context must be >= 1, max_steps >= 0 "
                         f"(got {len(seeds)}, {context}, {max_steps})")
    envs = [make_babyai(env_id) for _ in seeds]
    first = [_quiet_reset(env, s)[0] for env, s in zip(envs, seeds)]
    limit = max_steps or max(int(env.unwrapped.max_steps) for env in envs)
    N = len(seeds)
    images = np.zeros((N, limit + 1, 7, 7, 3), dtype=np.uint8)  # (N, T+1, 7, 7, 3)
    directions = np.zeros((N, limit + 1), dtype=np.int64)  # (N, T+1)
    prev = np.full((N, limit + 1), BOS, dtype=np.int64)  # (N, T+1): prev[:, t] = a_{t-1}
    rewards = np.zeros((N, limit), dtype=np.float32)
    terms, truncs = np.zeros((N, limit), dtype=bool), np.zeros((N, limit), dtype=bool)
    labels = np.full((N, limit), -1, dtype=np.int64)
    cut = np.full(N, -1, dtype=np.int64)
    missions = [str(o["mission"]) for o in first]
    for i, o in enumerate(first):
        images[i, 0], directions[i, 0] = o["image"], o["direction"]
    success = np.zeros(N, dtype=bool)
    returns = np.zeros(N, dtype=np.float64)
    lengths = np.zeros(N, dtype=np.int64)
    active = np.ones(N, dtype=bool)
    frames = [envs[record].unwrapped.get_frame(highlight=True)] if record is not None else []
    bots: list = []
    snapshots: list[list] = [[] for _ in seeds]  # bot_memory: the last k states before each step
    if label:
        import copy

        bots = [GuardedBot(env.unwrapped) for env in envs] if not bot_memory else []

        def expert_action(i: int, t: int) -> int:
            if not bot_memory:
                return bots[i].replan(None if t == 0 else int(prev[i, t]))
            snapshots[i].append(copy.deepcopy(envs[i].unwrapped))
            del snapshots[i][:-bot_memory]
            t0 = t - len(snapshots[i]) + 1
            sim = copy.deepcopy(snapshots[i][0])  # the state at t0, replayed to t with the executed actions
            bot, taken = GuardedBot(sim), None
            for u in range(t0, t):
                bot.replan(taken)
                taken = int(prev[i, u + 1])
                sim.step(taken)
            return bot.replan(taken)
    disagree = proposed = 0
    try:
        for t in range(limit):
            idx = np.flatnonzero(active)
            if not len(idx):
                break
            w0 = max(0, t - context + 1)  # the real window only (episodes start together): the policy pads
            win = lambda a: a[idx, w0 : t + 1]  # noqa: E731 — (n, k ≤ context, ...) and masks, as in training
            actions = np.asarray(act(win(images), win(directions), [missions[i] for i in idx],
                                     win(prev))).reshape(-1)  # (n,)
            for row, i in enumerate(idx):
                a = int(actions[row])
                if not 0 <= a < N_ACTIONS:
                    raise ValueError(f"evaluate_babyai: the policy returned action {a}, outside [0, {N_ACTIONS})")
                if label and cut[i] < 0:
                    try:
                        expert = expert_action(i, t)
                    except Exception:  # noqa: BLE001 — the bot's own failures end the labels, not the run
                        cut[i] = t
                    else:
                        labels[i, t] = expert
                        proposed += 1
                        disagree += int(a != expert)
                        if beta > 0 and rng.random() < beta:
                            a = expert
                obs, reward, term, trunc, _ = envs[i].step(a)
                images[i, t + 1], directions[i, t + 1], prev[i, t + 1] = obs["image"], obs["direction"], a
                rewards[i, t], terms[i, t], truncs[i, t] = reward, term, trunc
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
    result = BabyAIEvalResult(success=success, lengths=lengths, returns=returns, missions=missions,
                              reset_seeds=list(seeds))
    return _Lockstep(result, frames, images, directions, prev, rewards, terms, truncs, labels, cut, disagree, proposed)
