"""Decision Transformer, BC and %BC: model parity, causality, padding, training plumbing, return conditioning."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from seqrl.config import ConfigError, from_dict
from seqrl.data.offline import DatasetError, Episode, OfflineDataset
from seqrl.models.dt import DecisionTransformer, MLPPolicy

f64 = torch.float64


def _inputs(B=2, K=5, S=3, A=2, seed=0, discrete=False, n_actions=4):
    g = torch.Generator().manual_seed(seed)
    returns = torch.randn(B, K, generator=g, dtype=f64) * 10
    states = torch.randn(B, K, S, generator=g, dtype=f64)
    if discrete:
        actions = torch.randint(0, n_actions, (B, K), generator=g)
    else:
        actions = torch.rand(B, K, A, generator=g, dtype=f64) * 2 - 1
    timesteps = torch.randint(0, 50, (B, K), generator=g)
    return returns, states, actions, timesteps


def _model(S=3, A=2, K=5, **kw):
    torch.manual_seed(0)
    kw = {"hidden_size": 16, "n_layer": 2, "n_head": 2, "context_len": K, "max_ep_len": 64, **kw}
    return DecisionTransformer(S, A, **kw).double().eval()


# --------------------------------------------------------------------------------------------------
# model


def test_forward_shapes_and_action_bounds():
    m = _model(action_low=[-2.0, 0.0], action_high=[2.0, 5.0])
    out = m(*_inputs())
    assert out.shape == (2, 5, 2)
    assert (out[..., 0].abs() <= 2).all() and (out[..., 1] >= 0).all() and (out[..., 1] <= 5).all()
    disc = _model(A=4, action_head="categorical")
    logits = disc(*_inputs(discrete=True))
    assert logits.shape == (2, 5, 4)
    r, s, a, t = _inputs(discrete=True)
    act = disc.get_action(s[0], a[0], r[0], t[0])
    assert act.dtype == torch.long and act.shape == () and int(act) == int(logits[0, -1].argmax())


def test_embedding_init_gpt2_by_default_pytorch_on_request():
    """embed_init="pytorch" gives the linear R̂/state/action embeddings PyTorch's default init
    (Kaiming-uniform, bound 1/√fan_in); everything else, and all of "gpt2", is GPT-2's N(0, 0.02)."""
    kw = dict(hidden_size=256, n_layer=2, n_head=1, context_len=4, max_ep_len=64)
    torch.manual_seed(0)
    m = DecisionTransformer(9, 2, embed_init="pytorch", **kw)
    for embed, fan_in in ((m.embed_state, 9), (m.embed_action, 2), (m.embed_return, 1)):
        w = embed.weight
        assert w.abs().max() <= 1 / fan_in**0.5 and w.abs().max() > 0.9 / fan_in**0.5  # uniform up to the bound
        assert abs(float(w.std()) - 1 / (3 * fan_in) ** 0.5) < 0.1 / fan_in**0.5  # U(−b, b): std b/√3
    torch.manual_seed(0)
    g = DecisionTransformer(9, 2, **kw)
    assert g.kwargs["embed_init"] == "gpt2" and m.kwargs["embed_init"] == "pytorch"
    for embed in (g.embed_state, g.embed_action, g.embed_return):
        assert abs(float(embed.weight.std()) - 0.02) < 0.004 and float(embed.bias.abs().max()) == 0
    for model in (m, g):
        assert abs(float(model.embed_timestep.weight.std()) - 0.02) < 0.002
        assert abs(float(model.head.linear.weight.std()) - 0.02) < 0.003
        assert abs(float(model.blocks[0].qkv.weight.std()) - 0.02) < 0.002
        assert abs(float(model.blocks[0].mlp_proj.weight.std()) - 0.02 / 2) < 0.002  # 1/√(2·layers)
    with pytest.raises(ValueError, match="embed_init must be 'gpt2' or 'pytorch'"):
        DecisionTransformer(9, 2, embed_init="xavier")


def test_bad_inputs_name_the_argument():
    m = _model()
    r, s, a, t = _inputs()
    with pytest.raises(ValueError, match=r"states must have shape \(B, K, 3\)"):
        m(r, s[..., :2], a, t)
    with pytest.raises(ValueError, match="timesteps must lie in"):
        m(r, s, a, t + 100)
    with pytest.raises(ValueError, match="exceed the context K = 5"):
        m(*_inputs(K=6))
    with pytest.raises(ValueError, match="action_head must be one of"):
        DecisionTransformer(3, 2, action_head="gauss")
    with pytest.raises(ValueError, match="state_mean must have 3 values"):
        DecisionTransformer(3, 2, state_mean=[0.0, 1.0])


def _gpt2_reference(m: DecisionTransformer, returns, states, actions, timesteps, attention_mask):
    """The official code's forward: transformers GPT2Model on inputs_embeds, positions zeroed, same weights."""
    from transformers import GPT2Config, GPT2Model

    d, L = m.kwargs["hidden_size"], m.kwargs["n_layer"]
    cfg = GPT2Config(n_embd=d, n_layer=L, n_head=m.kwargs["n_head"], n_positions=3 * m.context_len, vocab_size=1,
                     n_inner=4 * d, activation_function="relu", bos_token_id=0, eos_token_id=0,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    gpt = GPT2Model(cfg).double().eval()
    with torch.no_grad():
        gpt.wpe.weight.zero_()
        for blk, ref in zip(m.blocks, gpt.h):
            ref.ln_1.load_state_dict(blk.ln_1.state_dict())
            ref.ln_2.load_state_dict(blk.ln_2.state_dict())
            for ours, conv in ((blk.qkv, ref.attn.c_attn), (blk.attn_proj, ref.attn.c_proj),
                               (blk.fc, ref.mlp.c_fc), (blk.mlp_proj, ref.mlp.c_proj)):
                conv.weight.copy_(ours.weight.T)  # Conv1D stores (in, out)
                conv.bias.copy_(ours.bias)
        gpt.ln_f.load_state_dict(m.ln_f.state_dict())
    B, K = states.shape[:2]
    time = m.embed_timestep(timesteps)
    s = (states - m.state_mean) / m.state_std
    toks = []
    for t in range(K):  # written out step by step: R̂_t, s_t, a_t
        toks += [m.embed_return(returns[:, t : t + 1] / m.return_scale) + time[:, t],
                 m.embed_state(s[:, t]) + time[:, t], m.embed_action(actions[:, t]) + time[:, t]]
    x = m.embed_ln(torch.stack(toks, dim=1))
    mask = attention_mask.repeat_interleave(3, dim=1)
    h = gpt(inputs_embeds=x, attention_mask=mask).last_hidden_state
    state_out = h[:, 1::3]
    return m.head(state_out, m.action_low, m.action_high)


def test_parity_with_gpt2_model_of_the_official_code():
    m = _model(state_mean=[1.0, -1.0, 0.5], state_std=[2.0, 0.5, 1.0], return_scale=10.0,
               action_low=[-2.0, -1.0], action_high=[2.0, 3.0])
    r, s, a, t = _inputs(B=3)
    mask = torch.ones(3, 5, dtype=torch.long)
    mask[1, :2] = 0  # left padding in one row
    with torch.no_grad():
        ours = m(r, s, a, t, mask)
        ref = _gpt2_reference(m, r, s, a, t, mask)
    real = mask.bool()
    assert torch.allclose(ours[real], ref[real], atol=1e-10, rtol=0)


def test_action_at_t_ignores_everything_after_t_including_a_t():
    m = _model()
    r, s, a, t = _inputs(B=1, K=5)
    base = m(r, s, a, t)
    for step in range(5):
        r2, s2, a2, t2 = r.clone(), s.clone(), a.clone(), t.clone()
        r2[:, step + 1 :] += 100.0
        s2[:, step + 1 :] -= 7.0
        a2[:, step:] = -a2[:, step:]  # the action at t itself too
        t2[:, step + 1 :] = 63
        out = m(r2, s2, a2, t2)
        assert torch.allclose(out[:, : step + 1], base[:, : step + 1], atol=1e-12, rtol=0), step
        if step < 4:  # and later predictions do see the change (the test can fail)
            assert not torch.allclose(out[:, step + 1 :], base[:, step + 1 :])


def test_action_at_t_reads_the_return_and_state_at_t():
    m = _model()
    r, s, a, t = _inputs(B=1, K=3)
    base = m(r, s, a, t)[:, 2]
    r2 = r.clone()
    r2[:, 2] += 50.0
    s2 = s.clone()
    s2[:, 2] += 1.0
    assert not torch.allclose(m(r2, s, a, t)[:, 2], base)
    assert not torch.allclose(m(r, s2, a, t)[:, 2], base)


def test_left_padded_short_context_gives_the_unpadded_action():
    m = _model(K=6)
    r, s, a, t = _inputs(B=1, K=3)
    unpadded = m(r, s, a, t)  # a 3-step context, no padding
    pad = 3
    junk = lambda x, v: torch.cat([torch.full((1, pad, *x.shape[2:]), v, dtype=x.dtype), x], dim=1)
    mask = torch.tensor([[0] * pad + [1] * 3])
    padded = m(junk(r, 1e3), junk(s, 2e3), junk(a, 3e3), junk(t, 7), mask)
    assert torch.allclose(padded[:, pad:], unpadded, atol=1e-10, rtol=0)
    # without the mask the padding leaks in (so the mask is what makes them equal)
    assert not torch.allclose(m(junk(r, 1e3), junk(s, 2e3), junk(a, 3e3), junk(t, 7))[:, pad:], unpadded)
    # get_action pads short histories itself and appends the unknown current action
    hist = [x[0] for x in (s, a[:, :2], r, t)]
    assert torch.allclose(m.get_action(*hist), unpadded[0, -1], atol=1e-10, rtol=0)
    # the first step of an episode: one state, an empty action history
    first = m(r[:, :1], s[:, :1], a[:, :1], t[:, :1])[0, -1]
    assert torch.allclose(m.get_action(s[0, :1], a[0, :0], r[0, :1], t[0, :1]), first, atol=1e-10, rtol=0)


def test_get_action_uses_the_last_k_steps_of_a_long_history():
    m = _model(K=4)
    r, s, a, t = _inputs(B=2, K=4)
    full = m(r, s, a, t)[:, -1]
    extra = lambda x: torch.cat([x[:, :1] * 0 + 5, x], dim=1)  # one older step, outside the window
    got = m.get_action(extra(s), extra(a), extra(r), extra(t))
    assert torch.allclose(got, full, atol=1e-12, rtol=0)


def test_mlp_policy_reads_only_the_last_state():
    torch.manual_seed(0)
    p = MLPPolicy(3, 2, hidden_size=8, state_mean=[1.0, 0.0, 0.0], state_std=[2.0, 1.0, 1.0],
                  action_low=[-2.0, -2.0], action_high=[2.0, 2.0]).double().eval()
    s = torch.randn(2, 4, 3, dtype=f64)
    assert torch.equal(p.get_action(s), p(s[:, -1]))
    assert (p(s).abs() <= 2).all()


# --------------------------------------------------------------------------------------------------
# a tiny environment whose achievable return is set by the action, and its dataset

H = 10  # horizon


class LevelEnv(gym.Env):
    """obs = [t / H, 1]; action a ∈ [−1, 1]; reward = a; H steps. The return is Σ a_t ∈ [−H, H]."""

    observation_space = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return np.array([self.t / H, 1.0], dtype=np.float32)

    def step(self, action):
        reward = float(np.clip(np.asarray(action, dtype=np.float64).reshape(-1)[0], -1, 1))
        self.t += 1
        return self._obs(), reward, False, self.t >= H, {}


ENV_ID = "SeqrlTestLevel-v0"
if ENV_ID not in gym.registry:
    # a string entry point (this module, already imported) so that Minari can store the env spec as JSON
    gym.register(ENV_ID, entry_point=f"{LevelEnv.__module__}:LevelEnv", max_episode_steps=H)


def level_dataset(n_episodes=64, seed=0, noise=0.1) -> OfflineDataset:
    """Episode i holds a constant level c_i ~ U[−1, 1] plus noise: returns spread over about [−H, H]."""
    rng = np.random.default_rng(seed)
    episodes = []
    for i in range(n_episodes):
        c = rng.uniform(-1, 1)
        actions = np.clip(c + noise * rng.standard_normal((H, 1)), -1, 1).astype(np.float32)
        obs = np.stack([np.array([t / H, 1.0]) for t in range(H + 1)]).astype(np.float32)
        episodes.append(Episode(observations=obs, actions=actions, rewards=actions[:, 0].copy(),
                                terminations=np.zeros(H, bool), truncations=np.arange(H) == H - 1, id=i))
    return OfflineDataset(episodes, env_id=ENV_ID, action_dim=1, action_low=np.array([-1.0], np.float32),
                          action_high=np.array([1.0], np.float32), ref_min_score=-float(H), ref_max_score=float(H),
                          name="level")


def _dt_cfg(tmp_path, name, method="dt", **kw):
    from seqrl.algos.config import RunConfig
    from seqrl.algos.dt import BCModelConfig, DTConfig
    from seqrl.data.minari_data import DataConfig
    from seqrl.envs.evaluate import DTEvalConfig
    from seqrl.models.dt import DTModelConfig

    base = dict(
        run=RunConfig(name=name, out_dir=str(tmp_path), seed=1, log_every=1, progress=False),
        data=DataConfig(dataset="level"),
        model=DTModelConfig(hidden_size=32, n_layer=1, n_head=1, context_len=4, max_ep_len=16, dropout=0.1),
        bc=BCModelConfig(hidden_size=32, n_layer=2),
        eval=DTEvalConfig(episodes=2, target_returns=[8.0, -8.0]),
        method=method, return_scale=10.0, steps=6, batch_size=8,
    )
    base.update(kw)
    cfg = DTConfig(**base)
    cfg.optim.warmup_steps = 2
    cfg.optim.lr = 1e-3
    return cfg


# --------------------------------------------------------------------------------------------------
# batches


def test_batch_windows_are_consecutive_left_padded_and_rtg_matches():
    from seqrl.data.offline import Trajectories

    eps = []
    for i, T in enumerate([3, 6]):
        obs = np.array([[100 * i + t] for t in range(T + 1)], np.float32)  # s_t = 100·episode + t
        acts = np.array([[1000 * i + t] for t in range(T)], np.float32)    # a_t = 1000·episode + t
        rew = np.arange(1, T + 1, dtype=np.float32)                         # r_t = t + 1
        eps.append(Episode(obs, acts, rew, np.zeros(T, bool), np.zeros(T, bool), id=i))
    ds = OfflineDataset(eps, action_dim=1)
    data = Trajectories(ds, 1.0, 100, "dt.model")
    b = data.batch(step=0, batch_size=256, K=4, seed=0)
    for row in range(256):
        m = b["mask"][row].bool()
        n = int(m.sum())
        assert m.tolist() == [False] * (4 - n) + [True] * n  # left padding only
        s = b["states"][row, m, 0]
        ep, t0 = int(s[0]) // 100, int(s[0]) % 100
        T = [3, 6][ep]
        assert s.tolist() == [100 * ep + t0 + k for k in range(n)]                 # consecutive states
        assert b["actions"][row, m, 0].tolist() == [1000 * ep + t0 + k for k in range(n)]  # aligned actions
        assert b["timesteps"][row, m].tolist() == list(range(t0, t0 + n))
        # R̂_t = Σ_{t' ≥ t} (t' + 1) = Σ_{u=t+1}^{T} u
        assert b["returns"][row, m].tolist() == [sum(range(t + 1, T + 1)) for t in range(t0, t0 + n)]
        assert n == min(4, T - t0)  # a window runs to K steps or the episode's end
        assert (b["states"][row, ~m] == 0).all() and (b["returns"][row, ~m] == 0).all()
    # episodes are drawn ∝ their length (3 : 6), starts uniform
    first = b["states"][b["mask"].bool().cumsum(1) == 1][:, 0]  # the first real state of each window
    frac_long = float((first >= 100).double().mean())
    assert abs(frac_long - 6 / 9) < 0.1
    # a pure function of (seed, step)
    again = data.batch(step=0, batch_size=256, K=4, seed=0)
    assert all(torch.equal(b[k], again[k]) for k in b)
    assert not torch.equal(data.batch(step=1, batch_size=256, K=4, seed=0)["states"], b["states"])


def test_cover_windows_put_every_step_in_k_windows_and_start_windows_do_not():
    from seqrl.data.offline import Trajectories

    T, K, n = 6, 4, 60_000
    obs = np.arange(T + 1, dtype=np.float32)[:, None] + 1  # s_t = t + 1 (0 is padding)
    ds = OfflineDataset([Episode(obs, np.zeros((T, 1), np.float32), np.ones(T, np.float32), np.zeros(T, bool),
                                 np.zeros(T, bool), id=0)], action_dim=1)
    for windows, want in (("cover", [1.0] * T), ("start", [1 / 4, 2 / 4, 3 / 4, 1.0, 1.0, 1.0])):
        b = Trajectories(ds, 1.0, 100, "dt.model", windows).batch(step=0, batch_size=n, K=K, seed=0)
        m = b["mask"].bool()
        n_real = m.sum(1)
        assert all(row.tolist() == [False] * (K - int(k)) + [True] * int(k) for row, k in zip(m[:500], n_real[:500]))
        steps = (b["states"][..., 0][m] - 1).long()  # every real step drawn
        assert (b["timesteps"][m] == steps).all()
        counts = torch.bincount(steps, minlength=T).double()
        # windows per step, relative to a middle step: cover = K for every step; start: t + 1 for t < K − 1
        rel = (counts / counts[K - 1]).tolist()
        assert rel == pytest.approx(want, abs=0.03), (windows, rel)
        if windows == "cover":  # windows left-padded at the episode's start, as evaluation's first steps are
            assert bool(((b["timesteps"][:, -1] == 0) & (n_real == 1)).any())
    with pytest.raises(ValueError, match="windows"):
        Trajectories(ds, 1.0, 100, "dt.model", "end")
    with pytest.raises(ValueError, match="data.windows"):
        from seqrl.data.minari_data import DataConfig

        DataConfig(dataset="quick:medium", windows="end")


def test_top_fraction_keeps_the_best_episodes():
    from seqrl.data.offline import Trajectories

    ds = level_dataset(n_episodes=20)
    data = Trajectories(ds, 0.25, 100, "dt.model")
    assert len(data.returns) == 5  # equal lengths: 25% of 20 episodes
    assert sorted(data.returns) == sorted(ds.returns)[-5:]


# --------------------------------------------------------------------------------------------------
# evaluation


def test_evaluation_decrements_the_target_by_observed_rewards():
    from seqrl.envs.evaluate import evaluate_policy

    class Recorder(torch.nn.Module):
        context_len, max_ep_len, discrete = 3, 100, False

        def __init__(self):
            super().__init__()
            self.seen = []

        def get_action(self, states, actions, returns_to_go, timesteps, attention_mask=None):
            self.seen.append((returns_to_go.clone(), timesteps.clone(), actions.clone()))
            return torch.full((states.shape[0], 1), 0.5)  # reward 0.5 every step

    rec = Recorder()
    result = evaluate_policy(rec, ENV_ID, [4.0, -2.0], episodes=2, seed=0)
    assert result.returns.shape == (2, 2) and np.allclose(result.returns, 5.0) and (result.lengths == H).all()
    rtg, steps, acts = rec.seen[4]  # step t = 4: window t = 2, 3, 4
    # rows: target 4 ×2 episodes, target −2 ×2; R̂_t = target − 0.5·t
    assert rtg.tolist() == [[3.0, 2.5, 2.0]] * 2 + [[-3.0, -3.5, -4.0]] * 2
    assert steps.tolist() == [[2, 3, 4]] * 4
    assert acts[:, :2, 0].tolist() == [[0.5, 0.5]] * 4 and acts[:, 2, 0].tolist() == [0.0] * 4  # placeholder
    assert rec.seen[0][0].shape == (4, 1)  # the first step's history holds one step
    m = result.metrics(lambda r: 100 * r / H)
    assert m["eval/return/4"] == pytest.approx(5.0) and m["eval/normalized/-2"] == pytest.approx(50.0)


def test_far_targets_warn():
    from seqrl.envs.evaluate import far_targets, warn_far_targets

    data = np.array([-10.0, 10.0])  # span 20: far means > 30 or < −30
    assert far_targets([29.0, 31.0, -31.0, 0.0], data) == [31.0, -31.0]
    with pytest.warns(UserWarning, match=r"dt.eval.target_returns: target return 50 is far outside"):
        warn_far_targets([50.0], data, "dt.eval.target_returns")


# --------------------------------------------------------------------------------------------------
# training plumbing


def test_checkpoint_round_trip_is_exact(tmp_path):
    from seqrl.algos.dt import train
    from seqrl.data.offline import Trajectories
    from seqrl.models.loading import load_policy_checkpoint
    from seqrl.utils.checkpoint import latest_checkpoint

    for method in ("dt", "bc"):
        cfg = _dt_cfg(tmp_path, method, method=method)
        train(cfg, level_dataset())
        policy, info = load_policy_checkpoint(latest_checkpoint(tmp_path / method))
        assert info["method"] == method and info["env_id"] == ENV_ID
        b = Trajectories(level_dataset(), 1.0, 16, "dt.model").batch(0, 4, 4, 0)
        # a second load gives identical weights and identical actions
        again, _ = load_policy_checkpoint(latest_checkpoint(tmp_path / method))
        for (k, x), (_, y) in zip(policy.state_dict().items(), again.state_dict().items()):
            assert torch.equal(x, y), k
        args = (b["states"], b["actions"], b["returns"], b["timesteps"], b["mask"])
        assert torch.equal(policy.get_action(*args), again.get_action(*args))
        # the normaliser travelled with the weights
        assert torch.allclose(policy.state_mean, torch.tensor([0.45, 1.0]), atol=1e-6)


def test_resume_after_interrupt_equals_uninterrupted_run(tmp_path, monkeypatch):
    import seqrl.algos.dt as dt
    from seqrl.models.loading import load_policy_checkpoint
    from seqrl.utils.checkpoint import latest_checkpoint
    from seqrl.utils.metrics import read_metrics

    ds = level_dataset()
    full = _dt_cfg(tmp_path, "full")
    full.run.save_every, full.eval.every = 3, 2
    dt.train(full, ds)

    real, calls = dt.action_loss, {"n": 0}

    def interrupt_at_step_5(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    cut = _dt_cfg(tmp_path, "cut")
    cut.run.save_every, cut.eval.every = 3, 2
    monkeypatch.setattr(dt, "action_loss", interrupt_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        dt.train(cut, ds)
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path / "cut").name == "checkpoint-3"
    cut.run.resume = True
    dt.train(cut, ds)
    a, _ = load_policy_checkpoint(tmp_path / "full" / "checkpoint-6")
    b, _ = load_policy_checkpoint(tmp_path / "cut" / "checkpoint-6")
    for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), k
    keys = ("loss/action", "eval/return/8")
    rows = lambda run: [(r["step"], *(r.get(k) for k in keys)) for r in read_metrics(tmp_path / run / "metrics.jsonl")
                        if "loss/action" in r]
    assert rows("full") == rows("cut") and len(rows("full")) == 6


def test_outputs_metrics_plots_and_far_target_warning(tmp_path):
    from seqrl.algos.dt import train
    from seqrl.utils.metrics import read_metrics

    cfg = _dt_cfg(tmp_path, "out")
    cfg.eval.target_returns = [8.0, 100.0]
    with pytest.warns(UserWarning, match="target return 100 is far outside"):
        final = train(cfg, level_dataset())
    for key in ("loss/action", "eval/return/8", "eval/normalized/8", "eval/return/100", "perf/steps_per_s"):
        assert key in final, key
    records = read_metrics(tmp_path / "out" / "metrics.jsonl")
    assert records[0]["data/episodes"] == 64 and records[0]["step"] == 0
    assert (tmp_path / "out" / "plots" / "dt.png").is_file() and (tmp_path / "out" / "plots" / "targets.png").is_file()
    assert (tmp_path / "out" / "config.yaml").is_file()


def test_percent_bc_trains_on_the_top_episodes_only(tmp_path):
    from seqrl.algos.dt import train
    from seqrl.data.minari_data import DataConfig
    from seqrl.utils.metrics import read_metrics

    cfg = _dt_cfg(tmp_path, "pbc", method="bc", data=DataConfig(dataset="level", top_fraction=0.1))
    final = train(cfg, level_dataset())
    first = read_metrics(tmp_path / "pbc" / "metrics.jsonl")[0]
    assert first["data/episodes"] == 6  # 10% of 64 equal-length episodes
    assert first["data/return_mean"] > 0.7 * H  # the best levels only
    assert "eval/return" in final and "eval/normalized" in final  # BC: one unconditioned evaluation


@pytest.mark.parametrize(
    "data,match",
    [
        ({"model": {"context_len": 0}}, r"dt\.model: model\.context_len must be >= 1 \(got 0\)"),
        ({"model": {"hidden_size": 30, "n_head": 4}}, r"model\.hidden_size \(30\) must be divisible by model\.n_head"),
        ({"data": {"top_fraction": 0.0}}, r"data\.top_fraction must be in \(0, 1\]"),
        ({"eval": {"target_returns": []}}, "eval.target_returns must hold at least one"),
        ({"return_scale": 0}, "return_scale must be > 0"),
        ({"method": "cql"}, r"dt\.method: expected one of 'dt', 'bc'"),
        ({"optim": {"lrr": 1.0}}, r"dt\.optim\.lrr: unknown key; did you mean 'lr'"),
        ({"steps": "many"}, r"dt\.steps: expected int"),
    ],
)
def test_config_errors_name_the_field(data, match):
    from seqrl.algos.dt import DTConfig

    with pytest.raises(ConfigError, match=match):
        from_dict(DTConfig, data, path="dt")


def test_auto_run_names_and_bc_config():
    from seqrl.algos.dt import BCConfig, DTConfig

    assert from_dict(DTConfig, {"data": {"dataset": "seqrl/hopper/medium-v0"}}).run.name == "dt_seqrl-hopper-medium-v0_s0"
    bc = from_dict(BCConfig, {"data": {"top_fraction": 0.1}, "run": {"seed": 2}})
    assert bc.method == "bc" and bc.run.name == "bc_quick-medium-replay_top10_s2"


def test_bad_dataset_rows_are_rejected_naming_the_episode(tmp_path):
    from seqrl.algos.dt import train

    with pytest.raises(DatasetError, match="episode 3: rewards has a NaN"):
        eps = level_dataset().episodes
        eps[3].rewards[4] = np.nan
        OfflineDataset(eps, action_dim=1)
    ds = level_dataset()
    ds.episodes[5].observations = ds.episodes[5].observations[:-2]  # changed after the dataset was built
    with pytest.raises(DatasetError, match="episode 5: observations must have T\\+1"):
        train(_dt_cfg(tmp_path, "bad"), ds)
    short = _dt_cfg(tmp_path, "short")
    short.model.max_ep_len = 8
    with pytest.raises(DatasetError, match=r"episode 0 has 10 steps, more than dt\.model\.max_ep_len = 8"):
        train(short, level_dataset())


def test_discrete_actions_train_with_the_categorical_head(tmp_path):
    from seqrl.algos.dt import train
    from seqrl.models.loading import load_policy_checkpoint
    from seqrl.utils.metrics import read_metrics

    rng = np.random.default_rng(0)
    eps = []
    for i in range(8):
        a = rng.integers(0, 3, H)
        obs = rng.standard_normal((H + 1, 2)).astype(np.float32)
        eps.append(Episode(obs, a.astype(np.int64), a.astype(np.float32), np.zeros(H, bool), np.zeros(H, bool), id=i))
    ds = OfflineDataset(eps, discrete=True, action_dim=3)
    cfg = _dt_cfg(tmp_path, "disc")
    cfg.eval.episodes = 0
    cfg.steps = 30
    train(cfg, ds)
    losses = [r["loss/action"] for r in read_metrics(tmp_path / "disc" / "metrics.jsonl") if "loss/action" in r]
    assert losses[0] == pytest.approx(np.log(3), abs=0.15)  # cross-entropy of a near-uniform start
    policy, _ = load_policy_checkpoint(tmp_path / "disc" / "checkpoint-30")
    assert policy.discrete and policy.get_action(torch.zeros(2, 2), torch.zeros(1, dtype=torch.long),
                                                 torch.zeros(2), torch.arange(2)).dtype == torch.long


def test_higher_target_gives_higher_return(tmp_path):
    """Return conditioning: trained on levels in [−1, 1], the DT follows the target it is given."""
    from seqrl.algos.dt import train
    from seqrl.envs.evaluate import run_evaluation
    from seqrl.models.loading import load_policy_checkpoint
    from seqrl.utils.checkpoint import latest_checkpoint

    cfg = _dt_cfg(tmp_path, "cond", steps=300, batch_size=32)
    cfg.eval.episodes = 0
    cfg.model.dropout = 0.0
    train(cfg, level_dataset(n_episodes=128))
    policy, info = load_policy_checkpoint(latest_checkpoint(tmp_path / "cond"))
    metrics, result = run_evaluation(policy, info, [-8.0, 0.0, 8.0], episodes=2, seed=0)
    low, mid, high = (metrics[f"eval/return/{t}"] for t in ("-8", "0", "8"))
    print(f"achieved return for targets -8 / 0 / 8: {low:.2f} / {mid:.2f} / {high:.2f}")
    assert high > mid + 4 and mid > low + 4


def test_cli_train_dt_and_bc_then_eval_dt(tmp_path, capsys):
    """seqrl train dt|bc on a Minari dataset folder, then seqrl eval dt on the checkpoint."""
    from seqrl.cli import main
    from seqrl.data.minari_data import write_minari

    path = write_minari("test/level-v0", level_dataset(n_episodes=16).episodes, ENV_ID, root=tmp_path / "minari",
                        ref_min_score=-float(H), ref_max_score=float(H), algorithm_name="levels",
                        description="constant-level episodes of the test env")
    common = ["--config", "dt/pendulum_medium_replay", f"--data.dataset={path}",
              f"--run.out_dir={tmp_path}", "--run.progress=false", "--steps=4", "--batch_size=4",
              "--model.hidden_size=16", "--model.n_layer=1", "--model.context_len=3", "--model.max_ep_len=16",
              "--bc.hidden_size=16", "--eval.episodes=1", "--eval.target_returns=[5.0]", "--optim.warmup_steps=1"]
    assert main(["train", "dt", *common]) == 0
    assert main(["train", "bc", *common]) == 0
    runs = sorted(p.name for p in tmp_path.iterdir() if p.name != "minari")
    assert len(runs) == 2 and runs[0].startswith("bc_") and runs[1].startswith("dt_")
    ckpt = tmp_path / runs[1] / "checkpoint-4"
    capsys.readouterr()
    assert main(["eval", "dt", "--checkpoint", str(ckpt), "--target-returns=8,-8", "--episodes", "2"]) == 0
    (written,) = (ckpt.parent / "evals").glob("checkpoint-*-dt-*.json")  # beside the checkpoints, not in one
    out = json.loads(written.read_text())
    assert set(out["metrics"]) >= {"eval/return/8", "eval/return/-8", "eval/normalized/8"}
    assert np.array(out["returns"]).shape == (2, 2)
    assert main(["eval", "dt", "--checkpoint", str(tmp_path / "nowhere")]) == 2
    assert "--checkpoint" in capsys.readouterr().err
    assert main(["train", "dt", *common, "--model.context_len=0"]) == 2  # a config error, named
    assert "model.context_len must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted(__import__("importlib.resources").resources.files("seqrl").joinpath("configs/dt").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_dt_preset_loads_for_dt_and_bc(path):
    from seqrl.algos.dt import BCConfig, DTConfig
    from seqrl.config import load_config

    dt, bc = load_config(DTConfig, path, root="dt"), load_config(BCConfig, path, root="bc")
    assert dt.method == "dt" and bc.method == "bc" and dt.run.name != bc.run.name
    assert dt.model.context_len >= 1 and dt.eval.target_returns


def test_quick_spec_and_a_passed_dataset_train_the_same_weights(tmp_path):
    """The policy is seeded after the dataset is built, so how the dataset arrives does not change the run."""
    from seqrl.algos.dt import train
    from seqrl.data.minari_data import DataConfig
    from seqrl.models.loading import load_policy_checkpoint
    from seqrl.data.minari_data import quick_dataset

    def cfg(name):
        c = _dt_cfg(tmp_path, name, data=DataConfig(dataset="quick:medium-replay", quick_steps=400))
        c.model.max_ep_len, c.eval.episodes, c.steps = 200, 0, 3
        return c

    train(cfg("spec"))
    train(cfg("object"), quick_dataset(level="medium-replay", n_steps=400, seed=0))
    a, _ = load_policy_checkpoint(tmp_path / "spec" / "checkpoint-3")
    b, _ = load_policy_checkpoint(tmp_path / "object" / "checkpoint-3")
    for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), k


def test_make_optimizer_uses_the_fused_adamw_with_the_same_update():
    from seqrl.training.run import make_optimizer
    from seqrl.algos.config import OptimConfig

    torch.manual_seed(0)
    model = DecisionTransformer(3, 2, hidden_size=8, n_layer=1, context_len=2, max_ep_len=10, dropout=0.0)
    twin = DecisionTransformer(3, 2, hidden_size=8, n_layer=1, context_len=2, max_ep_len=10, dropout=0.0)
    twin.load_state_dict(model.state_dict())
    start = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = OptimConfig(lr=1e-2, weight_decay=0.1, warmup_steps=0, schedule="constant")
    assert make_optimizer(twin, cfg, 10)[0].defaults["fused"] is None  # opt-in: the LM trainers keep the loop
    fused, _ = make_optimizer(model, cfg, 10, fused=True)
    assert fused.defaults["fused"] is True
    name_of = {id(p): n for n, p in model.named_parameters()}
    twin_params = dict(twin.named_parameters())
    groups = [{"params": [twin_params[name_of[id(p)]] for p in g["params"]], "weight_decay": g["weight_decay"]}
              for g in fused.param_groups]
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert "embed_state.weight" in {name_of[id(p)] for p in fused.param_groups[1]["params"]}
    plain = torch.optim.AdamW(groups, lr=1e-2, betas=cfg.betas, foreach=False)
    x = (torch.randn(4, 2), torch.randn(4, 2, 3), torch.rand(4, 2, 2), torch.randint(0, 10, (4, 2)))
    for m, opt in ((model, fused), (twin, plain)):
        for _ in range(3):
            m(*x).square().mean().backward()
            opt.step()
            opt.zero_grad()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert torch.allclose(p, q, atol=1e-6), name
    assert not torch.allclose(model.head.linear.weight, start["head.linear.weight"])  # the steps moved it


def test_the_model_compiles_to_one_graph_with_the_same_outputs():
    # fullgraph=True fails on any graph break (the value checks and the all-real-mask branch skip under
    # compile); the "eager" backend traces with dynamo without generating code, so no C++ compiler is needed.
    torch.manual_seed(0)
    model = DecisionTransformer(3, 2, hidden_size=8, n_layer=1, context_len=4, max_ep_len=20).eval()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    x = (torch.randn(2, 4), torch.randn(2, 4, 3), torch.rand(2, 4, 2), torch.randint(0, 20, (2, 4)))
    padded = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    for mask in (None, torch.ones(2, 4, dtype=torch.long), padded):
        want = model(*x, mask)
        got = compiled(*x, mask)
        assert torch.allclose(got, want, atol=1e-6)
    torch._dynamo.reset()


@pytest.mark.parametrize("padded", [False, True])
def test_last_block_on_the_state_tokens_alone_equals_the_full_block(padded):
    """`Block(..., queries=)` (what `encode` runs as its last block): the full block's outputs at those
    positions, and the same gradients for every weight and the input, causal and with left padding."""
    from seqrl.core.sequences import causal_attention_mask, interleave_mask
    from seqrl.models.dt import Block

    torch.manual_seed(0)
    blk = Block(16, 2, dropout=0.0, activation="relu").double()
    x = torch.randn(3, 12, 16, dtype=torch.float64, requires_grad=True)
    allowed = None
    if padded:
        mask = torch.ones(3, 4, dtype=torch.long)
        mask[1, :2] = 0
        allowed = causal_attention_mask(interleave_mask(mask))  # (B, 1, 12, 12)
    w = torch.randn(3, 4, 16, dtype=torch.float64)

    def run(cut: bool):
        blk.zero_grad()
        x.grad = None
        out = blk(x, allowed, queries=slice(1, None, 3)) if cut else blk(x, allowed)[:, 1::3]
        (out * w).sum().backward()
        return out.detach(), [p.grad.clone() for p in blk.parameters()] + [x.grad.clone()]

    (ref, ref_g), (got, got_g) = run(False), run(True)
    assert got.shape == (3, 4, 16) and torch.allclose(got, ref, atol=1e-12)
    for a, b in zip(got_g, ref_g):
        assert torch.allclose(a, b, atol=1e-12)
    assert not torch.allclose(blk(x, allowed, queries=slice(0, None, 3)), ref)  # other positions differ
