"""GRPO-family policy loss: hand values, clip-higher, GSPO ratio, KL estimators, aggregation
modes, gradient-accumulation equivalence and a no-NaN property."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqrl.core.advantages import group_advantages
from seqrl.core.policy_loss import (AGG_MODES, aggregate_loss, clipped_surrogate,
                                    entropy_from_logits, grpo_loss, importance_ratio, kl_penalty,
                                    sequence_log_ratio, token_log_ratio)

F64 = torch.float64
LN2 = math.log(2.0)


def close(a, b, atol=1e-12):
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=F64), atol=atol, rtol=0)


def random_batch(seed: int, b: int = 8, t: int = 6):
    """logp (leaf), old_logp, ref_logp, per-sequence advantages and a mask with uneven lengths."""
    g = torch.Generator().manual_seed(seed)
    logp = (-3 * torch.rand(b, t, generator=g, dtype=F64)).requires_grad_()
    old = logp.detach() + 0.4 * torch.randn(b, t, generator=g, dtype=F64)
    ref = logp.detach() + 0.5 * torch.randn(b, t, generator=g, dtype=F64)
    adv = torch.randn(b, generator=g, dtype=F64)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(F64)
    return logp, old, ref, adv, mask


# ---- ratios ---------------------------------------------------------------------------------

def test_token_and_sequence_log_ratio_by_hand():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.1]], dtype=F64))
    old = torch.log(torch.tensor([[0.25, 0.25, 0.9]], dtype=F64))
    mask = torch.tensor([[1, 1, 0]])
    close(token_log_ratio(logp, old), [[LN2, 0.0, math.log(1 / 9)]])
    # GSPO: mean of the kept token log-ratios (ln2 + 0)/2 → s = 2^(1/2)
    close(sequence_log_ratio(logp, old, mask), [LN2 / 2])
    close(importance_ratio(logp, old, mask, "sequence"), [[math.sqrt(2)] * 3])
    close(importance_ratio(logp, old, mask, "token"), [[2.0, 1.0, 1 / 9]])


def test_gspo_ratio_is_exp_mean_token_log_ratio_and_each_token_gets_gradient():
    logp, old, _, _, mask = random_batch(0, b=4, t=5)
    ratio = importance_ratio(logp, old, mask, "sequence")
    s = ((logp - old) * mask).sum(1).div(mask.sum(1)).exp()  # (B,) the GSPO sequence ratio
    close(ratio.detach(), s[:, None].detach().expand_as(ratio))
    (ratio * mask).sum().backward()
    # ∂s_{i,t}/∂logp_t = s_i on every kept token (GSPO-token), 0 where masked
    close(logp.grad, s[:, None].detach() * mask)


def test_gspo_token_with_sequence_advantages_matches_pure_gspo_loss_and_gradient():
    logp, old, _, adv, mask = random_batch(1)
    loss, _ = grpo_loss(logp, old, adv, mask, ratio_level="sequence")
    (grad,) = torch.autograd.grad(loss, logp)
    # GSPO objective: J = mean_i min(s_i·A_i, clip(s_i)·A_i) with s_i differentiable as a whole
    s = sequence_log_ratio(logp, old, mask).exp()
    ref_loss = -torch.minimum(s * adv, s.clamp(0.8, 1.2) * adv).mean()
    (ref_grad,) = torch.autograd.grad(ref_loss, logp)
    close(loss, ref_loss.detach())
    close(grad, ref_grad)


# ---- clipped surrogate ----------------------------------------------------------------------

def test_clip_higher_is_asymmetric_with_zero_gradient_where_clipped():
    ratio = torch.tensor([[1.25, 1.3, 0.79, 0.79, 1.3]], dtype=F64, requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, -1.0, 1.0, -1.0]], dtype=F64)
    out = clipped_surrogate(ratio, adv, clip_eps_low=0.2, clip_eps_high=0.28)
    # 1.25, A>0: inside [0.8, 1.28] → −1.25;  1.3, A>0: clipped high → −1.28
    # 0.79, A<0: clipped low → −min(−0.79, −0.8) = 0.8;  0.79, A>0: min(0.79, 0.8) → −0.79
    # 1.3, A<0: min(−1.3, −1.28) = −1.3 (not clipped) → 1.3
    close(out.loss.detach(), [[-1.25, -1.28, 0.8, -0.79, 1.3]])
    out.loss.sum().backward()
    close(ratio.grad, [[-1.0, 0.0, 0.0, -1.0, 1.0]])  # −A unclipped, 0 clipped
    close(out.clipfrac_high, 1 / 5)
    close(out.clipfrac_low, 1 / 5)
    # the mask selects which tokens the fractions count; (B,) advantages broadcast
    mask = torch.tensor([[1, 1, 0, 0, 0]])
    out = clipped_surrogate(ratio.detach(), torch.tensor([1.0], dtype=F64), 0.2, 0.28, mask)
    close(out.loss, [[-1.25, -1.28, -0.79, -0.79, -1.28]])
    close(out.clipfrac_high, 1 / 2)
    close(out.clipfrac_low, 0.0)


def test_clipped_surrogate_bad_shapes():
    with pytest.raises(ValueError, match=r"advantages shape \(3,\) must be \(B,\) or \(B, T\)"):
        clipped_surrogate(torch.ones(2, 4), torch.ones(3), 0.2, 0.2)


# ---- KL --------------------------------------------------------------------------------------

def test_kl_estimators_by_hand():
    logp = torch.log(torch.tensor([[0.5]], dtype=F64))
    ref = torch.log(torch.tensor([[0.25]], dtype=F64))
    # d = log π_ref − log π = −ln2:  k1 = ln2,  k2 = ½ ln²2,  k3 = e^{−ln2} + ln2 − 1 = ln2 − ½
    close(kl_penalty(logp, ref, "k1"), [[LN2]])
    close(kl_penalty(logp, ref, "k2"), [[0.5 * LN2**2]])
    close(kl_penalty(logp, ref, "k3"), [[LN2 - 0.5]])
    # reversed: d = ln2 → k1 = −ln2, k3 = 2 − ln2 − 1
    close(kl_penalty(ref, logp, "k1"), [[-LN2]])
    close(kl_penalty(ref, logp, "k3"), [[1 - LN2]])


def test_k3_nonnegative_and_all_zero_when_equal():
    x = torch.linspace(-30, 30, 2001, dtype=F64)[None, :]
    assert (kl_penalty(torch.zeros_like(x), x, "k3") >= 0).all()
    assert (kl_penalty(x, torch.zeros_like(x), "k3") >= 0).all()
    for kind in ("k1", "k2", "k3"):
        assert (kl_penalty(x, x.clone(), kind) == 0).all()
    with pytest.raises(ValueError, match=r"kind must be one of \('k1', 'k2', 'k3', 'k3_ratio'\)"):
        kl_penalty(x, x, "k4")
    with pytest.raises(ValueError, match="needs old_logp"):
        kl_penalty(x, x, "k3_ratio")


def test_k3_ratio_by_hand():
    # π = 1/2, π_ref = 1/4, π_old = 1/4: ρ = 2, k3 = ln2 − ½ → k3_ratio = 2·ln2 − 1
    logp, ref = torch.log(torch.tensor([[0.5]], dtype=F64)), torch.log(torch.tensor([[0.25]], dtype=F64))
    close(kl_penalty(logp, ref, "k3_ratio", old_logp=ref), [[2 * LN2 - 1]])
    close(kl_penalty(logp, ref, "k3_ratio", old_logp=logp), [[LN2 - 0.5]])  # on-policy: ρ = 1, k3


def _expected_kl_gradient(kind: str, theta: torch.Tensor, ref_logp: torch.Tensor, old_logp: torch.Tensor):
    """E_x[∇_θ k(x)] by exact enumeration over a vocabulary: x ~ π_θ (detached weights) for k1–k3,
    x ~ π_old for k3_ratio — what the KL term of a sampled-token loss contributes in expectation."""
    theta = theta.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, dim=-1)[None]  # (1, V): every token of the vocabulary, one "position" each
    k = kl_penalty(logp, ref_logp[None], kind, old_logp[None] if kind == "k3_ratio" else None)  # (1, V)
    weights = (old_logp if kind == "k3_ratio" else logp[0]).exp().detach()  # (V,) sampling probabilities
    (weights * k[0]).sum().backward()
    return theta.grad


def test_kl_estimators_expected_gradients_by_enumeration():
    torch.manual_seed(0)
    V = 5
    theta = torch.randn(V, dtype=F64)
    ref_logp = torch.log_softmax(torch.randn(V, dtype=F64), -1)
    old_logp = torch.log_softmax(torch.randn(V, dtype=F64), -1)

    def grad_of(fn):
        t = theta.clone().requires_grad_(True)
        fn(torch.log_softmax(t, -1)).backward()
        return t.grad

    reverse = grad_of(lambda lp: (lp.exp() * (lp - ref_logp)).sum())  # ∇ KL(π_θ ‖ π_ref)
    forward = grad_of(lambda lp: (ref_logp.exp() * (ref_logp - lp)).sum())  # ∇ KL(π_ref ‖ π_θ)
    assert not torch.allclose(reverse, forward, atol=1e-3)  # the two differ here, so the test can tell them apart
    torch.testing.assert_close(_expected_kl_gradient("k1", theta, ref_logp, old_logp), torch.zeros(V, dtype=F64),
                               rtol=0, atol=1e-14)
    torch.testing.assert_close(_expected_kl_gradient("k2", theta, ref_logp, old_logp), reverse, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(_expected_kl_gradient("k3", theta, ref_logp, old_logp), forward, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(_expected_kl_gradient("k3_ratio", theta, ref_logp, old_logp), reverse,
                               rtol=1e-10, atol=1e-14)


# ---- aggregation -----------------------------------------------------------------------------

# lengths 1 and 3; A = 1.5 and −0.25 per sequence; ratio 1 so ℓ_{i,t} = −A_i
LENGTH_MASK = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0]], dtype=F64)
ADV = torch.tensor([1.5, -0.25], dtype=F64)
EXPECTED_NEG_ADV = {
    "seq_mean_token_mean": -(1.5 + -0.25) / 2,  # each sequence's token mean is A_i: −0.625
    "token_mean": -(1 * 1.5 + 3 * -0.25) / 4,  # 4 tokens: −0.1875
    "seq_mean_token_sum_norm": -(1 * 1.5 / 4 + 3 * -0.25 / 4) / 2,  # L = 4: −0.09375
    "seq_mean_token_sum": -(1 * 1.5 + 3 * -0.25) / 2,  # −0.375
}


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_ratio_one_beta_zero_loss_is_minus_aggregated_advantage(mode, level):
    logp = torch.log(torch.tensor([[0.3, 0.2, 0.5, 0.9], [0.1, 0.7, 0.4, 0.6]], dtype=F64))
    loss, stats = grpo_loss(logp, logp.clone(), ADV, LENGTH_MASK, agg=mode, max_tokens=4,
                            ratio_level=level)
    close(loss, EXPECTED_NEG_ADV[mode])
    close(stats["ratio_mean"], 1.0)
    assert "kl" not in stats


def test_aggregate_loss_errors_are_named():
    x = torch.ones(2, 4, dtype=F64)
    with pytest.raises(ValueError, match="mode must be one of .*seq_mean_token_mean.*token_mean"):
        aggregate_loss(x, LENGTH_MASK, "mean")
    with pytest.raises(ValueError, match="needs max_tokens > 0"):
        aggregate_loss(x, LENGTH_MASK, "seq_mean_token_sum_norm")
    with pytest.raises(ValueError, match="num_tokens must be > 0"):
        aggregate_loss(x, LENGTH_MASK, "token_mean", num_tokens=0)


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_micro_batches_with_global_normalisers_sum_to_full_batch(mode, level, beta):
    logp, old, ref, adv, mask = random_batch(5)  # seed 5 clips tokens on both sides
    kw = dict(ratio_level=level, beta=beta, agg=mode, max_tokens=6, clip_eps_low=0.1,
              clip_eps_high=0.15)
    full, stats = grpo_loss(logp, old, adv, mask, ref_logp=ref, **kw)
    assert stats["clipfrac_low"] > 0 and stats["clipfrac_high"] > 0
    (full_grad,) = torch.autograd.grad(full, logp)
    n_tokens, n_seqs = mask.sum(), 8
    # the explicit normalisers equal the defaults on the whole batch
    explicit, _ = grpo_loss(logp, old, adv, mask, ref_logp=ref, num_tokens=n_tokens,
                            num_seqs=n_seqs, **kw)
    close(explicit.detach(), full.detach())
    micro = sum(grpo_loss(logp[i:i + 2], old[i:i + 2], adv[i:i + 2], mask[i:i + 2],
                          ref_logp=ref[i:i + 2], num_tokens=n_tokens, num_seqs=n_seqs, **kw)[0]
                for i in range(0, 8, 2))
    (micro_grad,) = torch.autograd.grad(micro, logp)
    close(micro.detach(), full.detach())
    close(micro_grad, full_grad, atol=1e-6)


# ---- grpo_loss -------------------------------------------------------------------------------

def test_equal_rewards_give_zero_policy_gradient():
    logp, old, _, _, mask = random_batch(3, b=4)
    adv = group_advantages(torch.ones(1, 4, dtype=F64)).reshape(-1)  # (B·G,) = (4,)
    for mode in AGG_MODES:
        loss, _ = grpo_loss(logp, old, adv, mask, agg=mode, max_tokens=6)
        (grad,) = torch.autograd.grad(loss, logp)
        assert loss == 0 and (grad == 0).all()


def test_kl_term_adds_beta_times_masked_kl_and_reports_it():
    logp = torch.log(torch.tensor([[0.5, 0.5]], dtype=F64))
    ref = torch.log(torch.tensor([[0.25, 0.9]], dtype=F64))
    mask = torch.tensor([[1, 0]])
    adv = torch.tensor([0.0], dtype=F64)
    loss, stats = grpo_loss(logp, logp, adv, mask, beta=0.1, ref_logp=ref)
    close(stats["kl"], LN2 - 0.5)  # k3 on the kept token only (see the hand KL test)
    close(loss, 0.1 * (LN2 - 0.5))
    _, stats = grpo_loss(logp, logp, adv, mask, ref_logp=ref, kl_kind="k1")  # β = 0: reported
    close(stats["kl"], LN2)


def test_grpo_loss_bad_inputs_are_named():
    logp, old, ref, adv, mask = random_batch(4, b=2)
    with pytest.raises(ValueError, match="beta > 0 .* needs ref_logp"):
        grpo_loss(logp, old, adv, mask, beta=0.04)
    with pytest.raises(ValueError, match=r"level must be one of \('token', 'sequence'\)"):
        grpo_loss(logp, old, adv, mask, ratio_level="seq")
    with pytest.raises(ValueError, match="grpo_loss: mask shape"):
        grpo_loss(logp, old, adv, mask[:, :2])
    with pytest.raises(ValueError, match="old_logp shape"):
        grpo_loss(logp, old[:1], adv, mask)


def test_fully_masked_row_and_inf_padding_stay_finite():
    logp, old, ref, adv, mask = random_batch(5, b=3)
    mask[1] = 0
    pad = torch.zeros_like(mask, dtype=torch.bool)
    pad[1] = True
    for mode in AGG_MODES:
        for level in ("token", "sequence"):
            loss, stats = grpo_loss(logp, old.masked_fill(pad, -math.inf), adv, mask,
                                    ref_logp=ref.masked_fill(pad, math.nan), beta=0.1,
                                    agg=mode, max_tokens=6, ratio_level=level)
            (grad,) = torch.autograd.grad(loss, logp)
            assert torch.isfinite(loss) and torch.isfinite(grad).all()
            assert (grad[1] == 0).all()
            assert all(torch.isfinite(v) for v in stats.values())


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 5), t=st.integers(1, 7),
       mode=st.sampled_from(AGG_MODES), level=st.sampled_from(["token", "sequence"]),
       beta=st.sampled_from([0.0, 0.04, 1.0]), kind=st.sampled_from(["k1", "k2", "k3", "k3_ratio"]),
       scale=st.floats(0.0, 8.0))
def test_property_no_nan_or_inf_in_loss_and_gradients(seed, b, t, mode, level, beta, kind, scale):
    g = torch.Generator().manual_seed(seed)
    logp = (-10 * torch.rand(b, t, generator=g, dtype=F64)).requires_grad_()
    old = logp.detach() + scale * torch.randn(b, t, generator=g, dtype=F64)
    ref = logp.detach() + scale * torch.randn(b, t, generator=g, dtype=F64)
    adv = scale * torch.randn(b, t, generator=g, dtype=F64)
    mask = torch.rand(b, t, generator=g) < 0.5
    mask[torch.arange(b), torch.randint(0, t, (b,), generator=g)] = True  # ≥ 1 token per row
    loss, stats = grpo_loss(logp, old, adv, mask, beta=beta, ref_logp=ref, kl_kind=kind,
                            ratio_level=level, agg=mode, max_tokens=t,
                            clip_eps_low=0.2, clip_eps_high=0.28)
    (grad,) = torch.autograd.grad(loss, logp)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    assert all(torch.isfinite(v) for v in stats.values())


# ---- entropy ---------------------------------------------------------------------------------

def test_entropy_uniform_is_log_v_and_hand_value():
    uniform = torch.full((2, 3, 7), 4.2, dtype=F64)
    close(entropy_from_logits(uniform), torch.full((2, 3), math.log(7), dtype=F64))
    # p = (½, ¼, ¼): H = ½ ln2 + 2·¼ ln4 = 1.5 ln2; huge shifts do not overflow
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25]]], dtype=F64)) + 1e4
    close(entropy_from_logits(logits), [[1.5 * LN2]])


def test_entropy_with_minus_inf_logits_is_finite_in_value_and_gradient():
    logits = torch.tensor([[[0.0, 0.0, -math.inf]]], dtype=F64, requires_grad=True)
    h = entropy_from_logits(logits)
    close(h.detach(), [[LN2]])
    h.sum().backward()
    assert torch.isfinite(logits.grad).all()
