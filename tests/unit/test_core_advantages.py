"""Advantage estimators against hand-computed values (float64, atol 1e-12)."""

from __future__ import annotations

import math

import pytest
import torch

from seqrl.core.advantages import (compute_group_advantages, gae, group_advantages,
                                   reinforce_pp_advantages, reinforce_pp_token_advantages, returns_to_go, rloo_advantages,
                                   zero_variance_groups)

F64 = torch.float64
R = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]], dtype=F64)


def close(a, b):
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=F64), atol=1e-12, rtol=0)


def test_group_scale_uses_unbiased_group_std():
    # row 0: mean 1/2, deviations ±1/2, unbiased var 4·(1/4)/3 = 1/3 → A = ±(1/2)/(sqrt(1/3) + 1e-4)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    expected = [[a, -a, -a, a], [0.0, 0.0, 0.0, 0.0]]
    close(group_advantages(R, "group"), expected)
    close(compute_group_advantages(R), expected)


def test_batch_scale_divides_by_std_of_all_rewards():
    # 8 rewards: six 1s, two 0s; mean 3/4; Σ(r − 3/4)² = 6/16 + 2·9/16 = 3/2; unbiased var 3/14
    a = 0.5 / (math.sqrt(3 / 14) + 1e-4)
    close(group_advantages(R, "batch"), [[a, -a, -a, a], [0.0] * 4])


def test_no_scale_is_dr_grpo():
    close(group_advantages(R, "none"), [[0.5, -0.5, -0.5, 0.5], [0.0] * 4])


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_equal_rewards_give_exactly_zero(scale):
    r = torch.full((3, 5), 0.1, dtype=F64)  # 0.1 is inexact in binary: the mean may round
    for fn in (lambda x: group_advantages(x, scale), rloo_advantages):
        out = fn(r)
        assert (out == 0).all()


def test_rloo_hand_values():
    # [1, 0, 0] → [1 − (0+0)/2, 0 − (1+0)/2, 0 − (1+0)/2]
    close(rloo_advantages(torch.tensor([[1.0, 0.0, 0.0]], dtype=F64)), [[1.0, -0.5, -0.5]])
    # G/(G−1)·(r − mean): 4/3 · ±1/2
    close(rloo_advantages(R), [[2 / 3, -2 / 3, -2 / 3, 2 / 3], [0.0] * 4])


def test_reinforce_pp_global_normalisation():
    r = torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=F64)
    # mean 1/4; deviations 3/4, −1/4 ×3; unbiased var (9/16 + 3/16)/3 = 1/4
    s = math.sqrt(0.25 + 1e-8)
    close(reinforce_pp_advantages(r), [[0.75 / s, -0.25 / s], [-0.25 / s, -0.25 / s]])
    # masked: kept 1, 0, 0 (99 ignored): mean 1/3, var (4/9 + 1/9 + 1/9)/2 = 1/3
    r2 = torch.tensor([[1.0, 0.0], [0.0, 99.0]], dtype=F64)
    m2 = torch.tensor([[1, 1], [1, 0]])
    s2 = math.sqrt(1 / 3 + 1e-8)
    close(reinforce_pp_advantages(r2, m2), [[(2 / 3) / s2, (-1 / 3) / s2], [(-1 / 3) / s2, 0.0]])


def test_reinforce_pp_token_level_weighs_completions_by_length():
    # rewards 1, 0 with 3 and 1 tokens: token grid [1, 1, 1, 0] → mean 3/4, unbiased var (3·1/16 + 9/16)/3 = 1/4
    r = torch.tensor([[1.0, 0.0]], dtype=F64)
    L = torch.tensor([[3, 1]])
    s = math.sqrt(0.25 + 1e-8)
    close(reinforce_pp_token_advantages(r, L), [[0.25 / s, -0.75 / s]])
    # the sequence-level form would say ±1/√2 (mean 1/2, var 1/2): the long correct answer weighs more here
    close(reinforce_pp_advantages(r), [[0.5 / math.sqrt(0.5 + 1e-8), -0.5 / math.sqrt(0.5 + 1e-8)]])
    # equals masked_whiten over the broadcast token grid; an empty completion gets 0
    from seqrl.core.masking import masked_whiten

    r3 = torch.tensor([[2.0, -1.0, 0.5], [0.0, 1.0, 3.0]], dtype=F64)
    L3 = torch.tensor([[4, 2, 0], [1, 5, 3]])
    grid = r3.reshape(-1, 1).expand(-1, 5)  # (6, 5)
    mask = (torch.arange(5)[None, :] < L3.reshape(-1, 1)).long()  # (6, 5)
    tok = masked_whiten(grid, mask)  # (6, 5)
    per_row = tok.sum(1) / mask.sum(1).clamp_min(1)
    close(reinforce_pp_token_advantages(r3, L3), per_row.reshape(2, 3).tolist())
    assert float(reinforce_pp_token_advantages(r3, L3)[0, 2]) == 0.0
    # equal rewards: zero advantages
    close(reinforce_pp_token_advantages(torch.ones(2, 2, dtype=F64), torch.tensor([[1, 2], [3, 4]])), [[0.0, 0.0]] * 2)
    with pytest.raises(ValueError, match="one shape"):
        reinforce_pp_token_advantages(r, torch.tensor([3, 1]))


def test_zero_variance_groups():
    r = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]], dtype=F64)
    assert zero_variance_groups(r).tolist() == [True, False, True]


@pytest.mark.parametrize("fn", [lambda r: group_advantages(r, "group"),
                                lambda r: group_advantages(r, "none"), rloo_advantages])
def test_group_size_below_two_is_an_error(fn):
    with pytest.raises(ValueError, match="group size G"):
        fn(torch.ones(4, 1, dtype=F64))


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match=r"scale must be one of \('group', 'batch', 'none'\)"):
        group_advantages(R, "std")
    with pytest.raises(ValueError, match=r"rewards must have shape \(B, G\)"):
        group_advantages(torch.ones(4, dtype=F64))
    with pytest.raises(ValueError, match="gamma must be in"):
        gae(R, R, torch.ones_like(R), gamma=1.5, lam=0.9)
    with pytest.raises(ValueError, match="values shape"):
        gae(R, R[:, :2], torch.ones_like(R), gamma=1.0, lam=0.9)


def test_gae_three_steps_by_hand_with_masked_tail():
    gamma, lam = 0.9, 0.8
    # junk in the masked tail (rewards 9, values 7) must change nothing
    rewards = torch.tensor([[0.0, 0.0, 1.0, 9.0, 9.0]], dtype=F64)
    values = torch.tensor([[0.5, 0.6, 0.7, 7.0, 7.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    # δ2 = 1 − 0.7 = 0.3 (V after the end is 0); δ1 = 0 + 0.9·0.7 − 0.6 = 0.03;
    # δ0 = 0 + 0.9·0.6 − 0.5 = 0.04; γλ = 0.72
    # A2 = 0.3; A1 = 0.03 + 0.72·0.3 = 0.246; A0 = 0.04 + 0.72·0.246 = 0.21712
    adv, ret = gae(rewards, values, mask, gamma, lam)
    close(adv, [[0.21712, 0.246, 0.3, 0.0, 0.0]])
    close(ret, [[0.21712 + 0.5, 0.246 + 0.6, 0.3 + 0.7, 0.0, 0.0]])


def test_gae_skips_prompt_positions_and_lam_one_gives_returns_minus_values():
    rewards = torch.tensor([[5.0, 0.0, 2.0]], dtype=F64)  # position 0 is prompt: ignored
    values = torch.tensor([[3.0, 0.5, 1.0]], dtype=F64)
    mask = torch.tensor([[0, 1, 1]])
    # λ = 1, γ = 0.5: A_t = G_t − V_t; G2 = 2, G1 = 0 + 0.5·2 = 1
    adv, ret = gae(rewards, values, mask, gamma=0.5, lam=1.0)
    close(adv, [[0.0, 1.0 - 0.5, 2.0 - 1.0]])
    close(ret, [[0.0, 1.0, 2.0]])


def test_returns_to_go():
    r = torch.tensor([[1.0, 2.0, 3.0], [1.0, 0.0, 0.0]], dtype=F64)
    # γ = 0.5: G2 = 3, G1 = 2 + 0.5·3 = 3.5, G0 = 1 + 0.5·3.5 = 2.75; row 1: [1, 0, 0]
    close(returns_to_go(r, 0.5), [[2.75, 3.5, 3.0], [1.0, 0.0, 0.0]])
    close(returns_to_go(r), [[6.0, 5.0, 3.0], [1.0, 0.0, 0.0]])  # γ = 1


def test_returns_to_go_second_argument_is_gamma():
    # the one returns_to_go: (rewards, gamma); no scale argument (the DT scales R̂ in the model)
    r = torch.tensor([1.0, 2.0, 4.0], dtype=F64)
    close(returns_to_go(r, 0.5), [3.0, 4.0, 4.0])
    with pytest.raises(TypeError):
        returns_to_go(r, 0.5, 2.0)


def test_returns_to_go_any_leading_shape_and_edges():
    r = torch.tensor([[[1.0, 2.0, 4.0], [0.0, 0.0, 8.0]]], dtype=F64)  # (1, 2, 3)
    # γ = 0.5: row 0: 4, 2 + 2 = 4, 1 + 2 = 3; row 1: 8, 4, 2
    close(returns_to_go(r, gamma=0.5), [[[3.0, 4.0, 4.0], [2.0, 4.0, 8.0]]])
    close(returns_to_go(r, gamma=0.0), r)  # γ = 0: G_t = r_t
    # γ = 1 sums exactly (integers in float64)
    assert torch.equal(returns_to_go(torch.tensor([1.0, 2.0, 3.0], dtype=F64)), torch.tensor([6.0, 5.0, 3.0], dtype=F64))
    assert returns_to_go(torch.zeros(0, dtype=F64)).shape == (0,)
    assert torch.equal(returns_to_go(torch.tensor([-7.0], dtype=F64)), torch.tensor([-7.0], dtype=F64))
    with pytest.raises(ValueError, match="gamma"):
        returns_to_go(torch.ones(2), gamma=1.5)
    with pytest.raises(ValueError, match="float tensor"):
        returns_to_go(torch.ones(2, dtype=torch.long))
