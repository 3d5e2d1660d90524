"""Masked reductions over token tensors.

A mask has the shape of the tensor it masks, is bool or float, and is nonzero (1) on the
positions that count (completion tokens) and 0 elsewhere (prompt, padding). Nonzero entries
count as 1: masks select, they do not weight. Masked-out positions never reach the result, even
when they hold NaN or inf, and a fully masked reduction gives 0, never NaN.
"""

from __future__ import annotations

import torch


def check_mask(x: torch.Tensor, mask: torch.Tensor, fn: str, x_name: str = "x") -> torch.Tensor:
    """`mask` as a bool tensor, after checking its shape equals `x`'s (ValueError otherwise)."""
    if mask.shape != x.shape:
        raise ValueError(f"{fn}: mask shape {tuple(mask.shape)} must equal {x_name} shape "
                         f"{tuple(x.shape)}")
    return mask.bool()


def zero_outside(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """x with masked-out entries replaced by 0 (their gradient is 0 too, even for NaN/inf).

    x, keep (B, T) → (B, T); keep is a bool tensor from `check_mask`.
    """
    return torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))  # (B, T)


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Σ x·m over `dim` (all positions when dim is None).

    x, mask (B, T) (any equal shapes) → () when dim is None, else x's shape without `dim`.
    Masked-out values are replaced by 0 before summing, so a NaN there cannot leak into the
    sum or its gradient.
    """
    kept = zero_outside(x, check_mask(x, mask, "masked_sum"))  # (B, T)
    return kept.sum() if dim is None else kept.sum(dim=dim)  # () or (B,)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Σ x·m / max(Σ m, 1) over `dim` (all positions when dim is None).

    x, mask (B, T) → () or x's shape without `dim`. A fully masked row gives 0 (0 / 1), not NaN.
    """
    keep = check_mask(x, mask, "masked_mean")  # (B, T)
    total = masked_sum(x, keep, dim)  # () or (B,)
    count = keep.sum() if dim is None else keep.sum(dim=dim)  # () or (B,)
    return total / count.clamp_min(1).to(x.dtype)  # () or (B,)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the masked entries of x, all positions pooled.

    var = Σ m·(x − x̄)² / (n − 1)   (unbiased, Bessel)   or   / n   (unbiased=False),
    with x̄ = masked_mean(x, mask) and n = Σ m. x, mask (B, T) → (). The denominator is clamped
    to ≥ 1, so n ≤ 1 (no spread to measure) gives 0, never NaN.
    """
    keep = check_mask(x, mask, "masked_var")  # (B, T)
    centred = zero_outside(x - masked_mean(x, keep), keep)  # (B, T)
    count = keep.sum()  # ()
    denom = (count - 1 if unbiased else count).clamp_min(1).to(x.dtype)  # ()
    return masked_sum(centred.square(), keep) / denom  # ()


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True,
                  eps: float = 1e-8) -> torch.Tensor:
    """(x − x̄) / sqrt(var + eps) over the masked entries; x̄ added back when shift_mean is False.

    x̄ = masked_mean(x, mask), var = masked_var(x, mask) (unbiased), as in TRL / OpenRLHF
    `masked_whiten`. x, mask (B, T) → (B, T), 0 at masked-out positions.
    """
    keep = check_mask(x, mask, "masked_whiten")  # (B, T)
    x = zero_outside(x, keep)  # (B, T)
    mean = masked_mean(x, keep)  # ()
    whitened = (x - mean) * torch.rsqrt(masked_var(x, keep) + eps)  # (B, T)
    if not shift_mean:
        whitened = whitened + mean  # (B, T)
    return zero_outside(whitened, keep)  # (B, T)
