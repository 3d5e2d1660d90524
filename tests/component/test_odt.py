"""Online Decision Transformer: replay buffer, online rollouts, hindsight relabelling, training plumbing
(checkpoints with the buffer, exact resume across the online phase), CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from seqrl.data.offline import DatasetError, Episode, OfflineDataset
from seqrl.utils.checkpoint import CheckpointError


def _episode(rewards, ep_id=0, obs_dim=2, action_value=None, terminated=False) -> Episode:
    T = len(rewards)
    r = np.asarray(rewards, np.float32)
    acts = (r if action_value is None else np.full(T, action_value, np.float32)).reshape(T, 1)
    obs = np.stack([np.full(obs_dim, t, np.float32) for t in range(T + 1)])
    term = np.zeros(T, bool)
    term[-1] = terminated
    trunc = ~term & (np.arange(T) == T - 1)
    return Episode(observations=obs, actions=acts, rewards=r, terminations=term, truncations=trunc, id=ep_id)


def _cfg(tmp_path, name, **kw):
    from seqrl.algos.config import OptimConfig, RunConfig
    from seqrl.data.minari_data import DataConfig
    from seqrl.algos.odt import ODTConfig, ODTEvalConfig, ODTModelConfig, OnlineConfig

    base = dict(
        run=RunConfig(name=name, out_dir=str(tmp_path), seed=3, log_every=1, progress=False),
        data=DataConfig(dataset="drift"),
        model=ODTModelConfig(hidden_size=16, n_layer=1, n_head=1, context_len=3, max_ep_len=16, dropout=0.1),
        optim=OptimConfig(lr=1e-3, weight_decay=5e-4, warmup_steps=2, schedule="constant", grad_clip=0.25),
        eval=ODTEvalConfig(episodes=2, target_returns=[6.0], every=2),
        online=OnlineConfig(iterations=4, rollouts=2, updates=3, target_return=8.0, buffer_size=20),
        return_scale=10.0, pretrain_steps=4, batch_size=8,
    )
    base.update(kw)
    return ODTConfig(**base)


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), k


# --------------------------------------------------------------------------------------------------
# replay buffer


def test_buffer_keeps_the_best_offline_trajectories_lowest_first_then_evicts_fifo():
    from seqrl.algos.odt import ReplayBuffer

    offline = [_episode([r], ep_id=i) for i, r in enumerate([5.0, 1.0, 9.0, 3.0, 7.0])]
    buf = ReplayBuffer(3, offline)
    assert [e.id for e in buf.episodes] == [0, 4, 2]  # the best 3 (returns 5, 7, 9), lowest return first
    assert buf.online == [False] * 3
    buf.add([_episode([0.5], ep_id=100)])
    assert [e.id for e in buf.episodes] == [4, 2, 100]  # the lowest offline one left first
    buf.add([_episode([0.1], ep_id=101), _episode([0.2], ep_id=102)])
    assert [e.id for e in buf.episodes] == [100, 101, 102] and buf.online == [True] * 3
    buf.add([_episode([0.3], ep_id=103)])
    assert [e.id for e in buf.episodes] == [101, 102, 103]  # then first in, first out
    s = buf.stats()
    assert s["buffer/size"] == 3 and s["buffer/online"] == 3 and s["buffer/return_max"] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        ReplayBuffer(0)
    bad = _episode([1.0, 2.0], ep_id=7)
    bad.rewards[0] = np.nan
    with pytest.raises(DatasetError, match="episode 7"):
        buf.add([bad])
    assert [e.id for e in buf.episodes] == [101, 102, 103]  # a bad trajectory changes nothing


def test_buffer_windows_relabel_returns_to_go_from_stored_rewards(drift):
    """Hindsight relabelling: an online trajectory rolled out for some target trains on what it achieved."""
    from seqrl.algos.odt import ReplayBuffer

    buf = ReplayBuffer(4)
    buf.add([_episode([1.0, 2.0, 3.0, 4.0], ep_id=0), _episode([-1.0, -1.0], ep_id=1)])
    data = buf.trajectories(drift.dataset(4), max_ep_len=16)
    b = data.batch(step=0, batch_size=64, K=3, seed=0)
    for row in range(64):
        m = b["mask"][row].bool()
        t = b["timesteps"][row, m].tolist()
        s0 = b["states"][row, m, 0].tolist()  # state value = t in `_episode`
        assert s0 == [float(x) for x in t]
        rew = [1.0, 2.0, 3.0, 4.0] if b["actions"][row, m, 0][0] > 0 else [-1.0, -1.0]
        assert b["returns"][row, m].tolist() == [sum(rew[x:]) for x in t]
    # data.windows reaches the buffer's windows: "cover" puts step 0 at the end of some 1-step windows
    cover = buf.trajectories(drift.dataset(4), max_ep_len=16, windows="cover").batch(step=0, batch_size=64, K=3, seed=0)
    assert bool(((cover["mask"].sum(1) == 1) & (cover["timesteps"][:, -1] == 0)).any())
    assert not bool(((b["mask"].sum(1) == 1) & (b["timesteps"][:, -1] == 0)).any())


def test_buffer_save_and_load_round_trip_is_exact_and_a_broken_file_is_named(tmp_path, drift):
    from seqrl.algos.odt import REPLAY_FILE, ReplayBuffer

    buf = ReplayBuffer(5, drift.dataset(3).episodes)
    buf.add([_episode([0.25, -0.5, 1.5], ep_id=42, terminated=True)])
    buf.save_pretrained(tmp_path)
    again = ReplayBuffer.load(tmp_path)
    assert again.capacity == 5 and again.online == buf.online and len(again) == 4
    for a, b in zip(buf.episodes, again.episodes):
        assert a.id == b.id
        for f in ("observations", "actions", "rewards", "terminations", "truncations"):
            x, y = getattr(a, f), getattr(b, f)
            assert x.dtype == y.dtype and np.array_equal(x, y), f
    with pytest.raises(CheckpointError, match="replay buffer not found"):
        ReplayBuffer.load(tmp_path / "empty")
    (tmp_path / REPLAY_FILE).write_bytes(b"\x00" * 64)
    with pytest.raises(CheckpointError, match=f"{REPLAY_FILE}: cannot read the replay buffer"):
        ReplayBuffer.load(tmp_path)


# --------------------------------------------------------------------------------------------------
# rollouts


def _policy(seed=0, **kw):
    from seqrl.models.odt import OnlineDecisionTransformer

    torch.manual_seed(seed)
    kw = {"hidden_size": 16, "n_layer": 1, "n_head": 1, "context_len": 3, "max_ep_len": 16, "action_low": [-1.0],
          "action_high": [1.0], **kw}
    return OnlineDecisionTransformer(2, 1, **kw)


def test_rollouts_sample_actions_record_episodes_and_restore_the_mode(drift):
    from seqrl.algos.odt import collect_rollouts
    from seqrl.envs.evaluate import evaluate_policy

    policy = _policy()
    policy.train()
    torch.manual_seed(1)
    eps = collect_rollouts(policy, drift.env_id, 5.0, n=3, seed=0, first_index=10)
    assert policy.training and not policy.explore  # mode and sampling switch restored
    assert [e.id for e in eps] == [10, 11, 12] and all(len(e) == drift.H for e in eps)
    for e in eps:
        e.validate()
        assert e.truncations[-1] and not e.terminations.any()
        assert np.allclose(e.rewards, e.actions[:, 0])  # DriftEnv: reward = action
        assert np.allclose(np.diff(e.observations[:, 1]), e.actions[:, 0], atol=1e-6)
        assert (np.abs(e.actions) <= 1).all()
    # sampled: the same start states give different action sequences per draw; the mean action is fixed
    torch.manual_seed(1)
    again = collect_rollouts(policy, drift.env_id, 5.0, n=3, seed=0, first_index=10)
    assert all(np.array_equal(a.actions, b.actions) for a, b in zip(eps, again))  # the global RNG decides
    torch.manual_seed(2)
    other = collect_rollouts(policy, drift.env_id, 5.0, n=3, seed=0, first_index=10)
    assert not np.array_equal(eps[0].actions, other[0].actions)
    assert np.array_equal(eps[0].observations[0], other[0].observations[0])  # same reset seed
    mean_returns = [evaluate_policy(policy, drift.env_id, [5.0], episodes=1, seed=0).returns[0, 0] for _ in range(2)]
    assert mean_returns[0] == mean_returns[1]
    # a step cap truncates
    short = collect_rollouts(policy, drift.env_id, 5.0, n=2, seed=0, first_index=0, max_steps=3)
    assert [len(e) for e in short] == [3, 3] and all(e.truncations[-1] for e in short)


# --------------------------------------------------------------------------------------------------
# training plumbing


def test_train_logs_offline_then_online_writes_plots_and_a_loadable_checkpoint(tmp_path, drift):
    from seqrl.models.loading import load_policy_checkpoint
    from seqrl.algos.odt import ReplayBuffer, train
    from seqrl.models.odt import OnlineDecisionTransformer
    from seqrl.utils.checkpoint import latest_checkpoint
    from seqrl.utils.metrics import read_metrics

    final = train(_cfg(tmp_path, "run"), drift.dataset())
    for key in ("offline/eval/return/6", "eval/return/6", "eval/normalized/6", "online/return", "online/normalized",
                "buffer/size", "loss/action", "stats/entropy", "stats/temperature", "perf/rollout_s"):
        assert key in final, key
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert records[0]["step"] == 0 and records[0]["data/episodes"] == 48 and records[0]["buffer/size"] == 20
    steps = [r["step"] for r in records if "online/return" in r]
    assert steps == [4 + 3 * i for i in range(1, 5)]  # one record per iteration: pretrain 4, then 3 updates each
    assert [r["buffer/online"] for r in records if "online/return" in r] == [2, 4, 6, 8]
    assert (tmp_path / "run" / "plots" / "odt.png").is_file()
    assert (tmp_path / "run" / "plots" / "offline_online.png").is_file()
    ckpt = latest_checkpoint(tmp_path / "run")
    assert ckpt.name == "checkpoint-16"
    policy, info = load_policy_checkpoint(ckpt)
    assert isinstance(policy, OnlineDecisionTransformer) and info["method"] == "odt" and info["env_id"] == drift.env_id
    buf = ReplayBuffer.load(ckpt)
    assert len(buf) == 20 and sum(buf.online) == 8 and [e.id for e in buf.episodes][-8:] == list(range(8))


def test_temperature_falls_while_the_entropy_is_above_its_target(tmp_path, drift):
    from seqrl.algos.odt import train
    from seqrl.utils.metrics import read_metrics

    cfg = _cfg(tmp_path, "alpha", temperature_lr=0.05)
    cfg.online.iterations, cfg.eval.episodes = 0, 0
    train(cfg, drift.dataset())
    rows = [r for r in read_metrics(tmp_path / "alpha" / "metrics.jsonl") if "stats/temperature" in r]
    h = [r["stats/entropy"] for r in rows]
    alpha = [r["stats/temperature"] for r in rows]
    beta = read_metrics(tmp_path / "alpha" / "metrics.jsonl")[0]["stats/target_entropy"]
    assert all(x > beta for x in h)  # a fresh head: σ ≈ e^−1.5, far more entropy than −|A| = −1
    assert all(b < a for a, b in zip(alpha, alpha[1:])) and alpha[-1] < 0.1


@pytest.mark.parametrize("optimizer", ["lamb", "adamw"])
def test_resume_in_the_online_phase_equals_an_uninterrupted_run(tmp_path, monkeypatch, optimizer, drift):
    import seqrl.algos.odt as odt
    from seqrl.models.loading import load_policy_checkpoint
    from seqrl.utils.checkpoint import latest_checkpoint
    from seqrl.utils.metrics import read_metrics

    ds = drift.dataset()

    def cfg(name):
        c = _cfg(tmp_path, name, optimizer=optimizer)
        c.run.save_every = 6
        return c

    odt.train(cfg("full"), ds)

    real, calls = odt.collect_rollouts, {"n": 0}

    def interrupt_at_third_iteration(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    cut = cfg("cut")
    monkeypatch.setattr(odt, "collect_rollouts", interrupt_at_third_iteration)
    with pytest.raises(KeyboardInterrupt):
        odt.train(cut, ds)
    monkeypatch.undo()
    # saved: 4 (end of pre-training) and 7 (iteration 1 crosses 6); iteration 2 ended at 10, no save
    assert latest_checkpoint(tmp_path / "cut").name == "checkpoint-7"
    cut.run.resume = True
    odt.train(cut, ds)
    a, _ = load_policy_checkpoint(tmp_path / "full" / "checkpoint-16")
    b, _ = load_policy_checkpoint(tmp_path / "cut" / "checkpoint-16")
    _same_weights(a, b)
    ba = odt.ReplayBuffer.load(tmp_path / "full" / "checkpoint-16")
    bb = odt.ReplayBuffer.load(tmp_path / "cut" / "checkpoint-16")
    assert all(np.array_equal(x.actions, y.actions) for x, y in zip(ba.episodes, bb.episodes))
    keys = ("loss/action", "stats/temperature", "online/return", "eval/return/6")
    rows = lambda run: [(r["step"], *(r.get(k) for k in keys)) for r in read_metrics(tmp_path / run / "metrics.jsonl")
                        if "loss/action" in r and r["step"] > 7]
    assert rows("full") == rows("cut") and len(rows("full")) == 9


def test_discrete_datasets_and_missing_environments_are_refused(tmp_path, drift):
    from seqrl.algos.odt import train

    T = 4
    ep = Episode(observations=np.zeros((T + 1, 2), np.float32), actions=np.zeros(T, np.int64),
                 rewards=np.ones(T, np.float32), terminations=np.arange(T) == T - 1, truncations=np.zeros(T, bool))
    disc = OfflineDataset([ep], env_id=drift.env_id, discrete=True, action_dim=3, name="grid")
    with pytest.raises(DatasetError, match="dataset grid: the Online DT needs continuous actions"):
        train(_cfg(tmp_path, "disc"), disc)
    ds = drift.dataset(4)
    ds.env_id = ""
    with pytest.raises(ValueError, match="names no environment"):
        train(_cfg(tmp_path, "noenv"), ds)


@pytest.mark.parametrize(
    "data, match",
    [
        ({"online": {"rollouts": 0}}, "online.rollouts must be >= 1"),
        ({"online": {"buffer_size": 0}}, "online.buffer_size must be >= 1"),
        ({"model": {"log_std_min": 3.0}}, "model.log_std_min must be < model.log_std_max"),
        ({"pretrain_steps": 0, "online": {"iterations": 0}}, "nothing to train"),
        ({"init_temperature": 0.0}, "init_temperature must be > 0"),
        ({"optimizer": "sgd"}, "optimizer"),
    ],
)
def test_config_errors_name_the_field(data, match):
    from seqrl.algos.odt import ODTConfig
    from seqrl.config import ConfigError, from_dict

    with pytest.raises(ConfigError, match=match):
        from_dict(ODTConfig, data, path="odt")


@pytest.mark.parametrize("path", sorted(__import__("importlib.resources").resources.files("seqrl").joinpath("configs/odt").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_odt_preset_loads(path):
    from seqrl.algos.odt import ODTConfig
    from seqrl.config import load_config

    cfg = load_config(ODTConfig, path, root="odt")
    assert cfg.run.name.startswith("odt_") and cfg.online.iterations > 0 and cfg.eval.target_returns


def test_cli_train_odt_then_eval_dt_on_its_checkpoint(tmp_path, capsys, drift):
    from seqrl.cli import main
    from seqrl.data.minari_data import write_minari

    path = write_minari("test/drift-v0", drift.dataset(16).episodes, drift.env_id, root=tmp_path / "minari",
                        ref_min_score=-float(drift.H), ref_max_score=float(drift.H), algorithm_name="levels",
                        description="constant-level episodes of the drift test env")
    args = ["train", "odt", "--config", "odt/pendulum_medium", f"--data.dataset={path}",
            f"--run.out_dir={tmp_path}", "--run.progress=false", "--pretrain_steps=3", "--batch_size=4",
            "--model.hidden_size=16", "--model.n_layer=1", "--model.context_len=3", "--model.max_ep_len=16",
            "--online.iterations=2", "--online.rollouts=1", "--online.updates=2", "--online.target_return=8",
            "--eval.episodes=1", "--eval.target_returns=[5.0]", "--optim.warmup_steps=1"]
    assert main(args) == 0
    runs = [p for p in tmp_path.iterdir() if p.name.startswith("odt_")]
    assert len(runs) == 1
    ckpt = runs[0] / "checkpoint-7"
    assert (ckpt / "replay_buffer.safetensors").is_file()
    capsys.readouterr()
    assert main(["eval", "dt", "--checkpoint", str(ckpt), "--target-returns=6,-6", "--episodes", "2"]) == 0
    (written,) = (ckpt.parent / "evals").glob("checkpoint-*-dt-*.json")  # beside the checkpoints, not in one
    out = json.loads(written.read_text())
    assert set(out["metrics"]) >= {"eval/return/6", "eval/return/-6", "eval/normalized/6"}
    assert main([*args, "--online.buffer_size=0"]) == 2
    assert "online.buffer_size must be >= 1" in capsys.readouterr().err
