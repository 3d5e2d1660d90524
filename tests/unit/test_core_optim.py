"""LAMB's update rule (`seqrl.core.optim.lamb_direction`, `seqrl.utils.optim.Lamb`) against hand values."""

import math

import pytest
import torch

from seqrl.core.optim import lamb_direction
from seqrl.utils.optim import Lamb

F64 = dict(dtype=torch.float64)


def test_first_step_with_decay_and_trust_ratio():
    # w = (3, 4), ‖w‖ = 5; g = (1, 2); t = 1, β = (0.9, 0.999), ε = 0, λ = 0.1.
    # m = 0.1·g = (0.1, 0.2), v = 0.001·g² = (0.001, 0.004); m̂ = m/0.1 = (1, 2), v̂ = v/0.001 = (1, 4)
    # m̂/√v̂ = (1, 1); u = (1, 1) + 0.1·(3, 4) = (1.3, 1.4); ‖u‖ = √3.65; φ = 5/√3.65; d = φ·u
    w, g = torch.tensor([3.0, 4.0], **F64), torch.tensor([1.0, 2.0], **F64)
    d, m, v = lamb_direction(w, g, torch.zeros(2, **F64), torch.zeros(2, **F64), 1, (0.9, 0.999), 0.0, 0.1, True)
    phi = 5.0 / math.sqrt(3.65)
    torch.testing.assert_close(d, torch.tensor([1.3 * phi, 1.4 * phi], **F64), rtol=1e-12, atol=0)
    torch.testing.assert_close(m, torch.tensor([0.1, 0.2], **F64), rtol=1e-12, atol=0)
    torch.testing.assert_close(v, torch.tensor([0.001, 0.004], **F64), rtol=1e-12, atol=0)
    assert float(d.norm()) == pytest.approx(5.0, rel=1e-12)  # the trust ratio makes ‖d‖ = ‖w‖


def test_second_step_without_adaptation_is_adam():
    # state from above, g = (−1, 0), t = 2, λ = 0, no adaptation, ε = 0:
    # m = 0.9·(0.1, 0.2) + 0.1·(−1, 0) = (−0.01, 0.18); v = 0.999·(0.001, 0.004) + 0.001·(1, 0) = (0.001999, 0.003996)
    # bias corrections 1 − 0.9² = 0.19 and 1 − 0.999² = 0.001999
    # d = (m/0.19) / √(v/0.001999) = (−0.01/0.19 / 1, 0.18/0.19 / √(0.003996/0.001999))
    m0, v0 = torch.tensor([0.1, 0.2], **F64), torch.tensor([0.001, 0.004], **F64)
    d, m, v = lamb_direction(torch.tensor([3.0, 4.0], **F64), torch.tensor([-1.0, 0.0], **F64), m0, v0, 2,
                             (0.9, 0.999), 0.0, 0.0, False)
    expected = torch.tensor([-0.01 / 0.19, 0.18 / 0.19 / math.sqrt(0.003996 / 0.001999)], **F64)
    torch.testing.assert_close(d, expected, rtol=1e-12, atol=0)
    torch.testing.assert_close(m, torch.tensor([-0.01, 0.18], **F64), rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(v, torch.tensor([0.001999, 0.003996], **F64), rtol=1e-12, atol=0)
    assert torch.equal(m0, torch.tensor([0.1, 0.2], **F64))  # inputs untouched


def test_zero_weights_take_an_unscaled_step():
    # ‖w‖ = 0 → φ = 1: d = m̂/√v̂ = sign(g) at t = 1 (ε = 0)
    d, _, _ = lamb_direction(torch.zeros(3, **F64), torch.tensor([2.0, -0.5, 1.0], **F64), torch.zeros(3, **F64),
                             torch.zeros(3, **F64), 1, (0.9, 0.999), 0.0, 0.5, True)
    torch.testing.assert_close(d, torch.tensor([1.0, -1.0, 1.0], **F64), rtol=1e-12, atol=0)


def test_optimizer_clips_the_global_norm_then_steps():
    # Grads (3, 4): global norm 5 > max 1 → grads divided by 5 before the moments.
    # At t = 1 the direction is sign(g) whatever the scale (ε = 0), so read the clip from the moments:
    # m = 0.1·g/5.
    a = torch.nn.Parameter(torch.tensor([1.0, 1.0], **F64))
    b = torch.nn.Parameter(torch.tensor([2.0], **F64))  # no gradient: left alone
    a.grad = torch.tensor([3.0, 4.0], **F64)
    opt = Lamb([a, b], lr=0.1, eps=0.0, weight_decay=0.0, max_grad_norm=1.0)
    opt.step()
    torch.testing.assert_close(opt.state[a]["exp_avg"], torch.tensor([0.06, 0.08], **F64), rtol=1e-12, atol=0)
    torch.testing.assert_close(a.detach(), torch.tensor([0.9, 0.9], **F64), rtol=1e-12, atol=0)  # 1 − 0.1·sign(g)
    assert torch.equal(b.detach(), torch.tensor([2.0], **F64)) and b not in opt.state


def test_optimizer_state_round_trips():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).double()
    opt = Lamb(model.parameters(), lr=1e-2, weight_decay=5e-4, eps=1e-8)
    for _ in range(3):
        model(torch.randn(8, 4, **F64)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    clone = torch.nn.Linear(4, 3).double()
    clone.load_state_dict(model.state_dict())
    opt2 = Lamb(clone.parameters(), lr=1e-2, weight_decay=5e-4, eps=1e-8)
    opt2.load_state_dict(opt.state_dict())
    x = torch.randn(8, 4, **F64)
    for m, o in ((model, opt), (clone, opt2)):
        m(x).square().mean().backward()
        o.step()
    for p, q in zip(model.parameters(), clone.parameters()):
        assert torch.equal(p, q)


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="betas"):
        Lamb([torch.nn.Parameter(torch.zeros(1))], betas=(0.9, 1.0))
