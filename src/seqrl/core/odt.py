"""Online Decision Transformer math (Zheng et al. 2022): the tanh-squashed Gaussian policy and its losses.

The Online DT replaces the Decision Transformer's deterministic tanh head by a stochastic policy
(paper §4.1): a diagonal Gaussian over pre-squash actions u, squashed by tanh and rescaled to the
action bounds,

    u ~ N(μ, σ²),   y = tanh(u) ∈ (−1, 1),   a = c + h·y,   c = (high + low)/2,  h = (high − low)/2,

with log σ kept in [log σ_min, log σ_max] = [−5, 2] (official code). By the change of variables the
density of a is, per action dimension i (summed over i),

    log π(a) = log N(u; μ, σ²) − log(1 − tanh² u) − log h
             = −½((u − μ)/σ)² − log σ − ½ log 2π − 2(log 2 − u − softplus(−2u)) − log h,

the second line being the numerically stable form of log(1 − tanh² u). It is trained with the
paper's entropy-constrained likelihood objective in its Lagrangian form (official ``loss_fn`` and
temperature update)

    J(θ)  = −( (1/|real|) Σ_real log π_θ(a_t | …) + α·H[π_θ] ),        α = exp(log_temperature)
    J(α)  = α · (H[π_θ] − β),                                          β = target entropy (−|A|)

with α detached in J(θ) and H detached in J(α): the entropy is pushed up while α > 0, and α falls when
H is above the target, rises when below. H of a squashed Gaussian has no closed form; like the
official code we use the reparameterised Monte-Carlo estimate H ≈ −(1/N) Σ_n log π(a_n),
a_n = c + h·tanh(μ + σ ε_n), ε_n ~ N(0, I), with log π evaluated from u_n directly (no atanh round
trip), averaged over the real (unpadded) steps — the official code averages over padded steps too.

Hindsight return relabelling (paper §4.3: the returns-to-go of a stored trajectory are its achieved
returns, never the target it was rolled out with) is `seqrl.core.advantages.returns_to_go` applied
to the stored rewards at sampling time; nothing here repeats it.

Everything here is pure tensor math (no state, no I/O). Shapes: B batch, K steps, A action dims,
N entropy samples; ``…`` any leading shape.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from seqrl.core.masking import check_mask, masked_mean

__all__ = [
    "LOG_STD_MAX",
    "LOG_STD_MIN",
    "log_one_minus_tanh_sq",
    "odt_policy_loss",
    "squash_log_std",
    "squashed_gaussian_entropy",
    "squashed_gaussian_log_likelihood",
    "squashed_gaussian_log_prob",
    "squashed_gaussian_mean",
    "squashed_gaussian_sample",
    "temperature_loss",
]

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # the official code's bounds on log σ
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
ACTION_EPS = 1e-6  # a target action at a bound is moved this far inside (in tanh units) before atanh


def squash_log_std(raw: torch.Tensor, log_std_min: float = LOG_STD_MIN, log_std_max: float = LOG_STD_MAX) -> torch.Tensor:
    """Unbounded head output → log σ in [min, max]: ``min + ½ (max − min)(tanh(raw) + 1)`` (official code).

    raw (…, A) → (…, A). raw = 0 gives the midpoint (−1.5 for [−5, 2]); ±∞ gives the bounds.
    """
    if not log_std_min < log_std_max:
        raise ValueError(f"squash_log_std: log_std_min must be < log_std_max (got {log_std_min}, {log_std_max})")
    return log_std_min + 0.5 * (log_std_max - log_std_min) * (torch.tanh(raw) + 1)  # (…, A)


def log_one_minus_tanh_sq(u: torch.Tensor) -> torch.Tensor:
    """log(1 − tanh² u) = 2(log 2 − u − softplus(−2u)), finite for every finite u: (…) → (…).

    The naive form underflows to log 0 = −∞ once tanh u rounds to ±1 (|u| ≳ 9 in float32).
    """
    return 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))


def _center_half(low, high, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(c, h) of the bounds as tensors broadcasting against `like` (…, A); None, None → (0, 1)."""
    if (low is None) != (high is None):
        raise ValueError("give both action bounds low and high, or neither")
    if low is None:
        return like.new_zeros(()), like.new_ones(())
    low = torch.as_tensor(low, dtype=like.dtype, device=like.device)
    high = torch.as_tensor(high, dtype=like.dtype, device=like.device)
    if not bool((high > low).all()):
        raise ValueError(f"action bounds: high must be > low in every dimension (got low {low.tolist()}, "
                         f"high {high.tolist()})")
    return (high + low) / 2, (high - low) / 2


def squashed_gaussian_log_prob(u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor,
                               low=None, high=None) -> torch.Tensor:
    """log π(a) of the action a = c + h·tanh(u), from its pre-squash value u: (…, A) → (…).

        log π(a) = Σ_i [ −½((u_i − μ_i)/σ_i)² − log σ_i − ½ log 2π − log(1 − tanh² u_i) − log h_i ]

    low/high: the action bounds (A,) (None: [−1, 1], h = 1). Stable for any finite u.
    """
    _, half = _center_half(low, high, mean)
    z = (u - mean) * torch.exp(-log_std)  # (…, A)
    per_dim = -0.5 * z**2 - log_std - _HALF_LOG_2PI - log_one_minus_tanh_sq(u) - torch.log(half)  # (…, A)
    return per_dim.sum(-1)  # (…)


def squashed_gaussian_log_likelihood(action: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor,
                                     low=None, high=None, eps: float = ACTION_EPS) -> torch.Tensor:
    """log π(a) of given actions a in [low, high] (e.g. the dataset's): (…, A) → (…).

    y = (a − c)/h is clipped to [−1 + eps, 1 − eps] (an action exactly at a bound has u = ±∞ under the
    squash; the clip keeps the loss finite — datasets of clipped actions hold many such actions),
    u = atanh(y), then `squashed_gaussian_log_prob`.
    """
    if action.shape != mean.shape or log_std.shape != mean.shape:
        raise ValueError(f"squashed_gaussian_log_likelihood: action {tuple(action.shape)}, mean "
                         f"{tuple(mean.shape)} and log_std {tuple(log_std.shape)} must have one shape")
    if not 0 < eps < 1:
        raise ValueError(f"squashed_gaussian_log_likelihood: eps must be in (0, 1) (got {eps})")
    center, half = _center_half(low, high, mean)
    y = ((action - center) / half).clamp(-1 + eps, 1 - eps)  # (…, A)
    return squashed_gaussian_log_prob(torch.atanh(y), mean, log_std, low, high)  # (…)


def squashed_gaussian_mean(mean: torch.Tensor, low=None, high=None) -> torch.Tensor:
    """The deterministic (evaluation) action c + h·tanh(μ): (…, A) → (…, A) (official: ``dist.mean``)."""
    center, half = _center_half(low, high, mean)
    return center + half * torch.tanh(mean)  # (…, A)


def squashed_gaussian_sample(mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor,
                             low=None, high=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Reparameterised samples and their log π: a = c + h·tanh(μ + σ ε).

    mean, log_std (…, A); noise ε (N, …, A) or (…, A) of standard normals → (actions like noise,
    log π like noise without its last dim). Gradients flow to μ and log σ through a.
    """
    center, half = _center_half(low, high, mean)
    u = mean + torch.exp(log_std) * noise  # (N, …, A)
    return center + half * torch.tanh(u), squashed_gaussian_log_prob(u, mean, log_std, low, high)  # (N, …, A), (N, …)


def squashed_gaussian_entropy(mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor,
                              low=None, high=None) -> torch.Tensor:
    """Monte-Carlo entropy H ≈ −(1/N) Σ_n log π(a_n) of the squashed Gaussian: (…, A), noise (N, …, A) → (…).

    N = 1 is the official code's estimate. Unbiased for any N; differentiable (reparameterised).
    With ε = 0 it is log σ + ½ log 2π + log(1 − tanh² μ) + log h summed over dims (see the tests).
    """
    if noise.dim() != mean.dim() + 1 or noise.shape[1:] != mean.shape:
        raise ValueError(f"squashed_gaussian_entropy: noise must have shape (N, *{tuple(mean.shape)}) "
                         f"(got {tuple(noise.shape)})")
    _, log_prob = squashed_gaussian_sample(mean, log_std, noise, low, high)  # (N, …)
    return -log_prob.mean(0)  # (…)


def odt_policy_loss(log_lik: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor,
                    temperature: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Online DT's policy loss −(mean log-likelihood + α·H) over real steps; returns (loss, ll, H).

    log_lik, entropy, mask (B, K) → scalars: ll = mean of log_lik over real steps, H = mean of the
    entropy estimate over real steps, loss = −(ll + α·H) with α detached (α is trained by
    `temperature_loss`). A batch without a real step gives zeros (no NaN).
    """
    if log_lik.shape != entropy.shape:
        raise ValueError(f"odt_policy_loss: log_lik {tuple(log_lik.shape)} and entropy {tuple(entropy.shape)} "
                         f"must have one shape")
    check_mask(log_lik, mask, "odt_policy_loss", "log_lik")
    alpha = temperature.detach() if isinstance(temperature, torch.Tensor) else torch.tensor(float(temperature))
    ll = masked_mean(log_lik, mask)  # ()
    h = masked_mean(entropy, mask)  # ()
    return -(ll + alpha.to(ll) * h), ll, h


def temperature_loss(log_temperature: torch.Tensor, entropy: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """J(α) = α·(H − β), α = exp(log_temperature), H detached: () → ().

    ∂J/∂log α = α·(H − β): gradient descent lowers α while the policy's entropy H is above the target
    β and raises it while below (official: ``temperature() * (entropy - target_entropy).detach()``).
    """
    return torch.exp(log_temperature) * (entropy.detach() - target_entropy)
