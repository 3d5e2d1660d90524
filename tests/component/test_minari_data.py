"""Minari datasets: build → write → minari.load_dataset → load_offline round trip, determinism,
reference scores, clear errors. Every test uses a temporary MINARI_DATASETS_PATH and no network."""

import json
import socket
import time

import gymnasium as gym
import minari
import numpy as np
import pytest
from minari.data_collector import EpisodeBuffer

from seqrl.cli import main
from seqrl.data.minari_data import (
    build_dataset,
    build_episodes,
    dataset_id,
    load_offline,
    quick_dataset,
    write_minari,
)
from seqrl.data.offline import DatasetError, Episode
from seqrl.envs.reference import reference_returns


@pytest.fixture(autouse=True)
def local_only(tmp_path, monkeypatch):
    """Datasets go to a temporary folder, and any DNS lookup fails the test (remote Minari hangs here)."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))

    def no_network(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args[:2]}")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)


def _assert_same(a: list[Episode], b: list[Episode]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.id == y.id
        for name in ("observations", "actions", "rewards", "terminations", "truncations"):
            u, v = getattr(x, name), getattr(y, name)
            assert u.dtype == v.dtype and u.shape == v.shape, name
            np.testing.assert_array_equal(u, v, err_msg=f"episode {x.id} {name}")


def test_round_trip_through_minari(tmp_path):
    episodes = build_episodes("pendulum", "medium-replay", 800, seed=1)
    path = build_dataset("pendulum", "medium-replay", n_steps=800, seed=1)
    assert path == tmp_path / "datasets" / "seqrl/pendulum/medium-replay-v0"

    mds = minari.load_dataset("seqrl/pendulum/medium-replay-v0")  # Minari itself finds it
    assert mds.total_episodes == len(episodes) == 4 and mds.total_steps == 800
    assert mds.spec.env_spec.id == "Pendulum-v1"
    assert mds.observation_space == gym.spaces.Box(-8.0, 8.0, (3,)) or mds.observation_space.shape == (3,)
    assert mds.action_space.shape == (1,)

    ds = load_offline("seqrl/pendulum/medium-replay-v0")
    _assert_same(ds.episodes, episodes)
    for ep in ds.episodes:  # Minari's layout: T+1 observations, T of everything else
        assert ep.observations.shape == (len(ep) + 1, 3) and ep.actions.shape == (len(ep), 1)
    assert ds.env_id == "Pendulum-v1" and not ds.discrete and ds.action_dim == 1
    np.testing.assert_array_equal(ds.action_low, [-2.0])
    np.testing.assert_array_equal(ds.action_high, [2.0])
    # the same dataset by folder, and by its data/ folder
    _assert_same(load_offline(path).episodes, episodes)
    _assert_same(load_offline(path / "data").episodes, episodes)
    # Minari's default format, as hub datasets use; its arrow storage re-measures the whole folder after
    # every episode (quadratic: hopper-random's 9k episodes had not finished after 17 min; hdf5: 280 s)
    assert (path / "data" / "main_data.hdf5").is_file()


def test_arrow_datasets_load_too(tmp_path):
    # datasets written in Minari's arrow format (seqrl's before 2026-12-03, or anyone's) load the same way
    episodes = build_episodes("pendulum", "medium", 400, seed=2)
    buffers = [EpisodeBuffer(id=ep.id, observations=ep.observations, actions=ep.actions,
                             rewards=ep.rewards.astype(np.float64), terminations=ep.terminations,
                             truncations=ep.truncations, infos={}) for ep in episodes]
    minari.create_dataset_from_buffers("other/pendulum/arrow-v0", buffers, env="Pendulum-v1", author="x",
                                       algorithm_name="x", data_format="arrow")
    ds = load_offline("other/pendulum/arrow-v0")
    _assert_same(ds.episodes, episodes)
    assert not (tmp_path / "datasets" / "other/pendulum/arrow-v0" / "data" / "main_data.hdf5").exists()


def test_reference_scores_match_minari():
    build_dataset("pendulum", "medium", n_steps=400, seed=0)
    mds = minari.load_dataset("seqrl/pendulum/medium-v0")
    ds = load_offline("seqrl/pendulum/medium-v0")
    r_min, r_max = reference_returns("Pendulum-v1")
    assert (ds.ref_min_score, ds.ref_max_score) == (r_min, r_max)
    assert r_min < -1000 < r_max  # random is far below the expert on Pendulum
    returns = ds.returns
    np.testing.assert_allclose(100 * minari.get_normalized_score(mds, returns), ds.normalized(returns), rtol=1e-12)
    assert ds.normalized(r_min) == 0.0 and ds.normalized(r_max) == pytest.approx(100.0)


def test_same_seed_same_dataset_other_seed_other_dataset():
    a = build_episodes("pendulum", "medium-expert", 800, seed=3)
    b = build_episodes("Pendulum-v1", "medium-expert", 800, seed=3)
    _assert_same(a, b)
    c = build_episodes("pendulum", "medium-expert", 800, seed=4)
    assert not np.array_equal(a[0].observations, c[0].observations)


def test_mujoco_dataset_is_deterministic_and_mixed():
    a = build_episodes("hopper", "medium-replay", 2000, seed=0)
    _assert_same(a, build_episodes("hopper", "medium-replay", 2000, seed=0))
    assert 2000 <= sum(len(e) for e in a) < 3000
    r = np.array([e.ret for e in a])
    assert r.min() < 100 and r.max() > 500  # from the untrained snapshot up to medium
    assert all(e.actions.shape[1] == 3 and np.abs(e.actions).max() <= 1 for e in a)


def test_levels_are_ordered_by_return():
    mean = {lvl: np.mean([e.ret for e in build_episodes("pendulum", lvl, 2000, seed=0)])
            for lvl in ("random", "medium", "expert")}
    assert mean["random"] < mean["medium"] < mean["expert"]


def test_quick_dataset_is_fast_and_mixed():
    t0 = time.perf_counter()
    ds = quick_dataset(n_steps=4000, seed=0)
    elapsed = time.perf_counter() - t0
    assert elapsed < 20  # "seconds" on a loaded 2-core machine (≈ 1 s unloaded)
    assert len(ds.episodes) == 20 and ds.n_steps == 4000 and ds.env_id == "Pendulum-v1"
    r = ds.returns
    assert r.max() - r.min() > 300  # mixed quality: return conditioning has something to separate


def test_existing_dataset_needs_force():
    build_dataset("pendulum", "random", n_steps=200)
    with pytest.raises(DatasetError, match="already exists.*--force"):
        build_dataset("pendulum", "random", n_steps=200)
    build_dataset("pendulum", "random", n_steps=400, force=True)
    assert minari.load_dataset("seqrl/pendulum/random-v0").total_steps == 400


def test_missing_local_dataset_says_how_to_get_it():
    with pytest.raises(DatasetError, match=r"'seqrl/hopper/medium-v0' is not in the local .*seqrl data minari hopper medium"):
        load_offline("seqrl/hopper/medium-v0")
    with pytest.raises(DatasetError, match=r"minari download mujoco/hopper/medium-v0"):
        load_offline("mujoco/hopper/medium-v0")


def test_unknown_env_and_level():
    with pytest.raises(DatasetError, match="'cartpole': no kept behaviour policies.*hopper"):
        dataset_id("cartpole", "medium")
    with pytest.raises(DatasetError, match="level 'meduim': choose one of random, medium"):
        build_episodes("hopper", "meduim", 100)


def _write_raw(tmp_path, name, buffers, obs_space, act_space):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINARI_DATASETS_PATH", str(tmp_path / "raw"))
        minari.create_dataset_from_buffers(name, buffers, observation_space=obs_space, action_space=act_space,
                                           data_format="arrow")
    return tmp_path / "raw" / name


def _buffer(i, T, obs_dim=3, rewards=None, n_obs=None):
    rng = np.random.default_rng(i)
    return EpisodeBuffer(id=i, observations=rng.normal(size=((n_obs or T + 1), obs_dim)).astype(np.float32),
                         actions=rng.uniform(-1, 1, size=(T, 1)).astype(np.float32),
                         rewards=rewards if rewards is not None else rng.normal(size=T),
                         terminations=np.zeros(T, bool), truncations=np.r_[np.zeros(T - 1, bool), True], infos={})


BOX3, BOX1 = gym.spaces.Box(-np.inf, np.inf, (3,)), gym.spaces.Box(-1.0, 1.0, (1,))


def test_nan_reward_names_the_episode(tmp_path):
    bad = _buffer(1, 5, rewards=np.array([0.0, 1.0, np.nan, 0.0, 0.0]))
    path = _write_raw(tmp_path, "test/nan-v0", [_buffer(0, 4), bad], BOX3, BOX1)
    with pytest.raises(DatasetError, match=r"episode 1: rewards has a NaN or infinite value at step 2"):
        load_offline(path)


def test_mismatched_lengths_name_the_episode(tmp_path):
    bad = _buffer(1, 5, n_obs=5)  # 5 observations for 5 rewards (T+1 = 6 expected)
    path = _write_raw(tmp_path, "test/short-v0", [_buffer(0, 4), bad], BOX3, BOX1)
    with pytest.raises(DatasetError, match=r"episode 1: was written with 5 steps but 4 were read"):
        load_offline(path)


def test_episode_validation_names_mismatched_arrays():
    ep = Episode(np.zeros((5, 3), np.float32), np.zeros((5, 1), np.float32), np.zeros(5, np.float32),
                 np.zeros(5, bool), np.zeros(5, bool), id=9)
    with pytest.raises(DatasetError, match=r"episode 9: observations must have T\+1 = 6 rows for 5 rewards"):
        write_minari("test/short-v0", [ep], "Pendulum-v1")


def test_write_refuses_a_bad_episode(tmp_path):
    good = Episode(np.zeros((3, 2), np.float32), np.zeros((2, 1), np.float32), np.zeros(2, np.float32),
                   np.zeros(2, bool), np.array([False, True]), id=0)
    bad = Episode(np.zeros((3, 2), np.float32), np.zeros((2, 1), np.float32), np.array([0, np.inf], np.float32),
                  np.zeros(2, bool), np.array([False, True]), id=7)
    with pytest.raises(DatasetError, match="episode 7: rewards"):
        write_minari("test/bad-v0", [good, bad], "Pendulum-v1", root=tmp_path / "w")
    assert not (tmp_path / "w" / "test/bad-v0").exists()


def test_dict_observations_and_discrete_actions(tmp_path):
    obs_space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)), "mode": gym.spaces.Discrete(3)})
    act_space = gym.spaces.Discrete(4)
    T = 3
    buf = EpisodeBuffer(id=0, observations={"mode": np.array([0, 2, 1, 2]),
                                            "pos": np.arange(8, dtype=np.float32).reshape(4, 2) / 10},
                        actions=np.array([3, 0, 1]), rewards=np.ones(T), terminations=np.r_[False, False, True],
                        truncations=np.zeros(T, bool), infos={})
    ds = load_offline(_write_raw(tmp_path, "test/dict-v0", [buf], obs_space, act_space))
    ep = ds.episodes[0]
    assert ds.discrete and ds.action_dim == 4 and ds.action_low is None
    np.testing.assert_array_equal(ep.actions, [3, 0, 1])
    assert ep.actions.dtype == np.int64
    # flattened in the Dict's key order (mode one-hot, then pos), as gymnasium.spaces.flatten does
    expected = np.stack([gym.spaces.flatten(obs_space, {"mode": m, "pos": p})
                         for m, p in zip([0, 2, 1, 2], np.arange(8, dtype=np.float32).reshape(4, 2) / 10)])
    np.testing.assert_allclose(ep.observations, expected)
    assert ds.ref_min_score is None
    with pytest.raises(DatasetError, match="no ref_min_score"):
        ds.normalized(1.0)


def test_cli_builds_and_reports(tmp_path, capsys):
    assert main(["data", "minari", "pendulum", "expert", "--steps", "400", "--out", str(tmp_path / "cli")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["episodes"] == 2 and summary["steps"] == 400 and summary["env_id"] == "Pendulum-v1"
    assert summary["normalized_mean"] > 50  # the expert is well above random
    assert (tmp_path / "cli" / "seqrl/pendulum/expert-v0" / "data").is_dir()
    assert main(["data", "minari", "cartpole", "medium"]) == 2
    assert "no kept behaviour policies" in capsys.readouterr().err


def test_mujoco_dataset_writes_in_the_space_dtypes_and_loads_back(tmp_path):
    """Hopper-v5 observes float64: Minari's arrow storage refuses float32 arrays for that space."""
    path = build_dataset("hopper", "random", n_steps=120, seed=0)
    ds = load_offline(path)
    want = build_episodes("hopper", "random", 120, seed=0)
    assert len(ds.episodes) == len(want) and ds.env_id == "Hopper-v5"
    for a, b in zip(ds.episodes, want):
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
    raw = minari.load_dataset("seqrl/hopper/random-v0")
    assert next(raw.iterate_episodes()).observations.dtype == np.float64
