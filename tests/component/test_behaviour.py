"""Behaviour policies: the snapshot acts as SB3's PPO does; training snapshots, logs, resumes; export picks levels."""

import json

import numpy as np
import pytest
import torch

from seqrl.data.minari_data import DATASET_ENVS
from seqrl.envs.behaviour import (
    BehaviourConfig,
    BehaviourPolicy,
    _atomic_save,
    _snapshot_state,
    export_levels,
    kept_meta,
    load_behaviour,
    policies_dir,
    train_behaviour,
)
from seqrl.envs.rollout import episode_rngs
from seqrl.utils.metrics import read_metrics


def test_snapshot_matches_sb3_policy(tmp_path):
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    venv = VecNormalize(make_vec_env("Hopper-v5", n_envs=2, seed=0))
    model = PPO("MlpPolicy", venv, seed=0, device="cpu",
                policy_kwargs=dict(net_arch=dict(pi=[16, 16], vf=[16, 16]), log_std_init=-0.5))
    rng = np.random.default_rng(0)
    venv.obs_rms.update(rng.normal(2.0, 3.0, size=(500, 11)))  # non-trivial normalisation statistics
    path = tmp_path / "snap.safetensors"
    _atomic_save(_snapshot_state(model, venv), {"env_id": "Hopper-v5", "net_arch": [16, 16], "activation": "tanh",
                                                "clip_obs": 10.0}, path)
    pol = BehaviourPolicy.load(path)
    obs = rng.normal(0, 5, size=(7, 11)).astype(np.float32)
    mean, std = pol.distribution(obs)
    with torch.no_grad():
        ref = model.policy.get_distribution(torch.as_tensor(venv.normalize_obs(obs)).float()).distribution
    np.testing.assert_allclose(mean, ref.mean.double().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(std, np.exp(-0.5), rtol=1e-6)
    sb3_action, _ = model.predict(venv.normalize_obs(obs), deterministic=True)  # SB3 clips to the bounds
    np.testing.assert_allclose(pol.deterministic(obs, [None] * 7), sb3_action, atol=1e-6)
    # stochastic actions: μ + σ·ε with ε from each row's own generator, clipped to the action space
    rngs = [episode_rngs(0, i)[1] for i in range(7)]
    eps = np.stack([episode_rngs(0, i)[1].standard_normal(3) for i in range(7)])
    np.testing.assert_allclose(pol(obs, rngs), np.clip(mean + std * eps, -1, 1), atol=1e-6)


def test_train_resume_export(tmp_path):
    cfg = BehaviourConfig(env_id="Pendulum-v1", total_steps=2048, n_envs=2, n_steps=256, batch_size=128,
                          n_epochs=2, net_arch=[8, 8], eval_every=1024, eval_episodes=2, out_dir=str(tmp_path))
    run = train_behaviour(cfg)
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl")]
    assert steps == [0, 1024, 2048]
    assert sorted(p.name for p in (run / "snapshots").iterdir()) == [f"step-{s:08d}.safetensors" for s in steps]
    assert (run / "plots" / "behaviour.png").is_file() and (run / "model.zip").is_file()
    with pytest.raises(ValueError, match="already holds snapshots"):
        train_behaviour(cfg)
    longer = BehaviourConfig(**{**cfg.__dict__, "total_steps": 3072})
    train_behaviour(longer, resume=True)  # continues from step 2048, does not start over
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [0, 1024, 2048, 3072]

    meta = export_levels("Pendulum-v1", run, ref_episodes=2, dest=tmp_path / "kept")
    best = max(read_metrics(run / "metrics.jsonl"), key=lambda r: r["eval/return_mean"])
    assert meta["levels"]["expert"]["step"] == best["step"]
    assert meta["levels"]["medium"]["step"] < best["step"] or best["step"] == 0
    assert [r["step"] for r in meta["replay"]][-1] == meta["levels"]["medium"]["step"]
    assert meta["replay"][0]["step"] == 0
    for name in ["medium", "expert"] + [r["name"] for r in meta["replay"]]:
        assert (tmp_path / "kept" / f"{name}.safetensors").is_file()
    assert json.loads((tmp_path / "kept" / "meta.json").read_text())["ref_min_score"] == meta["ref_min_score"]


@pytest.mark.parametrize("env_id", sorted(DATASET_ENVS.values()))
def test_kept_policies_are_complete(env_id):
    meta = kept_meta(env_id)
    levels = meta["levels"]
    assert levels["random"]["return_mean"] < levels["medium"]["return_mean"] < levels["expert"]["return_mean"]
    assert meta["ref_min_score"] == levels["random"]["return_mean"]
    assert meta["ref_max_score"] == levels["expert"]["return_mean"]
    assert [r["step"] for r in meta["replay"]] == sorted(r["step"] for r in meta["replay"])
    assert meta["replay"][-1]["step"] == levels["medium"]["step"] and meta["replay"][0]["step"] == 0
    for f in policies_dir(env_id).glob("*.safetensors"):
        assert f.stat().st_size < 200_000, f"{f} is not small"
    load_behaviour(env_id, "expert")
    with pytest.raises(ValueError, match="no kept policy 'best'"):
        load_behaviour(env_id, "best")
