"""The official Online DT's model options: no timestep embedding, a shorter rollout context."""

from __future__ import annotations

import pytest
import torch

from seqrl.models.dt import DecisionTransformer


def _dt(**kw) -> DecisionTransformer:
    torch.manual_seed(0)
    return DecisionTransformer(2, 1, hidden_size=16, n_layer=1, n_head=1, context_len=4, max_ep_len=32,
                               dropout=0.0, **kw).eval()


def _history(T: int):
    states = torch.arange(2 * T, dtype=torch.float32).reshape(T, 2) / 10 + 2.0  # (T, 2), state ≈ 2
    actions = torch.full((T - 1, 1), 0.3)  # (T−1, 1)
    rtg = torch.linspace(5.0, 1.0, T)  # (T,)
    return states, actions, rtg


def test_without_timestep_embedding_the_output_ignores_timesteps():
    model = _dt(timestep_embedding=False)
    assert model.embed_timestep is None and not any("timestep" in k for k in model.state_dict())
    s, a, r = _history(3)
    at_start = model.get_action(s, a, r, torch.arange(3))
    later = model.get_action(s, a, r, torch.arange(3) + 20)
    assert torch.equal(at_start, later)
    with_time = _dt()
    assert not torch.equal(with_time.get_action(s, a, r, torch.arange(3)),
                           with_time.get_action(s, a, r, torch.arange(3) + 20))


def test_rollout_context_reads_only_the_last_steps():
    s, a, r = _history(7)
    t = torch.arange(7)
    short = _dt(rollout_context=2)
    full = _dt()  # same seed: same weights
    full.load_state_dict(short.state_dict())
    # acting on 7 steps with context 2 == acting on the last 2 steps (left-padded to K = 4)
    assert torch.equal(short.get_action(s, a, r, t), full.get_action(s[-2:], a[-1:], r[-2:], t[-2:]))
    assert not torch.equal(short.get_action(s, a, r, t), full.get_action(s, a, r, t))
    with pytest.raises(ValueError, match="rollout_context"):
        _dt(rollout_context=5)


def test_official_options_reach_the_checkpoint(tmp_path, drift):
    from seqrl.algos.config import OptimConfig, RunConfig
    from seqrl.data.minari_data import DataConfig
    from seqrl.models.loading import load_policy_checkpoint
    from seqrl.algos.odt import ODTConfig, ODTEvalConfig, ODTModelConfig, OnlineConfig, train
    from seqrl.utils.checkpoint import latest_checkpoint

    cfg = ODTConfig(
        run=RunConfig(name="official", out_dir=str(tmp_path), seed=1, log_every=1, progress=False),
        data=DataConfig(dataset="drift"),
        model=ODTModelConfig(hidden_size=16, n_layer=1, n_head=1, context_len=4, max_ep_len=16,
                             timestep_embedding=False, rollout_context=2),
        optim=OptimConfig(lr=1e-3, weight_decay=5e-4, warmup_steps=2, schedule="constant", grad_clip=0.25),
        eval=ODTEvalConfig(episodes=2, target_returns=[6.0], every=0),
        online=OnlineConfig(iterations=1, rollouts=2, updates=2, target_return=8.0, buffer_size=20),
        return_scale=10.0, pretrain_steps=3, batch_size=8)
    train(cfg, drift.dataset())
    policy, info = load_policy_checkpoint(latest_checkpoint(tmp_path / "official"))
    assert policy.embed_timestep is None and policy.rollout_context == 2
    assert info["model"]["timestep_embedding"] is False and info["model"]["rollout_context"] == 2


def test_rollout_context_config_is_checked():
    from seqrl.algos.odt import ODTModelConfig

    with pytest.raises(ValueError, match="model.rollout_context"):
        ODTModelConfig(context_len=4, rollout_context=6)
