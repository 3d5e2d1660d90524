"""Reward shaping that depends only on completion lengths."""

from __future__ import annotations

import torch


def soft_overlong_penalty(lengths: torch.Tensor, max_len: int, cache_len: int) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), per completion.

        R(y) = 0                                  if |y| ≤ L_max − L_cache
             = ((L_max − L_cache) − |y|) / L_cache   if L_max − L_cache < |y| ≤ L_max
             = −1                                 if |y| > L_max

    lengths (N,) generated tokens; max_len = L_max; cache_len = L_cache (the soft zone).

    >>> soft_overlong_penalty(torch.tensor([10, 16, 18, 20, 21]), max_len=20, cache_len=4).tolist()
    [0.0, 0.0, -0.5, -1.0, -1.0]
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(f"soft overlong: need 0 < cache_len <= max_len (got {cache_len}, {max_len})")
    lengths = lengths.to(torch.float64)  # (N,)
    start = max_len - cache_len
    penalty = ((start - lengths) / cache_len).clamp(max=0.0)  # (N,)
    return torch.where(lengths > max_len, torch.full_like(penalty, -1.0), penalty).float()
