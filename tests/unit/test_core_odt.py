"""Online DT math against hand-computed values (float64, tight tolerance), each with a degenerate case."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from seqrl.core.odt import (
    log_one_minus_tanh_sq,
    odt_policy_loss,
    squash_log_std,
    squashed_gaussian_entropy,
    squashed_gaussian_log_likelihood,
    squashed_gaussian_mean,
    squashed_gaussian_sample,
    temperature_loss,
)

f64 = torch.float64
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)  # 0.9189385332046727


def t(*values):
    return torch.tensor(values, dtype=f64)


def close(a, b, tol=1e-12):
    return torch.allclose(torch.as_tensor(a, dtype=f64), torch.as_tensor(b, dtype=f64), atol=tol, rtol=0)


# --------------------------------------------------------------------------------------------------
# log σ squashing


def test_squash_log_std_maps_to_the_bounds():
    # min + ½(max − min)(tanh(raw) + 1) with [−5, 2]: raw = 0 → −5 + 3.5 = −1.5;
    # tanh(raw) = 0.5 → −5 + 3.5·1.5 = 0.25; raw = ±∞ → 2 / −5 exactly
    raw = t(0.0, math.atanh(0.5), math.inf, -math.inf)
    assert close(squash_log_std(raw), t(-1.5, 0.25, 2.0, -5.0))
    # other bounds [−2, 0]: raw = 0 → −1
    assert close(squash_log_std(t(0.0), -2.0, 0.0), t(-1.0))
    # very large finite inputs stay inside, never beyond
    big = squash_log_std(t(-1e6, 1e6, 30.0))
    assert bool((big >= -5).all() and (big <= 2).all())
    with pytest.raises(ValueError, match="log_std_min must be < log_std_max"):
        squash_log_std(t(0.0), 1.0, 1.0)


def test_log_one_minus_tanh_sq_is_stable():
    # 1 − tanh² u = 1/cosh² u: u = 0 → log 1 = 0; u = ±1 → −2 log cosh 1
    expected = -2 * math.log(math.cosh(1.0))  # −0.8675616609660542
    assert close(log_one_minus_tanh_sq(t(0.0, 1.0, -1.0)), t(0.0, expected, expected))
    # degenerate: u = 50, where tanh rounds to 1 and the naive log(1 − tanh²) is −∞;
    # 1/cosh² 50 = 4 e^{−100} / (1 + e^{−100})² → log 4 − 100 (up to e^{−100})
    assert torch.isinf(torch.log(1 - torch.tanh(t(50.0)) ** 2)).all()
    assert close(log_one_minus_tanh_sq(t(50.0, -50.0)), t(math.log(4) - 100, math.log(4) - 100), 1e-10)


# --------------------------------------------------------------------------------------------------
# log-likelihood of a given action


def test_log_likelihood_hand_values_with_and_without_bounds():
    # A = 1, a = 0, μ = 0, σ = 1: u = 0, log π = −½ log 2π
    assert close(squashed_gaussian_log_likelihood(t(0.0), t(0.0), t(0.0)), -HALF_LOG_2PI)
    # a = tanh(1), μ = 0.5, σ = 2: u = 1, z = (1 − 0.5)/2 = 0.25
    # log π = −½·0.0625 − log 2 − ½ log 2π − (−2 log cosh 1)
    lp = -0.5 * 0.0625 - math.log(2) - HALF_LOG_2PI + 2 * math.log(math.cosh(1.0))  # −0.7757740527985...
    a = t(math.tanh(1.0))
    assert close(squashed_gaussian_log_likelihood(a, t(0.5), t(math.log(2))), lp)
    # rescaled to [−2, 2]: a = 2·tanh(1) has the same u; the density is divided by h = 2
    assert close(squashed_gaussian_log_likelihood(2 * a, t(0.5), t(math.log(2)), low=t(-2.0), high=t(2.0)),
                 lp - math.log(2))
    # asymmetric bounds [0, 4] (c = 2, h = 2): a = 2 + 2·tanh(1)
    assert close(squashed_gaussian_log_likelihood(2 + 2 * a, t(0.5), t(math.log(2)), low=t(0.0), high=t(4.0)),
                 lp - math.log(2))
    # A = 2: the dimensions' log densities add; batch shape (2,) kept
    act = torch.stack([t(0.0, math.tanh(1.0)), t(math.tanh(1.0), 0.0)])  # (2, 2)
    mu = torch.stack([t(0.0, 0.5), t(0.5, 0.0)])
    ls = torch.stack([t(0.0, math.log(2)), t(math.log(2), 0.0)])
    out = squashed_gaussian_log_likelihood(act, mu, ls)
    assert out.shape == (2,) and close(out, t(lp - HALF_LOG_2PI, lp - HALF_LOG_2PI))


def test_log_likelihood_at_the_bounds_is_clipped_and_finite():
    # degenerate: a = high exactly has u = +∞; it is moved to y = 1 − 1e-6 first
    eps = 1e-6
    at_bound = squashed_gaussian_log_likelihood(t(2.0), t(0.3), t(-0.5), low=t(-2.0), high=t(2.0))
    inside = squashed_gaussian_log_likelihood(t(2 * (1 - eps)), t(0.3), t(-0.5), low=t(-2.0), high=t(2.0))
    assert torch.isfinite(at_bound).all() and close(at_bound, inside)
    # hand value there: u = atanh(1 − 1e-6) = ½ log((2 − 1e-6)/1e-6); σ = e^{−0.5}
    u = 0.5 * math.log((2 - eps) / eps)
    hand = (-0.5 * ((u - 0.3) / math.exp(-0.5)) ** 2 + 0.5 - HALF_LOG_2PI
            - math.log(1 - (1 - eps) ** 2) - math.log(2))
    assert close(at_bound, hand, 1e-8)
    # beyond the bound is treated as the bound; float32 stays finite too
    assert close(squashed_gaussian_log_likelihood(t(7.0), t(0.3), t(-0.5), low=t(-2.0), high=t(2.0)), at_bound)
    f32 = squashed_gaussian_log_likelihood(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([0.0]))
    assert torch.isfinite(f32).all()
    # gradients are finite at the bound
    mu = t(0.3).requires_grad_()
    squashed_gaussian_log_likelihood(t(2.0), mu, t(-0.5), low=t(-2.0), high=t(2.0)).backward()
    assert torch.isfinite(mu.grad).all()


def test_log_likelihood_is_a_density_on_the_bounds():
    # ∫_low^high π(a) da = 1 (the change of variables is right), trapezoid on a fine grid in float64
    for mu, ls, low, high in ((0.3, -0.2, -2.0, 2.0), (-1.0, -1.0, 0.0, 1.0), (0.0, 0.5, -1.0, 1.0)):
        a = torch.linspace(low, high, 400_001, dtype=f64)[1:-1]
        dens = torch.exp(squashed_gaussian_log_likelihood(a[:, None], torch.full((len(a), 1), mu, dtype=f64),
                                                          torch.full((len(a), 1), ls, dtype=f64),
                                                          low=t(low), high=t(high)))
        mass = float(torch.trapezoid(dens, a))
        assert abs(mass - 1) < 2e-4, (mu, ls, mass)


def test_bad_shapes_and_bounds_are_named():
    with pytest.raises(ValueError, match="must have one shape"):
        squashed_gaussian_log_likelihood(t(0.0, 0.0), t(0.0), t(0.0))
    with pytest.raises(ValueError, match="high must be > low"):
        squashed_gaussian_mean(t(0.0), low=t(1.0), high=t(1.0))
    with pytest.raises(ValueError, match="both action bounds"):
        squashed_gaussian_mean(t(0.0), low=t(-1.0))
    with pytest.raises(ValueError, match=r"noise must have shape \(N"):
        squashed_gaussian_entropy(t(0.0), t(0.0), t(0.0))


# --------------------------------------------------------------------------------------------------
# mean, samples, entropy estimate


def test_mean_and_samples():
    # mean action c + h·tanh(μ): μ = 1 on [0, 4] → 2 + 2·tanh 1
    assert close(squashed_gaussian_mean(t(1.0), low=t(0.0), high=t(4.0)), t(2 + 2 * math.tanh(1.0)))
    # ε = 0 gives the mean; its log π equals the log-likelihood of that action
    a, lp = squashed_gaussian_sample(t(1.0), t(-0.3), t(0.0)[None], low=t(0.0), high=t(4.0))
    assert close(a[0], t(2 + 2 * math.tanh(1.0)))
    assert close(lp[0], squashed_gaussian_log_likelihood(a[0], t(1.0), t(-0.3), low=t(0.0), high=t(4.0)), 1e-9)
    # ε = 1: u = μ + σ; samples always inside the bounds, even for huge ε
    a, _ = squashed_gaussian_sample(t(1.0), t(0.0), t(1.0, 1e3, -1e3)[:, None], low=t(0.0), high=t(4.0))
    assert close(a[0], t(2 + 2 * math.tanh(2.0))) and bool(((a >= 0) & (a <= 4)).all())


def test_entropy_estimate_hand_values():
    # N = 1, ε = 0: H = −log π(u = μ) = log σ + ½ log 2π + log(1 − tanh² μ) + log h
    # μ = 1, σ = 2, h = 2: log 2 + ½ log 2π − 2 log cosh 1 + log 2
    h0 = math.log(2) + HALF_LOG_2PI - 2 * math.log(math.cosh(1.0)) + math.log(2)
    assert close(squashed_gaussian_entropy(t(1.0), t(math.log(2)), t(0.0)[:, None],
                                           low=t(-2.0), high=t(2.0)), t(h0))
    # N = 2, ε = ±1: u = 1 ± 2 = 3, −1, z² = 1 each:
    # H = ½ + log σ + ½ log 2π + log h + ½(log(1 − tanh² 3) + log(1 − tanh² 1))
    h2 = (0.5 + math.log(2) + HALF_LOG_2PI + math.log(2)
          - (math.log(math.cosh(3.0)) + math.log(math.cosh(1.0))))
    noise = t(1.0, -1.0)[:, None]  # (N = 2, A = 1)
    assert close(squashed_gaussian_entropy(t(1.0), t(math.log(2)), noise, low=t(-2.0), high=t(2.0)), t(h2))


def test_entropy_estimate_matches_quadrature_and_is_differentiable():
    # H = E_u[−log π(u)], u ~ N(μ, σ²), by quadrature with closed-form terms (no library function):
    # −log π(u) = ½ z² + log σ + ½ log 2π + log(1 − tanh² u) + log h
    mu, ls, h = 0.3, -0.2, 2.0
    sigma = math.exp(ls)
    u = np.linspace(mu - 12 * sigma, mu + 12 * sigma, 200_001)
    z = (u - mu) / sigma
    pdf = np.exp(-0.5 * z**2) / (sigma * math.sqrt(2 * math.pi))
    neg_lp = 0.5 * z**2 + ls + HALF_LOG_2PI - 2 * np.log(np.cosh(u)) + math.log(h)
    exact = float(np.trapezoid(pdf * neg_lp, u))
    g = torch.Generator().manual_seed(0)
    n = 200_000
    noise = torch.randn(n, 1, generator=g, dtype=f64)
    m = t(mu).requires_grad_()
    est = squashed_gaussian_entropy(m, t(ls), noise, low=t(-h), high=t(h))  # ()
    # standard error of the estimate from the per-sample spread of −log π
    se = float(torch.std(-squashed_gaussian_sample(t(mu), t(ls), noise, t(-h), t(h))[1])) / math.sqrt(n)
    assert abs(est.item() - exact) < 4 * se, (est.item(), exact, se)
    est.backward()  # the entropy falls as |μ| grows (the squash compresses the tails): ∂H/∂μ < 0 at μ > 0
    assert torch.isfinite(m.grad) and float(m.grad) < 0


# --------------------------------------------------------------------------------------------------
# losses


def test_policy_loss_over_real_steps_with_detached_temperature():
    # real steps (mask 1): log-lik −1, −2, −3 → mean −2; entropy 0.5, 1.5, 1.0 → mean 1.0
    # padded steps hold garbage (99, NaN) that must not leak
    ll = torch.tensor([[99.0, -1.0], [-2.0, -3.0]], dtype=f64)
    ent = torch.tensor([[math.nan, 0.5], [1.5, 1.0]], dtype=f64)
    mask = torch.tensor([[0, 1], [1, 1]])
    ll.requires_grad_()
    alpha = t(0.5).requires_grad_()
    loss, mean_ll, mean_h = odt_policy_loss(ll, ent, mask, alpha)
    # loss = −(−2 + 0.5·1.0) = 1.5
    assert close(loss, 1.5) and close(mean_ll, -2.0) and close(mean_h, 1.0)
    loss.backward()
    assert alpha.grad is None  # α is detached in the policy loss
    assert close(ll.grad, torch.tensor([[0.0, -1 / 3], [-1 / 3, -1 / 3]], dtype=f64))
    # α = 0: the loss is the negative mean log-likelihood
    assert close(odt_policy_loss(ll.detach(), ent, mask, 0.0)[0], 2.0)


def test_policy_loss_fully_masked_is_zero_not_nan():
    ll = torch.full((2, 3), math.nan, dtype=f64)
    out = odt_policy_loss(ll, torch.zeros(2, 3, dtype=f64), torch.zeros(2, 3), t(0.1))
    assert all(close(x, 0.0) for x in out)
    with pytest.raises(ValueError, match="mask shape"):
        odt_policy_loss(ll, ll, torch.zeros(2, 2), 0.1)


def test_temperature_loss_and_its_gradient():
    # α = 0.1, H = −0.5, β = −1: J = 0.1·(−0.5 + 1) = 0.05; ∂J/∂log α = α·(H − β) = 0.05 > 0, so a
    # gradient step lowers α (the entropy is above its target); H gets no gradient
    log_a = t(math.log(0.1)).requires_grad_()
    h = t(-0.5).requires_grad_()
    loss = temperature_loss(log_a, h, -1.0)
    loss.backward()
    assert close(loss, 0.05) and close(log_a.grad, 0.05) and h.grad is None
    # below the target: the gradient is negative (α rises)
    log_a.grad = None
    temperature_loss(log_a, t(-1.5), -1.0).backward()
    assert close(log_a.grad, -0.05)
    # degenerate: H = β → zero loss and zero gradient
    log_a.grad = None
    z = temperature_loss(log_a, t(-1.0), -1.0)
    z.backward()
    assert close(z, 0.0) and close(log_a.grad, 0.0)
