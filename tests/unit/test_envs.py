"""make_env errors, deterministic rollouts, reference scores (seqrl.envs)."""

import gymnasium as gym
import numpy as np
import pytest

from seqrl.envs import EnvError, collect_episodes, env_extra, make_env, uniform_policy
from seqrl.envs import make as make_module
from seqrl.envs.reference import D4RL_REFERENCE, d4rl_normalized_score


def test_unknown_id_names_it():
    with pytest.raises(EnvError, match=r"'Hoppr-v5'.*no such id.*Did you mean: `Hopper`"):
        make_env("Hoppr-v5")
    with pytest.raises(EnvError, match=r"'Hopper-v99'.*no such id.*v5"):
        make_env("Hopper-v99")
    with pytest.raises(EnvError, match="non-empty string"):
        make_env("")


def test_missing_extra_says_what_to_install(monkeypatch):
    def broken_make(env_id, **kwargs):
        raise gym.error.DependencyNotInstalled("MuJoCo is not installed, run `pip install gymnasium[mujoco]`")

    monkeypatch.setattr(make_module.gym, "make", broken_make)
    with pytest.raises(EnvError) as info:
        make_env("Hopper-v5")
    assert str(info.value).startswith("environment 'Hopper-v5' needs gymnasium[mujoco]: pip install 'seqrl[control]'")


def test_namespace_without_package_says_what_to_install():
    with pytest.raises(EnvError, match=r"'ALE/Pong-v5' needs gymnasium\[atari\]"):
        make_env("ALE/Pong-v5")


def test_env_extra():
    assert env_extra("Walker2d-v5")[0] == "gymnasium[mujoco]"
    assert env_extra("CartPole-v1") is None
    assert env_extra("MiniGrid-Empty-5x5-v0") == ("minigrid", "'seqrl[vla]'")


def test_make_env_seed_fixes_reset():
    a, b = make_env("Pendulum-v1", seed=3), make_env("Pendulum-v1", seed=3)
    np.testing.assert_array_equal(a.reset()[0], b.reset()[0])


def _uniform(env_id):
    return uniform_policy(make_env(env_id).action_space)


def test_rollouts_are_pure_functions_of_seed_and_index():
    pol = _uniform("Hopper-v5")
    one = collect_episodes("Hopper-v5", pol, n_episodes=6, seed=5, n_parallel=1)
    many = collect_episodes("Hopper-v5", pol, n_episodes=6, seed=5, n_parallel=4)
    assert [e.id for e in one] == list(range(6))
    for a, b in zip(one, many):  # which episodes run beside one another does not matter
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)
    other = collect_episodes("Hopper-v5", pol, n_episodes=1, seed=6)
    assert not np.array_equal(other[0].observations[0], one[0].observations[0])


def test_rollout_layout_and_step_budget():
    eps = collect_episodes("Hopper-v5", _uniform("Hopper-v5"), n_steps=300, seed=0, n_parallel=8)
    total = sum(len(e) for e in eps)
    assert total >= 300 and total - len(eps[-1]) < 300  # the fewest whole episodes reaching 300
    for e in eps:
        e.validate()
        assert e.observations.shape == (len(e) + 1, 11) and e.actions.shape == (len(e), 3)
        assert e.terminations[-1] or e.truncations[-1]
        assert not (e.terminations[:-1] | e.truncations[:-1]).any()
        assert e.actions.min() >= -1 and e.actions.max() <= 1
    with pytest.raises(ValueError, match="exactly one"):
        collect_episodes("Hopper-v5", _uniform("Hopper-v5"), seed=0)


def test_d4rl_normalised_score():
    lo, hi = D4RL_REFERENCE["Walker2d"]
    assert d4rl_normalized_score("Walker2d-v5", lo) == 0.0
    assert d4rl_normalized_score("Walker2d-v5", (lo + hi) / 2) == pytest.approx(50.0, abs=1e-12)
    with pytest.raises(ValueError, match="Pendulum-v1: D4RL has no reference"):
        d4rl_normalized_score("Pendulum-v1", 0.0)
