"""BabyAI demonstrations: observation/mission/action alignment, determinism, Minari round trip, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from seqrl.data.babyai import OBS_DIM, build_babyai, collect_demos, load_babyai, pack_episodes, unpack_obs
from seqrl.data.offline import DatasetError
from seqrl.envs.babyai import BOS, BabyAIEpisode, demo_reset_seed, eval_reset_seed, make_babyai, resolve_level
from seqrl.envs.make import EnvError


def _synthetic(T: int, mission: str, a0: int) -> BabyAIEpisode:
    # step t's image is all (10 + t), direction t % 4, action (a0 + t) % 7: each value names its step
    images = np.stack([np.full((7, 7, 3), 10 + t, dtype=np.uint8) for t in range(T + 1)])
    return BabyAIEpisode(images=images, directions=np.arange(T + 1) % 4, mission=mission,
                         actions=(a0 + np.arange(T)) % 7, rewards=np.zeros(T, np.float32),
                         terminations=np.eye(T, dtype=bool)[-1], truncations=np.zeros(T, bool), reset_seed=0)


def test_packed_rows_align_image_direction_mission_and_previous_action():
    eps, missions = pack_episodes([_synthetic(4, "go to the red ball", 2), _synthetic(3, "pick up a key", 5),
                                   _synthetic(2, "go to the red ball", 0)])
    assert missions == ["go to the red ball", "pick up a key"]
    assert eps[1].observations.shape == (4, OBS_DIM)
    image, direction, mission, prev = unpack_obs(eps[1].observations)
    for t in range(4):
        assert (image[t] == 10 + t).all()
        assert direction[t] == t % 4
        assert mission[t] == 1
        assert prev[t] == (BOS if t == 0 else (5 + t - 1) % 7)  # a_{t-1}
    assert eps[1].actions.tolist() == [5, 6, 0]
    assert unpack_obs(eps[2].observations)[2].tolist() == [0, 0, 0]


def test_bot_demos_replay_exactly_from_their_reset_seed():
    # the stored action a_t applied to the environment at stored observation t gives stored observation t+1
    demos, failures = collect_demos("GoToRedBallGrey", 4, seed=3)
    assert len(demos) == 4 and sum(failures.values()) == 0
    env = make_babyai("GoToRedBallGrey")
    for i, d in enumerate(demos):
        assert d.reset_seed == demo_reset_seed(3, i) < 2**31 <= eval_reset_seed(3, i)
        obs, _ = env.reset(seed=d.reset_seed)
        assert obs["mission"] == d.mission == "go to the red ball"
        assert np.array_equal(obs["image"], d.images[0])
        for t, a in enumerate(d.actions):
            obs, r, term, trunc, _ = env.step(int(a))
            assert np.array_equal(obs["image"], d.images[t + 1]) and obs["direction"] == d.directions[t + 1]
            assert r == pytest.approx(d.rewards[t]) and term == d.terminations[t]
        assert d.success


def test_dataset_is_deterministic_per_seed_and_round_trips_through_minari(tmp_path):
    p1, s1 = build_babyai("GoToRedBallGrey", 12, seed=1, out=tmp_path / "a")
    p2, _ = build_babyai("GoToRedBallGrey", 12, seed=1, out=tmp_path / "b")
    p3, _ = build_babyai("GoToRedBallGrey", 12, seed=2, out=tmp_path / "c")
    assert s1["episodes"] == 12 and s1["dataset"] == "seqrl/babyai/GoToRedBallGrey-n12-s1-v0"
    a, b, c = load_babyai(p1), load_babyai(p2), load_babyai(p3)
    assert a.env_id == "BabyAI-GoToRedBallGrey-v0" and a.discrete and a.action_dim == 7
    assert all(np.array_equal(x.observations, y.observations) and np.array_equal(x.actions, y.actions)
               for x, y in zip(a.episodes, b.episodes))
    assert any(not np.array_equal(x.observations[0], y.observations[0]) for x, y in zip(a.episodes, c.episodes))
    # what was stored is what the bot did
    demos, _ = collect_demos("GoToRedBallGrey", 12, seed=1)
    packed, missions = pack_episodes(demos)
    assert missions == a.metadata["missions"]
    assert all(np.array_equal(x.observations, y.observations) for x, y in zip(packed, a.episodes))
    with pytest.raises(DatasetError, match="already exists"):
        build_babyai("GoToRedBallGrey", 12, seed=1, out=tmp_path / "a")


def test_packed_arrays_load_what_minari_loads_and_stale_ones_are_ignored(tmp_path):
    import json
    import shutil

    from seqrl.data.babyai import PACKED, read_packed

    path, _ = build_babyai("GoToLocal", 9, seed=2, out=tmp_path)
    assert (path / PACKED / "index.json").is_file()
    fast = load_babyai(path)
    shutil.rmtree(path / PACKED)
    slow = load_babyai(path)  # from the HDF5 file; writes the arrays again
    assert (path / PACKED / "index.json").is_file()
    assert fast.metadata["missions"] == slow.metadata["missions"] and len(fast.episodes) == 9
    for x, y in zip(fast.episodes, slow.episodes):
        for field in ("observations", "actions", "rewards", "terminations", "truncations"):
            assert np.array_equal(getattr(x, field), getattr(y, field)), field
    index = json.loads((path / PACKED / "index.json").read_text())
    (path / PACKED / "index.json").write_text(json.dumps({**index, "hdf5_sha256": "0" * 64}))
    assert read_packed(path) is None  # arrays of another HDF5 file are never used
    np.save(path / PACKED / "actions.npy", np.zeros(3, dtype=np.int64))
    (path / PACKED / "index.json").write_text(json.dumps(index))
    assert read_packed(path) is None  # truncated arrays: shapes checked
    again = load_babyai(path)
    assert all(np.array_equal(x.actions, y.actions) for x, y in zip(again.episodes, slow.episodes))


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_parallel_build_is_byte_identical_to_one_worker(tmp_path):
    # GoToLocal: 36 missions, varied lengths; 3 workers get chunks of a few indices each, out of order
    _, s1 = build_babyai("GoToLocal", 14, seed=5, out=tmp_path / "w1")
    _, s3 = build_babyai("GoToLocal", 14, seed=5, out=tmp_path / "w3", workers=3)
    one, three = _files(tmp_path / "w1"), _files(tmp_path / "w3")
    assert any(k.endswith("main_data.hdf5") for k in one) and one.keys() == three.keys()
    assert all(one[k] == three[k] for k in one)
    assert (s1["workers"], s3["workers"]) == (1, 3) and s1["steps"] == s3["steps"]
    _, s2 = build_babyai("GoToLocal", 14, seed=6, out=tmp_path / "other", workers=2)  # the seed still matters
    assert _files(tmp_path / "other") != one


def test_parallel_collection_skips_failures_in_index_order(monkeypatch):
    # the workers are spawned processes, so a monkeypatched bot_episode would not reach them; instead
    # check the merge directly: a chunk runner that fails every third index, in-process
    import seqrl.data.babyai as mod

    demos, _ = mod.collect_demos("GoToRedBallGrey", 12, seed=0)
    by_seed = {d.reset_seed: d for d in demos}

    def chunk(env_id, seed, start, stop):
        return start, [(None, "bot raised AssertionError") if i % 3 == 0 else (by_seed.get(demo_reset_seed(seed, i)), "")
                       for i in range(start, stop)]

    class InlinePool:  # ProcessPoolExecutor's surface, run in this process
        def __init__(self, *a, **k): ...
        def __enter__(self): return self
        def __exit__(self, *a): return False
        def submit(self, fn, *args):
            from concurrent.futures import Future
            f = Future()
            f.set_result(fn(*args))
            return f
        def shutdown(self, **k): ...

    import concurrent.futures as cf
    import seqrl.data.babyai_workers as workers

    monkeypatch.setattr(workers, "attempt_chunk", chunk)
    monkeypatch.setattr(cf, "ProcessPoolExecutor", InlinePool)
    got, failures = mod.collect_demos("GoToRedBallGrey", 6, seed=0, workers=4)
    # indices 1, 2, 4, 5, 7, 8 succeed; failures counted only up to the 6th success (0, 3, 6)
    assert [d.reset_seed for d in got] == [demo_reset_seed(0, i) for i in (1, 2, 4, 5, 7, 8)]
    assert failures == {"bot raised AssertionError": 3}
    with pytest.raises(DatasetError, match="workers must be"):
        mod.collect_demos("GoToRedBallGrey", 6, workers=0)


def test_bot_failures_are_counted_not_stored(monkeypatch):
    import seqrl.data.babyai as mod

    real = mod.bot_episode
    calls = []

    def flaky(env, seed):
        calls.append(seed)
        return (None, "bot raised AssertionError") if len(calls) % 2 else real(env, seed)

    monkeypatch.setattr(mod, "bot_episode", flaky)
    demos, failures = mod.collect_demos("GoToRedBallGrey", 3, seed=0)
    assert len(demos) == 3 and failures == {"bot raised AssertionError": 3}
    assert [d.reset_seed for d in demos] == [demo_reset_seed(0, i) for i in (1, 3, 5)]


def test_bad_inputs_are_named(tmp_path):
    with pytest.raises(EnvError, match="NoSuchLevel"):
        resolve_level("NoSuchLevel")
    with pytest.raises(DatasetError, match="episodes must be >= 1"):
        collect_demos("GoToRedBallGrey", 0)
    with pytest.raises(DatasetError, match="seqrl data babyai"):
        load_babyai(str(tmp_path / "missing"))


def test_cli_data_babyai_builds_and_refuses_bad_flags(tmp_path, capsys):
    import json

    from seqrl.cli import main

    assert main(["data", "babyai", "GoToRedBallGrey", "--episodes", "3", "--seed", "4", "--out", str(tmp_path)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["episodes"] == 3 and summary["bot_failures"] == 0
    assert len(load_babyai(summary["path"]).episodes) == 3
    assert main(["data", "babyai", "GoToRedBallGrey", "--episodes", "0", "--out", str(tmp_path)]) == 2
    assert main(["data", "babyai", "GoToRedBallGrey", "--steps", "10", "--out", str(tmp_path)]) == 2
    assert main(["data", "babyai", "GoToRedBallGrey", "--workers", "0", "--out", str(tmp_path)]) == 2
    assert main(["data", "minari", "pendulum", "medium", "--episodes", "3", "--out", str(tmp_path)]) == 2
    assert "--episodes must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("level", ["GoToLocal", "PickupLoc", "PutNextLocal"])
def test_the_bot_solves_the_issue_levels(level):
    demos, failures = collect_demos(level, 3, seed=0)
    assert len(demos) == 3 and all(d.success for d in demos)
    assert sum(failures.values()) <= 1
