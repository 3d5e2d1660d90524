"""Continuous actions as discrete tokens, as in OpenVLA (Kim et al. 2024, §3.2) and RT-2.

Each action dimension is cut separately into `bins` uniform bins spanning [low, high] — by default the
1st and 99th percentiles of the training actions, so that a few outliers do not widen every bin (OpenVLA
uses 256 bins over those quantiles). A value's token is its bin's index (values outside [low, high] are
clipped into the end bins); a token decodes to its bin's centre, so the round-trip error of a value
inside the range is at most half a bin width. A dimension with low == high decodes to that constant.

    >>> t = ActionTokenizer(low=[-1.0, 0.0], high=[1.0, 4.0], bins=4)
    >>> t.encode(torch.tensor([[-1.0, 0.0], [0.2, 3.9], [5.0, -2.0]])).tolist()
    [[0, 0], [2, 3], [3, 0]]
    >>> t.decode(torch.tensor([[0, 0], [2, 3]])).tolist()
    [[-0.75, 0.5], [0.25, 3.5]]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["ActionTokenizer"]


class ActionTokenizer:
    """Per-dimension uniform binning of continuous actions (…, D) ↔ tokens (…, D) in [0, bins)."""

    def __init__(self, low: Sequence[float], high: Sequence[float], bins: int = 256) -> None:
        if not isinstance(bins, int) or isinstance(bins, bool) or bins < 2:
            raise ValueError(f"ActionTokenizer: bins must be an int >= 2 (got {bins!r})")
        lo = torch.as_tensor(low, dtype=torch.float64).flatten()
        hi = torch.as_tensor(high, dtype=torch.float64).flatten()
        if lo.numel() == 0 or lo.shape != hi.shape:
            raise ValueError(f"ActionTokenizer: low and high must be non-empty and of one length "
                             f"(got {lo.numel()} and {hi.numel()})")
        if not bool(torch.isfinite(lo).all() and torch.isfinite(hi).all()):
            raise ValueError("ActionTokenizer: low and high must be finite")
        if bool((hi < lo).any()):
            d = int(torch.nonzero(hi < lo)[0, 0])
            raise ValueError(f"ActionTokenizer: high < low in dimension {d} ({float(hi[d])} < {float(lo[d])})")
        self.bins, self.low, self.high = bins, lo, hi
        self.width = (hi - lo) / bins  # (D,) float64; 0 for a constant dimension

    @property
    def dims(self) -> int:
        return int(self.low.numel())

    @classmethod
    def fit(cls, actions, bins: int = 256, quantiles: tuple[float, float] = (0.01, 0.99)) -> "ActionTokenizer":
        """Bins spanning the `quantiles` of `actions` (N, D) per dimension (OpenVLA: 1st and 99th percentile)."""
        q_lo, q_hi = quantiles
        if not 0.0 <= q_lo <= q_hi <= 1.0:
            raise ValueError(f"ActionTokenizer.fit: quantiles must satisfy 0 <= low <= high <= 1 (got {quantiles})")
        a = torch.as_tensor(actions, dtype=torch.float64)
        if a.dim() != 2 or a.shape[0] == 0:
            raise ValueError(f"ActionTokenizer.fit: actions must be (N, D) with N >= 1 (got {tuple(a.shape)})")
        if not bool(torch.isfinite(a).all()):
            raise ValueError("ActionTokenizer.fit: actions contain NaN or inf")
        q = torch.quantile(a, torch.tensor([q_lo, q_hi], dtype=torch.float64), dim=0)  # (2, D)
        return cls(q[0].tolist(), q[1].tolist(), bins)

    def encode(self, actions: torch.Tensor) -> torch.Tensor:
        """actions (…, D) float → tokens (…, D) long in [0, bins); out-of-range values go to the end bins."""
        a = torch.as_tensor(actions)
        if a.shape[-1:] != (self.dims,):
            raise ValueError(f"ActionTokenizer.encode: actions must end in {self.dims} dimensions (got {tuple(a.shape)})")
        if not bool(torch.isfinite(a).all()):
            raise ValueError("ActionTokenizer.encode: actions contain NaN or inf")
        lo, width = self.low.to(a.device), self.width.to(a.device)
        scaled = (a.double() - lo) / torch.where(width > 0, width, torch.ones_like(width))  # (…, D)
        scaled = torch.where(width > 0, scaled, torch.zeros_like(scaled))  # a constant dimension: always token 0
        return scaled.floor().clamp(0, self.bins - 1).long()  # (…, D)

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (…, D) → bin centres (…, D) float32 (a constant dimension decodes to its value)."""
        t = torch.as_tensor(tokens)
        if t.shape[-1:] != (self.dims,):
            raise ValueError(f"ActionTokenizer.decode: tokens must end in {self.dims} dimensions (got {tuple(t.shape)})")
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.bins):
            raise ValueError(f"ActionTokenizer.decode: tokens must lie in [0, {self.bins}) (got {int(t.min())}..{int(t.max())})")
        lo, width = self.low.to(t.device), self.width.to(t.device)
        return (lo + (t.double() + 0.5) * width).float()  # (…, D)

    def to_dict(self) -> dict:
        """JSON-able constructor arguments (a checkpoint stores them with the model)."""
        return {"low": self.low.tolist(), "high": self.high.tolist(), "bins": self.bins}
