"""DAgger data for the VLA: bot labels at the states another policy reaches, their packing and storage."""

from __future__ import annotations

import numpy as np
import pytest

from seqrl.data.babyai import load_episodes, pack_episodes, save_episodes, unpack_obs
from seqrl.data.offline import DatasetError
from seqrl.envs.babyai import (BOS, N_ACTIONS, bot_episode, dagger_reset_seed, demo_reset_seed, eval_reset_seed,
                               labelled_rollouts, make_babyai, random_act, resolve_level)

LEVEL = resolve_level("GoToLocal")


def test_with_beta_one_the_labelled_rollout_is_the_bots_own_demonstration():
    seeds = [dagger_reset_seed(0, i) for i in range(6)]
    episodes, result, stats = labelled_rollouts(random_act(0), LEVEL, seeds, context=3, beta=1.0)
    assert result.success.all() and stats["bot_errors"] == 0
    env = make_babyai(LEVEL)
    for ep, seed in zip(episodes, seeds):
        demo, why = bot_episode(env, seed)
        assert demo is not None, why
        assert np.array_equal(ep.labels, demo.actions) and np.array_equal(ep.actions, demo.actions)
        assert np.array_equal(ep.images, demo.images) and np.array_equal(ep.directions, demo.directions)
        assert ep.mission == demo.mission and ep.reset_seed == seed
    # a random policy disagrees with the bot on most steps; the counter sees it (executed = bot's here)
    assert stats["disagreement"] > 0.5


def test_labels_follow_the_policy_and_the_bot_replans_from_where_it_went():
    seeds = [dagger_reset_seed(1, i) for i in range(8)]
    episodes, result, stats = labelled_rollouts(random_act(3), LEVEL, seeds, context=2, beta=0.0)
    assert len(episodes) == 8
    env = make_babyai(LEVEL)
    for ep in episodes:
        T = len(ep.actions)
        assert ep.labels.shape == (T,) and ((ep.labels >= 0) & (ep.labels < N_ACTIONS)).all()
        assert ep.images.shape == (T + 1, 7, 7, 3)
        # the stored images are the ones the executed actions lead to from the reset layout
        obs, _ = env.reset(seed=ep.reset_seed)
        assert np.array_equal(obs["image"], ep.images[0])
        for t, a in enumerate(ep.actions):
            obs, *_ = env.step(int(a))
            assert np.array_equal(obs["image"], ep.images[t + 1]) and obs["direction"] == ep.directions[t + 1]
    # a random policy is not the bot: executed actions and labels differ somewhere, and the policy fails often
    assert any(not np.array_equal(ep.actions, ep.labels) for ep in episodes)
    assert stats["disagreement"] == pytest.approx(
        sum((ep.actions != ep.labels).sum() for ep in episodes) / sum(len(ep.labels) for ep in episodes))
    assert result.success.mean() < 1.0


def test_packed_labelled_episodes_take_previous_actions_from_what_ran_and_targets_from_the_bot():
    episodes, _, _ = labelled_rollouts(random_act(5), LEVEL, [dagger_reset_seed(2, i) for i in range(3)], context=1)
    packed, missions = pack_episodes(episodes, ["an earlier mission"])
    assert missions[0] == "an earlier mission" and set(missions[1:]) == {ep.mission for ep in episodes}
    for ep, p in zip(episodes, packed):
        image, direction, mission, prev = unpack_obs(p.observations)
        assert prev[0] == BOS and np.array_equal(prev[1:], ep.actions)
        assert np.array_equal(p.actions, ep.labels)
        assert np.array_equal(image, ep.images) and missions[mission[0]] == ep.mission


def test_round_files_store_labelled_episodes_exactly_and_torn_ones_are_named(tmp_path):
    episodes, _, _ = labelled_rollouts(random_act(7), LEVEL, [dagger_reset_seed(3, i) for i in range(4)], context=2)
    path = save_episodes(tmp_path / "rounds" / "round-1.npz", episodes)
    back = load_episodes(path)
    assert len(back) == len(episodes)
    for a, b in zip(episodes, back):
        for field in ("images", "directions", "actions", "labels", "rewards", "terminations", "truncations"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), field
        assert a.mission == b.mission and a.reset_seed == b.reset_seed
    assert [p.name for p in path.parent.iterdir()] == ["round-1.npz"]  # no temporary file left behind
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(DatasetError, match="round-1.npz"):
        load_episodes(path)
    with pytest.raises(DatasetError, match="nothing.npz"):
        load_episodes(tmp_path / "nothing.npz")


def test_collection_layouts_are_neither_evaluation_nor_demonstration_layouts():
    dagger = {dagger_reset_seed(s, i) for s in range(3) for i in range(300)}
    assert not dagger & {eval_reset_seed(s, i) for s in range(3) for i in range(300)}
    assert not dagger & {demo_reset_seed(s, i) for s in range(3) for i in range(300)}
    with pytest.raises(ValueError, match="beta"):
        labelled_rollouts(random_act(0), LEVEL, [1], beta=1.5)


def test_a_bot_with_the_policys_memory_knows_only_the_last_k_observations():
    import copy

    from minigrid.utils.baby_ai_bot import BabyAIBot

    seeds = [dagger_reset_seed(4, i) for i in range(5)]
    follow, _, _ = labelled_rollouts(random_act(2), LEVEL, seeds, context=2)
    long, _, _ = labelled_rollouts(random_act(2), LEVEL, seeds, context=2, bot_memory=1000)
    assert all(np.array_equal(a.labels, b.labels) for a, b in zip(follow, long))  # longer than any episode
    fresh, _, _ = labelled_rollouts(random_act(2), LEVEL, seeds, context=2, bot_memory=1)
    env = make_babyai(LEVEL)
    differs = False
    for ep, ref in zip(fresh, follow):
        env.reset(seed=ep.reset_seed)
        for t, a in enumerate(ep.actions):  # k = 1: a bot that sees the current state for the first time
            assert ep.labels[t] == int(BabyAIBot(copy.deepcopy(env.unwrapped)).replan()), (ep.reset_seed, t)
            env.step(int(a))
        differs |= not np.array_equal(ep.labels, ref.labels[: len(ep.labels)])
    assert differs  # forgetting changes some labels
    with pytest.raises(ValueError, match="bot_memory"):
        labelled_rollouts(random_act(0), LEVEL, [1], bot_memory=-2)


def test_a_stuck_bot_that_would_plan_forever_is_stopped_and_its_labels_end_there(monkeypatch):
    # minigrid's bot can plan forever in states its own demonstrations never reach (a policy picked
    # something up next to a blocker); here every subgoal, once the episode is 3 steps old, pushes another
    import minigrid.utils.baby_ai_bot as bb

    from seqrl.envs.babyai import BOT_PLAN_LIMIT, BotStuck, GuardedBot

    real = bb.GoNextToSubgoal.replan_before_action

    def endless(self):
        if self.bot.mission.unwrapped.step_count >= 3:
            self.bot.stack.append(bb.GoNextToSubgoal(self.bot, self.pos))
            return None
        return real(self)

    monkeypatch.setattr(bb.GoNextToSubgoal, "replan_before_action", endless)
    env = make_babyai(LEVEL)
    env.reset(seed=dagger_reset_seed(6, 0))
    bot = GuardedBot(env.unwrapped)
    for _ in range(3):
        env.step(bot.replan())
    with pytest.raises(BotStuck, match=f"more than {BOT_PLAN_LIMIT} times"):
        bot.replan(None)
    for memory in (0, 2):
        episodes, result, stats = labelled_rollouts(random_act(1), LEVEL, [dagger_reset_seed(6, i) for i in range(3)],
                                                    context=2, bot_memory=memory)
        assert stats["bot_errors"] == sum(result.lengths >= 4)  # every episode that got that far
        assert all(len(ep.labels) == min(3, n) for ep, n in zip(episodes, result.lengths))  # labels end there


def test_the_policy_sees_only_real_steps_at_the_start_of_an_episode():
    """Evaluation once padded every window to the context with fake steps the model attended to
    (training masks them): the window grows 1, 2, … up to the context, and holds the episode's own
    steps (BOS before the first action)."""
    seen = []

    def act(images, directions, missions, previous_actions):
        seen.append((images.shape[1], directions.shape[1], previous_actions.shape[1], int(previous_actions[0, 0])))
        return np.zeros(len(missions), dtype=np.int64)  # turn left: the episode runs to its step limit

    labelled_rollouts(act, LEVEL, [dagger_reset_seed(1, 0)], context=3, max_steps=5)
    assert [s[:3] for s in seen] == [(1, 1, 1), (2, 2, 2), (3, 3, 3), (3, 3, 3), (3, 3, 3)]
    assert seen[0][3] == BOS and seen[1][3] == BOS and seen[3][3] == 0
