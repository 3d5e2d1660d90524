"""PPO-with-critic math against hand values (float64): KL-shaped rewards, clipped value loss,
explained variance, GAE = returns-to-go − values at γ = λ = 1, and gae_then_group."""

import math

import pytest
import torch

from seqrl.core.advantages import gae, returns_to_go
from seqrl.core.ppo import clipped_value_loss, explained_variance, group_whiten_tokens, kl_shaped_rewards

F64 = torch.float64


def t(x):
    return torch.tensor(x, dtype=F64)


def close(x: torch.Tensor, want) -> bool:
    return torch.allclose(x.detach(), t(want), atol=1e-12, rtol=0)


def test_kl_in_reward_one_penalty_per_completion_token_score_only_on_the_last():
    scores = t([1.0, 2.0])
    logp = t([[-1.0, -2.0, -3.0], [-1.0, -1.0, 0.0]])
    ref = t([[-1.5, -2.0, -2.0], [-2.0, -1.0, 9.0]])  # the padding entry (9.0) must not count
    mask = t([[1, 1, 1], [1, 1, 0]])
    rewards, kl = kl_shaped_rewards(scores, logp, ref, mask, beta=0.1)
    assert close(kl, [[0.5, 0.0, -1.0], [1.0, 0.0, 0.0]])
    # −β·k1 on each token, the score added at the last completion token (index 2, then index 1)
    assert close(rewards, [[-0.05, 0.0, 0.1 + 1.0], [-0.1, 2.0, 0.0]])
    r0, _ = kl_shaped_rewards(scores, logp, None, mask, beta=0.0)
    assert r0.tolist() == [[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]]
    with pytest.raises(ValueError, match="needs ref_logp"):
        kl_shaped_rewards(scores, logp, None, mask, beta=0.1)


def test_gae_with_gamma_lambda_one_is_returns_to_go_minus_values():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(4, generator=g, dtype=F64)
    logp, ref = -torch.rand(4, 6, generator=g, dtype=F64), -torch.rand(4, 6, generator=g, dtype=F64)
    mask = t([[1] * 6, [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]])
    values = torch.randn(4, 6, generator=g, dtype=F64)
    rewards, _ = kl_shaped_rewards(scores, logp, ref, mask, beta=0.05)
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    want = (returns_to_go(rewards) - values) * mask
    assert torch.allclose(adv, want, atol=1e-12)
    assert torch.allclose(ret, returns_to_go(rewards) * mask, atol=1e-12)


def test_clipped_value_loss_hand_values_and_gradient():
    values = t([[1.0, 0.0, 0.0, 7.0]]).requires_grad_(True)
    old = t([[0.5, 0.5, 1.0, 0.0]])
    returns = t([[2.0, -1.0, 0.5, 0.0]])
    mask = t([[1, 1, 1, 0]])
    loss, frac = clipped_value_loss(values, old, returns, mask, clip=0.2)
    # token 0: V_clip = 0.5 + 0.2 = 0.7; max((1 − 2)², (0.7 − 2)²) = 1.69 → 0.845 (clipped term wins)
    # token 1: V_clip = 0.5 − 0.2 = 0.3; max((0 + 1)², (0.3 + 1)²) = 1.69 → 0.845 (clipped term wins)
    # token 2: V_clip = 1.0 − 0.2 = 0.8; max((0 − 0.5)², (0.8 − 0.5)²) = 0.25 → 0.125 (plain term wins)
    assert close(loss, [[0.845, 0.845, 0.125, 0.0]])
    assert frac.item() == pytest.approx(2 / 3)
    loss.sum().backward()
    # where the clipped term wins and V − V_old is outside ±c, no gradient; elsewhere V − R
    assert close(values.grad, [[0.0, 0.0, -0.5, 0.0]])
    plain, frac0 = clipped_value_loss(values.detach(), old, returns, mask, clip=None)
    assert close(plain, [[0.5, 0.5, 0.125, 0.0]]) and frac0.item() == 0


def test_explained_variance_hand_values():
    mask = t([[1, 1, 1, 0]])
    r = t([[1.0, 2.0, 3.0, 100.0]])
    assert explained_variance(r, r, mask).item() == pytest.approx(1.0)
    # residual [1, 0, −1]: var 1; var(R) = 1 → 0
    assert explained_variance(t([[0.0, 2.0, 4.0, 0.0]]), r, mask).item() == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(explained_variance(r, t([[1.0, 1.0, 1.0, 0.0]]), mask).item())


def test_gae_then_group_hand_values():
    # two samples of one prompt; γ = 1, λ = 0.95
    rewards = t([[0.0, 1.0], [0.0, 0.0]])
    values = t([[0.5, 0.5], [0.5, 0.2]])
    mask = t([[1, 1], [1, 0]])
    adv, _ = gae(rewards, values, mask, gamma=1.0, lam=0.95)
    # row 0: δ1 = 1 − 0.5 = 0.5, A1 = 0.5; δ0 = 0 + 0.5 − 0.5 = 0, A0 = 0.95 · 0.5 = 0.475
    # row 1 (one token): δ0 = 0 − 0.5, A0 = −0.5
    assert close(adv, [[0.475, 0.5], [-0.5, 0.0]])
    out = group_whiten_tokens(adv, mask, group_size=2, eps=0.0)
    xs = [0.475, 0.5, -0.5]
    mean = sum(xs) / 3
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / 2)
    want = [[(0.475 - mean) / std, (0.5 - mean) / std], [(-0.5 - mean) / std, 0.0]]
    assert close(out, want)
    # two groups are whitened separately: the second group's scale does not reach the first
    both = group_whiten_tokens(torch.cat([adv, 100 * adv]), torch.cat([mask, mask]), group_size=2, eps=0.0)
    assert close(both[:2], want)
    assert close(both[2:], want)
    with pytest.raises(ValueError, match="multiple of group_size"):
        group_whiten_tokens(adv, mask, group_size=3)
