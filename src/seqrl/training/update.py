"""One optimizer update, written once for every trainer.

A trainer's step computes its loss and calls ``backward``; `apply_update` does the rest, in this order,
for every group of parameters the step trained (a policy and PPO's critic, ODT's policy and its log α):
sum the gradients over processes (torchrun), clip each group's norm, apply ``run.on_nonfinite`` to the
loss, every norm and any other value given (one decision for all groups: every optimizer steps, or
none), step each schedule, zero the gradients. `RunLoop.update` calls it with the run's groups;
a learner used without a loop (STaR's fine-tune) calls it with its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from seqrl.utils import dist


@dataclass
class OptimGroup:
    """Parameters with their own optimizer, schedule and clip: `module`'s (may be None) and `extra`
    leaf tensors beside them (ODT's log α). ``clip`` 0 clips nothing; `scheduler` may be None."""

    name: str
    module: torch.nn.Module | None
    optimizer: Any
    scheduler: Any = None
    clip: float = 0.0
    extra: Sequence[torch.Tensor] = field(default_factory=tuple)

    def parameters(self) -> list[torch.Tensor]:
        params = list(self.module.parameters()) if self.module is not None else []
        return params + list(self.extra)


@dataclass(frozen=True)
class Stepped:
    """What one update did: whether the optimizers stepped, and each group's gradient norm (before
    clipping) and learning rate (the one the step used)."""

    applied: bool
    norms: dict[str, float]
    lrs: dict[str, float]

    @property
    def norm(self) -> float:
        """The first group's gradient norm."""
        return next(iter(self.norms.values()))

    @property
    def lr(self) -> float:
        """The first group's learning rate."""
        return next(iter(self.lrs.values()))


def _sum_over_processes(group: OptimGroup) -> None:
    if group.module is not None:
        dist.all_reduce_grads(group.module)
    if dist.world_size() <= 1:
        return
    for p in group.extra:  # every process reduces the same tensors
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce_sum(p.grad)


def apply_update(groups: Sequence[OptimGroup], step: int, check: Callable[..., bool], loss: float,
                 **values: float) -> Stepped:
    """End step `step` (0-based) for `groups`: gradients summed over processes, each group's norm
    clipped, then ``check(step + 1, loss=…, grad_norm…=…, **values)`` — `check_finite` with the run's
    rule: True steps every optimizer, False (``skip_step``) none, ``stop`` raises — then every schedule
    steps and the gradients are zeroed. One group's norm is ``grad_norm``; several are
    ``grad_norm_<name>``."""
    if not groups:
        raise ValueError("apply_update: no parameter group to update")
    norms: dict[str, float] = {}
    lrs: dict[str, float] = {}
    for g in groups:
        _sum_over_processes(g)
        params = [p for p in g.parameters() if p.requires_grad]
        norms[g.name] = float(torch.nn.utils.clip_grad_norm_(params, g.clip if g.clip > 0 else math.inf))
        lrs[g.name] = float(g.scheduler.get_last_lr()[0]) if g.scheduler is not None else \
            float(g.optimizer.param_groups[0]["lr"])
    named = {"grad_norm": norms[groups[0].name]} if len(groups) == 1 else \
        {f"grad_norm_{name}": v for name, v in norms.items()}
    applied = bool(check(step + 1, loss=loss, **named, **values))
    for g in groups:
        if applied:
            g.optimizer.step()
        if g.scheduler is not None:
            g.scheduler.step()
        g.optimizer.zero_grad(set_to_none=True)
    return Stepped(applied, norms, lrs)
