"""Sequence layout of the Decision Transformer family: returns-to-go, (R̂, s, a) interleaving, padding.

The Decision Transformer (Chen et al. 2021, §3) models a trajectory as the token sequence

    τ = (R̂_1, s_1, a_1, R̂_2, s_2, a_2, …, R̂_K, s_K, a_K)          (3K tokens)

with returns-to-go R̂_t = Σ_{t'≥t} r_{t'} (`seqrl.core.advantages.returns_to_go`) and predicts a_t from the *state* token s_t. Short contexts
are left-padded to K steps (as in the official code), with a mask marking the real steps; padded
tokens are never attended to by real ones.

Everything here is pure tensor math (no state, no I/O). Shapes: B batch, K steps, d features.
"""

from __future__ import annotations

import torch

__all__ = [
    "causal_attention_mask",
    "deinterleave",
    "interleave",
    "interleave_mask",
    "left_pad",
    "top_return_episodes",
]


def interleave(*streams: torch.Tensor) -> torch.Tensor:
    """Interleave n token streams step by step: n × (B, K, d) → (B, n·K, d).

    For the Decision Transformer, ``interleave(R, s, a)`` gives (R̂_0, s_0, a_0, R̂_1, s_1, a_1, …):
    token 3t is R̂_t, 3t+1 is s_t, 3t+2 is a_t. With two streams ``interleave(s, a)`` gives the
    (s_0, a_0, s_1, a_1, …) layout of a return-free sequence model.
    """
    if not streams:
        raise ValueError("interleave: give at least one stream")
    shape = streams[0].shape
    if len(shape) != 3:
        raise ValueError(f"interleave: streams must have shape (B, K, d) (got {tuple(shape)})")
    for i, s in enumerate(streams[1:], start=1):
        if s.shape != shape:
            raise ValueError(f"interleave: stream {i} has shape {tuple(s.shape)}, stream 0 has {tuple(shape)}")
    B, K, d = shape
    return torch.stack(streams, dim=2).reshape(B, len(streams) * K, d)  # (B, n·K, d)


def deinterleave(tokens: torch.Tensor, n: int = 3) -> tuple[torch.Tensor, ...]:
    """Inverse of `interleave`: (B, n·K, d) → n × (B, K, d) (for DT: the R̂, s and a token outputs)."""
    if tokens.dim() != 3 or tokens.shape[1] % n:
        raise ValueError(f"deinterleave: tokens must have shape (B, {n}·K, d) (got {tuple(tokens.shape)})")
    B, L, d = tokens.shape
    grouped = tokens.reshape(B, L // n, n, d)  # (B, K, n, d)
    return tuple(grouped[:, :, i] for i in range(n))


def interleave_mask(mask: torch.Tensor, n: int = 3) -> torch.Tensor:
    """Step mask → token mask: (B, K) → (B, n·K), each step's value repeated for its n tokens."""
    if mask.dim() != 2:
        raise ValueError(f"interleave_mask: mask must have shape (B, K) (got {tuple(mask.shape)})")
    return mask.repeat_interleave(n, dim=1)  # (B, n·K)


def causal_attention_mask(token_mask: torch.Tensor) -> torch.Tensor:
    """Which keys each query may attend to: token_mask (B, L) → allowed (B, 1, L, L) bool.

        allowed[b, 0, i, j] = (j ≤ i) ∧ (token_mask[b, j] ∨ i = j)

    Causal attention that never looks at padded keys. A padded query still sees itself, so no row
    is empty (an all-masked softmax row would be NaN); padded outputs are ignored downstream. The
    result broadcasts over heads (the ``attn_mask`` of `torch.nn.functional.scaled_dot_product_attention`).
    """
    if token_mask.dim() != 2:
        raise ValueError(f"causal_attention_mask: token_mask must have shape (B, L) (got {tuple(token_mask.shape)})")
    L = token_mask.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool, device=token_mask.device).tril()  # (L, L)
    eye = torch.eye(L, dtype=torch.bool, device=token_mask.device)  # (L, L)
    keys = token_mask.bool()[:, None, None, :]  # (B, 1, 1, L)
    return causal & (keys | eye)  # (B, 1, L, L)


def left_pad(x: torch.Tensor, length: int, value: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The last `length` steps of a sequence, left-padded: x (T, *f) → (length, *f), mask (length,).

    T ≥ length keeps x[T−length:] (mask all ones); T < length puts `length − T` rows of `value` first
    (mask 0 there, 1 on the real steps). This is the context window of DT training and inference.
    """
    if length < 1:
        raise ValueError(f"left_pad: length must be >= 1 (got {length})")
    T = x.shape[0]
    if T >= length:
        return x[T - length :], torch.ones(length, dtype=torch.long, device=x.device)
    pad = torch.full((length - T, *x.shape[1:]), value, dtype=x.dtype, device=x.device)  # (length−T, *f)
    mask = torch.cat([torch.zeros(length - T, dtype=torch.long, device=x.device),
                      torch.ones(T, dtype=torch.long, device=x.device)])  # (length,)
    return torch.cat([pad, x]), mask


def top_return_episodes(returns: torch.Tensor, lengths: torch.Tensor, fraction: float) -> torch.Tensor:
    """Episodes of %BC (Chen et al. 2021, §5.3): the best episodes by return holding ≤ `fraction` of the steps.

    returns (N,), lengths (N,) → indices (M,), best first. Episodes are taken in order of decreasing
    return (ties: lower index first) while their total length stays within ``fraction · Σ lengths``;
    the best episode is always kept (the official code's ``pct_traj`` selection). fraction = 1 keeps all.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"top_return_episodes: fraction must be in (0, 1] (got {fraction})")
    if returns.dim() != 1 or returns.shape != lengths.shape or returns.numel() == 0:
        raise ValueError(f"top_return_episodes: returns and lengths must be equal non-empty 1-D tensors "
                         f"(got {tuple(returns.shape)} and {tuple(lengths.shape)})")
    order = torch.sort(returns, descending=True, stable=True).indices  # (N,)
    budget = max(int(fraction * int(lengths.sum())), 1)
    total = torch.cumsum(lengths[order], dim=0)  # (N,)
    keep = max(int((total <= budget).sum()), 1)
    return order[:keep]
