"""DT sequence layout against hand-computed values, with distinguishable values (rtg=1, state=2, action=3)."""

from __future__ import annotations

import math

import pytest
import torch

from seqrl.core.losses import action_loss
from seqrl.core.sequences import (
    causal_attention_mask,
    deinterleave,
    interleave,
    interleave_mask,
    left_pad,
    top_return_episodes,
)

f64 = torch.float64


def test_interleave_uses_distinguishable_values():
    B, K, d = 2, 3, 2
    rtg = torch.full((B, K, d), 1.0, dtype=f64)
    states = torch.full((B, K, d), 2.0, dtype=f64)
    actions = torch.full((B, K, d), 3.0, dtype=f64)
    tokens = interleave(rtg, states, actions)
    assert tokens.shape == (B, 3 * K, d)
    assert tokens[0, :, 0].tolist() == [1.0, 2.0, 3.0] * K
    # the step index survives too: R̂_t = 10 + t, s_t = 20 + t, a_t = 30 + t
    t = torch.arange(K, dtype=f64)[None, :, None].expand(B, K, d)
    tokens = interleave(10 + t, 20 + t, 30 + t)
    assert tokens[1, :, 1].tolist() == [10, 20, 30, 11, 21, 31, 12, 22, 32]
    r_out, s_out, a_out = deinterleave(tokens)
    assert torch.equal(r_out, 10 + t) and torch.equal(s_out, 20 + t) and torch.equal(a_out, 30 + t)


def test_two_stream_interleave_and_round_trip():
    s = torch.tensor([[[2.0], [4.0]]])
    a = torch.tensor([[[3.0], [5.0]]])
    tokens = interleave(s, a)
    assert tokens[0, :, 0].tolist() == [2.0, 3.0, 4.0, 5.0]
    assert [x.tolist() for x in deinterleave(tokens, n=2)] == [s.tolist(), a.tolist()]


def test_interleave_rejects_mismatched_streams():
    with pytest.raises(ValueError, match="stream 1 has shape"):
        interleave(torch.ones(1, 2, 3), torch.ones(1, 3, 3))
    with pytest.raises(ValueError, match=r"\(B, 3·K, d\)"):
        deinterleave(torch.ones(1, 4, 2))


def test_interleave_mask_repeats_each_step_for_its_tokens():
    mask = torch.tensor([[0, 1, 1], [0, 0, 1]])
    assert interleave_mask(mask).tolist() == [[0, 0, 0, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 1, 1, 1]]


def test_causal_attention_mask_by_hand():
    # tokens 0 is padding, 1..2 real
    allowed = causal_attention_mask(torch.tensor([[0, 1, 1]]))
    assert allowed.shape == (1, 1, 3, 3)
    assert allowed[0, 0].tolist() == [
        [True, False, False],   # the padded query sees only itself (no empty softmax row)
        [False, True, False],   # real queries never see the padded key
        [False, True, True],
    ]
    # no padding: plain lower-triangular
    assert torch.equal(causal_attention_mask(torch.ones(1, 4))[0, 0], torch.ones(4, 4, dtype=torch.bool).tril())
    # fully padded row: only the diagonal, still no empty row
    assert torch.equal(causal_attention_mask(torch.zeros(1, 3))[0, 0], torch.eye(3, dtype=torch.bool))


def test_left_pad_short_and_long():
    x = torch.tensor([[2.0], [4.0]])
    padded, mask = left_pad(x, 4, value=-1.0)
    assert padded[:, 0].tolist() == [-1.0, -1.0, 2.0, 4.0] and mask.tolist() == [0, 0, 1, 1]
    long = torch.arange(6.0)
    window, mask = left_pad(long, 3)
    assert window.tolist() == [3.0, 4.0, 5.0] and mask.tolist() == [1, 1, 1]
    exact, mask = left_pad(long, 6)
    assert torch.equal(exact, long) and mask.tolist() == [1] * 6
    empty, mask = left_pad(torch.zeros(0, 2), 2)
    assert empty.shape == (2, 2) and mask.tolist() == [0, 0]
    with pytest.raises(ValueError, match="length must be >= 1"):
        left_pad(long, 0)


def test_top_return_episodes_fills_the_step_budget_best_first():
    returns = torch.tensor([5.0, 9.0, 1.0, 7.0])
    lengths = torch.tensor([10, 20, 30, 40])  # 100 steps
    # 50%: 50 steps: best (ep 1, 20) → +ep 3 (40) = 60 > 50 → stop: [1]
    assert top_return_episodes(returns, lengths, 0.5).tolist() == [1]
    # 60%: ep 1 + ep 3 = 60 ≤ 60; + ep 0 = 70 > 60 → [1, 3]
    assert top_return_episodes(returns, lengths, 0.6).tolist() == [1, 3]
    assert top_return_episodes(returns, lengths, 1.0).tolist() == [1, 3, 0, 2]
    # tiny fraction: the best episode is always kept even though it exceeds the budget
    assert top_return_episodes(returns, lengths, 0.01).tolist() == [1]
    # ties: lower index first
    assert top_return_episodes(torch.tensor([3.0, 3.0, 3.0]), torch.tensor([1, 1, 1]), 0.67).tolist() == [0, 1]
    with pytest.raises(ValueError, match="fraction must be in"):
        top_return_episodes(returns, lengths, 0.0)


def test_action_loss_counts_real_steps_only():
    pred = torch.tensor([[[1.0, 2.0], [9.0, 9.0], [0.0, 0.0]]], dtype=f64)   # (1, 3, 2)
    target = torch.tensor([[[0.0, 0.0], [0.0, 0.0], [1.0, 3.0]]], dtype=f64)
    mask = torch.tensor([[1, 0, 1]])  # step 1 is padding: its error 81 + 81 must not count
    # real squared errors: step 0: 1 + 4, step 2: 1 + 9 → 15 over 2 steps · 2 dims = 3.75
    assert action_loss(pred, target, mask).item() == pytest.approx(3.75, abs=1e-12)


def test_action_loss_discrete_cross_entropy_by_hand():
    logits = torch.tensor([[[0.0, 0.0], [2.0, 0.0], [5.0, -5.0]]], dtype=f64)
    target = torch.tensor([[0, 1, 1]])
    mask = torch.tensor([[1, 1, 0]])
    # step 0: −log(1/2) = log 2; step 1: −log(e^0 / (e^2 + e^0)) = log(1 + e^2); step 2 padded
    expected = (math.log(2) + math.log(1 + math.e**2)) / 2
    assert action_loss(logits, target, mask, discrete=True).item() == pytest.approx(expected, abs=1e-12)


def test_action_loss_token_per_dimension_by_hand():
    # continuous actions as D = 2 tokens per step (the VLA's binned actions): logits (1, 2, 2, 3)
    logits = torch.tensor([[[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]],
                            [[9.0, 0.0, 0.0], [0.0, 9.0, 0.0]]]], dtype=f64)
    target = torch.tensor([[[2, 0], [1, 1]]])
    mask = torch.tensor([[1, 0]])  # step 1 is padding
    # step 0: dim 0 −log(1/3) = log 3; dim 1 −log(e / (e + 2)) = log(e + 2) − 1; mean over the 2 dims
    expected = (math.log(3) + math.log(math.e + 2) - 1) / 2
    assert action_loss(logits, target, mask, discrete=True).item() == pytest.approx(expected, abs=1e-12)
    with pytest.raises(ValueError, match=r"discrete targets must have shape \(1, 2, 2\)"):
        action_loss(logits, target[..., 0], mask, discrete=True)


def test_action_loss_without_real_steps_is_zero_not_nan():
    pred = torch.ones(2, 3, 1, dtype=f64, requires_grad=True)
    loss = action_loss(pred, torch.zeros(2, 3, 1, dtype=f64), torch.zeros(2, 3))
    assert loss.item() == 0.0
    loss.backward()
    assert torch.equal(pred.grad, torch.zeros_like(pred))
    with pytest.raises(ValueError, match="mask must have shape"):
        action_loss(pred, pred, torch.ones(2, 2))
