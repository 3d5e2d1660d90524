"""Optimizer update rules as pure functions of (parameter, gradient, moments, step)."""

from __future__ import annotations

import torch

__all__ = ["lamb_direction"]


def lamb_direction(
    param: torch.Tensor,
    grad: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    step: int,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
    adapt: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One LAMB step's direction d (the parameter moves by −lr·d), as in the official Online DT code.

    LAMB (You et al. 2020, Alg. 2) with Adam's bias correction applied to the moments *before* the
    trust ratio (the rule of timm's ``Lamb``, which the official ODT trains with):

        m_t = β1·m + (1 − β1)·g            v_t = β2·v + (1 − β2)·g²
        u   = (m_t / (1 − β1^t)) / (sqrt(v_t / (1 − β2^t)) + ε) + λ·w
        d   = φ·u,  φ = ‖w‖ / ‖u‖   (φ = 1 when either norm is 0, or when not `adapt`)

    No clamp on ‖w‖ and no cap on φ. `adapt` is on for parameters with λ ≠ 0 (timm's default: a
    parameter without weight decay takes a plain Adam step). step t counts from 1.
    Returns (d, m_t, v_t), each shaped like `param`; the inputs are not modified.
    """
    beta1, beta2 = betas
    m = exp_avg * beta1 + grad * (1.0 - beta1)  # (…)
    v = exp_avg_sq * beta2 + grad * grad * (1.0 - beta2)  # (…)
    update = (m / (1.0 - beta1**step)) / ((v / (1.0 - beta2**step)).sqrt() + eps)  # (…)
    if weight_decay:
        update = update + weight_decay * param
    if adapt:
        w_norm, u_norm = param.norm(), update.norm()  # () each; kept on the device (no host sync)
        ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm.clamp_min(1e-30), torch.ones_like(w_norm))
        update = update * ratio
    return update, m, v
