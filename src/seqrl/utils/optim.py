"""The LAMB optimizer of the official Online DT (`seqrl.core.optim.lamb_direction` per parameter)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from seqrl.core.optim import lamb_direction

__all__ = ["Lamb"]


class Lamb(torch.optim.Optimizer):
    """LAMB with the official ODT's rule (timm's ``Lamb``; `lamb_direction` says what a step does).

    Before the per-parameter steps, the gradients are scaled down together when their global norm
    exceeds `max_grad_norm` (timm's default 1.0; the ODT trainer clips at 0.25 before, so this rarely
    acts). Parameters with ``weight_decay == 0`` take plain Adam steps unless ``always_adapt``.
    The official ODT builds it as ``Lamb(params, lr, weight_decay=5e-4, eps=1e-8)`` over one group.
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.01, max_grad_norm: float = 1.0,
                 always_adapt: bool = False) -> None:
        if not lr >= 0 or not eps >= 0 or not weight_decay >= 0 or not max_grad_norm > 0:
            raise ValueError(f"Lamb: lr, eps, weight_decay must be >= 0 and max_grad_norm > 0 "
                             f"(got {lr}, {eps}, {weight_decay}, {max_grad_norm})")
        if not all(0 <= b < 1 for b in betas):
            raise ValueError(f"Lamb: betas must lie in [0, 1) (got {betas})")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      max_grad_norm=max_grad_norm, always_adapt=always_adapt))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        if not params:
            return loss
        if any(p.grad.is_sparse for p in params):
            raise RuntimeError("Lamb: sparse gradients are not supported")
        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))  # ()
        scale = torch.clamp(total / self.defaults["max_grad_norm"], min=1.0)  # () ≥ 1: divide the grads by it
        for group in self.param_groups:
            group["step"] = group.get("step", 0) + 1
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                direction, state["exp_avg"], state["exp_avg_sq"] = lamb_direction(
                    p, p.grad / scale, state["exp_avg"], state["exp_avg_sq"], group["step"], group["betas"],
                    group["eps"], group["weight_decay"], adapt=group["weight_decay"] != 0 or group["always_adapt"])
                p.add_(direction, alpha=-group["lr"])
        return loss
