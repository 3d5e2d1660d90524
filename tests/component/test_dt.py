"""Decision Transformer, BC and %BC: model parity, causality, padding, training plumbing, return conditioning."""

from __future__ import annotations

import json
import warnings

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
