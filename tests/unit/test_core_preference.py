"""Bradley–Terry loss, its gradient and the last-real-token index, against hand values (float64)."""

import math

import pytest
import torch

from seqrl.core.preference import bradley_terry_loss, last_token_index


def sig(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_bt_loss_and_gradient_match_hand_values():
    c = torch.tensor([1.0, 0.0], dtype=torch.float64, requires_grad=True)
    r = torch.tensor([0.0, 2.0], dtype=torch.float64, requires_grad=True)
    loss, stats = bradley_terry_loss(c, r)
    # d = [1, -2]: loss = (log(1 + e^-1) + log(1 + e^2)) / 2
    assert loss.item() == pytest.approx((math.log(1 + math.exp(-1)) + math.log(1 + math.exp(2))) / 2, abs=1e-12)
    assert loss.item() == pytest.approx(1.2200948492805977, abs=1e-12)
    loss.backward()
    # ∂/∂r_c,i = −(1 − σ(d_i)) / B, ∂/∂r_r,i = +(1 − σ(d_i)) / B
    want = [-(1 - sig(1.0)) / 2, -(1 - sig(-2.0)) / 2]
    assert c.grad.tolist() == pytest.approx(want, abs=1e-12)
    assert r.grad.tolist() == pytest.approx([-w for w in want], abs=1e-12)
    assert stats["accuracy"].item() == 0.5 and stats["margin"].item() == pytest.approx(-0.5)


def test_bt_margin_and_centering():
    c = torch.tensor([1.0, 0.0], dtype=torch.float64, requires_grad=True)
    r = torch.tensor([0.0, 2.0], dtype=torch.float64, requires_grad=True)
    m = torch.tensor([0.5, 1.0], dtype=torch.float64)
    loss, stats = bradley_terry_loss(c, r, margin=m, center_coef=0.1)
    # logits d − m = [0.5, −3]; centring 0.1 · mean((c + r)²) = 0.1 · (1 + 4) / 2 = 0.25
    want = (math.log(1 + math.exp(-0.5)) + math.log(1 + math.exp(3))) / 2 + 0.25
    assert loss.item() == pytest.approx(want, abs=1e-12)
    loss.backward()
    # centring gradient 0.1 · 2 (c + r) / 2 = 0.1 (c + r) on both scores
    assert c.grad.tolist() == pytest.approx([-(1 - sig(0.5)) / 2 + 0.1, -(1 - sig(-3.0)) / 2 + 0.2], abs=1e-12)
    assert r.grad.tolist() == pytest.approx([(1 - sig(0.5)) / 2 + 0.1, (1 - sig(-3.0)) / 2 + 0.2], abs=1e-12)
    assert stats["margin"].item() == pytest.approx(-0.5)  # the raw score gap, margin not subtracted


def test_bt_tie_counts_wrong_and_shapes_are_checked():
    _, stats = bradley_terry_loss(torch.zeros(3), torch.zeros(3))
    assert stats["accuracy"].item() == 0.0
    with pytest.raises(ValueError, match="one shape"):
        bradley_terry_loss(torch.zeros(3), torch.zeros(2))
    with pytest.raises(ValueError, match="center_coef"):
        bradley_terry_loss(torch.zeros(3), torch.zeros(3), center_coef=-1)


def test_last_token_index_under_left_right_and_mixed_padding():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    assert last_token_index(mask).tolist() == [3, 2, 0, 3]
    with pytest.raises(ValueError, match="no real token"):
        last_token_index(torch.tensor([[0, 0]]))
