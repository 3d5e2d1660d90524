"""The GRPO-family policy loss as pure functions: importance ratios (token / GSPO sequence level),
the clipped surrogate with ε_low/ε_high, KL estimators k1/k2/k3, token aggregation modes and
entropy.

Shapes: B sequences (completions), T token positions, V vocabulary. `logp` holds log π_θ of each
sampled token under the current policy (with gradient); `old_logp` (π_θ_old, the sampler) and
`ref_logp` (π_ref) are constants: they are detached here. `mask` (B, T) is nonzero on completion
tokens. `advantages` are (B,) (one per completion, broadcast over its tokens) or (B, T); group
advantages (B, G) are flattened to (B·G,) by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from seqrl.core.masking import check_mask, masked_mean, masked_sum, zero_outside

RATIO_LEVELS = ("token", "sequence")
KL_KINDS = ("k1", "k2", "k3", "k3_ratio")
AGG_MODES = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm", "seq_mean_token_sum")

Number = int | float | torch.Tensor


def _check_same(fn: str, a_name: str, a: torch.Tensor, b_name: str, b: torch.Tensor) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{fn}: {b_name} shape {tuple(b.shape)} must equal {a_name} shape "
                         f"{tuple(a.shape)}")


def token_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """log r_t = log π_θ(o_t) − log π_θ_old(o_t); logp, old_logp (B, T) → (B, T)."""
    _check_same("token_log_ratio", "logp", logp, "old_logp", old_logp)
    return logp - old_logp.detach()  # (B, T)


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor,
                       mask: torch.Tensor) -> torch.Tensor:
    """log s_i = (1/|o_i|) Σ_t log r_t — GSPO (Zheng et al. 2025):
    s_i = (π_θ(o_i) / π_θ_old(o_i))^(1/|o_i|). logp, old_logp, mask (B, T) → (B,);
    a fully masked row gives 0 (s_i = 1)."""
    return masked_mean(token_log_ratio(logp, old_logp), mask, dim=1)  # (B,)


def importance_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor,
                     level: Literal["token", "sequence"] = "token") -> torch.Tensor:
    """Importance ratio per token: logp, old_logp, mask (B, T) → (B, T).

    - level="token" (PPO / GRPO): r_t = exp(log π_θ(o_t) − log π_θ_old(o_t)); ∂r_t/∂logp_t = r_t.
    - level="sequence" (GSPO-token variant, Zheng et al. 2025):
          s_{i,t} = exp(sg[log s_i] + logp_t − sg[logp_t])
      whose value is s_i (`sequence_log_ratio`) at every token and whose gradient is
      ∂s_{i,t}/∂logp_t = s_i, for that token only (sg = detach). With one advantage per sequence
      and "seq_mean_token_mean" aggregation the loss gradient equals GSPO's sequence-level
      gradient, s_i·A_i·(1/|o_i|)·Σ_t ∇ log π_θ(o_t), and per-token advantages remain possible.
    """
    if level not in RATIO_LEVELS:
        raise ValueError(f"importance_ratio: level must be one of {RATIO_LEVELS} (got {level!r})")
    if level == "token":
        check_mask(logp, mask, "importance_ratio", "logp")
        return token_log_ratio(logp, old_logp).exp()  # (B, T)
    seq = sequence_log_ratio(logp, old_logp, mask).detach()  # (B,)
    return (seq[:, None] + logp - logp.detach()).exp()  # (B, T)


@dataclass
class ClippedSurrogate:
    """`clipped_surrogate`'s result.

    loss  (B, T): per-token −min(r·A, clip(r, 1−ε_low, 1+ε_high)·A).
    clipfrac_low  (): fraction of (masked) tokens with r < 1−ε_low and A < 0 (no gradient).
    clipfrac_high (): fraction of (masked) tokens with r > 1+ε_high and A > 0 (no gradient).
    The fractions are detached.
    """

    loss: torch.Tensor
    clipfrac_low: torch.Tensor
    clipfrac_high: torch.Tensor


def clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, clip_eps_low: float,
                      clip_eps_high: float, mask: torch.Tensor | None = None) -> ClippedSurrogate:
    """PPO clipped surrogate, asymmetric clip range (DAPO "clip-higher", Yu et al. 2025):

        L_t = −min(r_t·A_t, clip(r_t, 1 − ε_low, 1 + ε_high)·A_t)

    clip_eps_low  # ε_low (DAPO); clip_eps_high  # ε_high (DAPO); ε_low = ε_high is PPO / GRPO.
    ratio (B, T); advantages (B,) broadcast over tokens, or (B, T); mask (B, T) or None (all
    tokens) selects the tokens the clip fractions count. Advantages are constants (detached).
    Returns a `ClippedSurrogate`.
    """
    if ratio.dim() != 2:
        raise ValueError(f"clipped_surrogate: ratio must have shape (B, T) "
                         f"(got {tuple(ratio.shape)})")
    if advantages.shape not in (ratio.shape[:1], ratio.shape):
        raise ValueError(f"clipped_surrogate: advantages shape {tuple(advantages.shape)} must be "
                         f"(B,) or (B, T) = {tuple(ratio.shape)}")
    if not (0 <= clip_eps_low < 1 and clip_eps_high >= 0):
        raise ValueError(f"clipped_surrogate: need 0 <= clip_eps_low < 1 and clip_eps_high >= 0 "
                         f"(got clip_eps_low={clip_eps_low}, clip_eps_high={clip_eps_high})")
    keep = torch.ones_like(ratio, dtype=torch.bool) if mask is None else \
        check_mask(ratio, mask, "clipped_surrogate", "ratio")  # (B, T)
    adv = advantages[:, None] if advantages.dim() == 1 else advantages  # (B, 1) or (B, T)
    adv = adv.detach().expand_as(ratio)  # (B, T)
    unclipped = ratio * adv  # (B, T)
    clipped = ratio.clamp(1 - clip_eps_low, 1 + clip_eps_high) * adv  # (B, T)
    loss = -torch.minimum(unclipped, clipped)  # (B, T)
    with torch.no_grad():
        low = (ratio < 1 - clip_eps_low) & (adv < 0)  # (B, T)
        high = (ratio > 1 + clip_eps_high) & (adv > 0)  # (B, T)
        clipfrac_low = masked_mean(low.to(ratio.dtype), keep)  # ()
        clipfrac_high = masked_mean(high.to(ratio.dtype), keep)  # ()
    return ClippedSurrogate(loss, clipfrac_low, clipfrac_high)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor,
               kind: Literal["k1", "k2", "k3", "k3_ratio"] = "k3",
               old_logp: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token estimate of KL(π_θ ‖ π_ref) from sampled tokens (Schulman 2020, "Approximating
    KL divergence"): logp, ref_logp (B, T) → (B, T), with d = log π_ref − log π_θ (π_ref detached):

        k1 = −d = log π_θ − log π_ref          (unbiased value, can be negative)
        k2 = ½ d²                              (biased value, ≥ 0)
        k3 = exp(d) − d − 1                    (unbiased value, ≥ 0; GRPO, DeepSeekMath eq. 4)
        k3_ratio = ρ·k3, ρ = π_θ/π_old         (needs old_logp; DeepSeek-V3.2, TRL's
                                                `use_bias_correction_kl`)

    What matters inside a loss is the *gradient*, in expectation over the sampled tokens (x ~ π_θ
    for k1–k3, x ~ π_old for k3_ratio); tested by exact enumeration in tests/unit/test_core_policy_loss.py:

        k1        E[∇k1] = E_π[∇log π] = 0: no regularisation, only noise (refused with β > 0 by GRPO)
        k2        E[(log π − log π_ref)∇log π] = ∇ KL(π_θ ‖ π_ref)      the reverse KL's gradient
        k3        E[(1 − π_ref/π)∇log π]       = ∇ KL(π_ref ‖ π_θ)      the forward KL's gradient
        k3_ratio  E_old[∇(ρ·k3)]               = ∇ KL(π_θ ‖ π_ref)      the reverse KL's, also off-policy

    So GRPO's k3 in the loss minimises the forward KL although its value estimates the reverse one.
    """
    if kind not in KL_KINDS:
        raise ValueError(f"kl_penalty: kind must be one of {KL_KINDS} (got {kind!r})")
    _check_same("kl_penalty", "logp", logp, "ref_logp", ref_logp)
    d = ref_logp.detach() - logp  # (B, T)
    if kind == "k1":
        return -d  # (B, T)
    if kind == "k2":
        return 0.5 * d.square()  # (B, T)
    k3 = torch.expm1(d) - d  # (B, T)
    if kind == "k3":
        return k3
    if old_logp is None:
        raise ValueError("kl_penalty: kind 'k3_ratio' needs old_logp (the sampling policy's log-probs)")
    _check_same("kl_penalty", "logp", logp, "old_logp", old_logp)
    return torch.exp(logp - old_logp.detach()) * k3  # (B, T)


def _normaliser(fn: str, name: str, given: Number | None, default: Number) -> Number:
    if given is None:
        return default
    if not isinstance(given, torch.Tensor) and given <= 0:
        raise ValueError(f"{fn}: {name} must be > 0 (got {given})")
    return given


def aggregate_loss(per_token_loss: torch.Tensor, mask: torch.Tensor,
                   mode: Literal["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm",
                                 "seq_mean_token_sum"] = "seq_mean_token_mean",
                   max_tokens: int | None = None, num_tokens: Number | None = None,
                   num_seqs: Number | None = None) -> torch.Tensor:
    """Reduce a per-token loss (B, T) over `mask` (B, T) to a scalar, with |o_i| = Σ_t m_{i,t},
    N = num_tokens (default Σ_i |o_i|), S = num_seqs (default B), L = max_tokens:

        "seq_mean_token_mean"      (1/S) Σ_i (1/|o_i|) Σ_t ℓ_{i,t}   GRPO (DeepSeekMath eq. 3)
        "token_mean"               (1/N) Σ_i Σ_t ℓ_{i,t}             DAPO token-level
        "seq_mean_token_sum_norm"  (1/S) Σ_i (1/L) Σ_t ℓ_{i,t}       Dr. GRPO (constant L)
        "seq_mean_token_sum"       (1/S) Σ_i Σ_t ℓ_{i,t}

    Gradient accumulation: the per-sequence terms depend on their own row only, so a batch split
    into micro-batches gives the full-batch loss as the *sum* of the micro-batch losses when each
    is called with the whole batch's normaliser: `num_tokens` = the batch's total mask count
    ("token_mean") and `num_seqs` = the batch's number of sequences (the "seq_*" modes). Each mode
    reads only its own normaliser, so a trainer may always pass both. They may be tensors (e.g.
    all-reduced counts). A fully masked row contributes 0.
    """
    if mode not in AGG_MODES:
        raise ValueError(f"aggregate_loss: mode must be one of {AGG_MODES} (got {mode!r})")
    if per_token_loss.dim() != 2:
        raise ValueError(f"aggregate_loss: per_token_loss must have shape (B, T) "
                         f"(got {tuple(per_token_loss.shape)})")
    keep = check_mask(per_token_loss, mask, "aggregate_loss", "per_token_loss")  # (B, T)
    if mode == "token_mean":
        n = _normaliser("aggregate_loss", "num_tokens", num_tokens, keep.sum().clamp_min(1))  # ()
        return masked_sum(per_token_loss, keep) / n  # ()
    seq_sum = masked_sum(per_token_loss, keep, dim=1)  # (B,)
    if mode == "seq_mean_token_mean":
        per_seq = seq_sum / keep.sum(dim=1).clamp_min(1)  # (B,)
    elif mode == "seq_mean_token_sum_norm":
        if max_tokens is None or max_tokens <= 0:
            raise ValueError(f"aggregate_loss: mode 'seq_mean_token_sum_norm' needs max_tokens > 0 "
                             f"(got {max_tokens})")
        per_seq = seq_sum / max_tokens  # (B,)
    else:
        per_seq = seq_sum  # (B,)
    s = _normaliser("aggregate_loss", "num_seqs", num_seqs, max(keep.shape[0], 1))
    return per_seq.sum() / s  # ()


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last axis: H = −Σ_v p_v log p_v; (B, T, V) → (B, T).

    Uses log_softmax (stable for large logits); p_v = 0 terms (e.g. −inf logits) count 0, in
    value and gradient. Half-precision logits are computed in float32.
    """
    x = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits  # (B, T, V)
    logp = torch.log_softmax(x, dim=-1)  # (B, T, V)
    p = logp.exp()  # (B, T, V)
    return -(p * logp.masked_fill(p == 0, 0.0)).sum(dim=-1)  # (B, T)


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, *, clip_eps_low: float = 0.2, clip_eps_high: float = 0.2,
              beta: float = 0.0, ref_logp: torch.Tensor | None = None,
              kl_kind: Literal["k1", "k2", "k3", "k3_ratio"] = "k3",
              ratio_level: Literal["token", "sequence"] = "token",
              agg: Literal["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm",
                           "seq_mean_token_sum"] = "seq_mean_token_mean",
              max_tokens: int | None = None, num_tokens: Number | None = None,
              num_seqs: Number | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GRPO-family policy loss (DeepSeekMath eq. 3; DAPO; Dr. GRPO; GSPO):

        ℓ_{i,t} = −min(r_{i,t}·A_{i,t}, clip(r_{i,t}, 1−ε_low, 1+ε_high)·A_{i,t}) + β·KL_{i,t}
        loss    = aggregate_loss(ℓ, mask, agg)

    beta  # β, KL coefficient (needs ref_logp); ratio_level "token" | "sequence" (GSPO-token).
    logp, old_logp, mask, ref_logp (B, T); advantages (B,) or (B, T) → (loss (), stats) with
    detached 0-dim tensors "clipfrac_low", "clipfrac_high", "ratio_mean" (masked mean of r) and
    "kl" (masked mean of the chosen estimator, when beta > 0 or ref_logp is given). Stats are
    means over this call's tokens; the loss uses the global normalisers (see `aggregate_loss`).
    Masked-out positions of logp / old_logp / ref_logp / (B, T) advantages are set to 0 first,
    so padding values (even ±inf or NaN) reach neither the loss nor its gradient.
    """
    _check_same("grpo_loss", "logp", logp, "old_logp", old_logp)
    if beta < 0:
        raise ValueError(f"grpo_loss: beta must be >= 0 (got {beta})")
    if beta > 0 and ref_logp is None:
        raise ValueError(f"grpo_loss: beta > 0 (got {beta}) needs ref_logp")
    keep = check_mask(logp, mask, "grpo_loss", "logp")  # (B, T)
    logp, old_logp = zero_outside(logp, keep), zero_outside(old_logp, keep)  # (B, T), (B, T)
    if ref_logp is not None:
        _check_same("grpo_loss", "logp", logp, "ref_logp", ref_logp)
        ref_logp = zero_outside(ref_logp, keep)  # (B, T)
    if advantages.shape == keep.shape:
        advantages = zero_outside(advantages, keep)  # (B, T)
    ratio = importance_ratio(logp, old_logp, keep, ratio_level)  # (B, T)
    surr = clipped_surrogate(ratio, advantages, clip_eps_low, clip_eps_high, keep)
    per_token = surr.loss  # (B, T)
    stats = {"clipfrac_low": surr.clipfrac_low, "clipfrac_high": surr.clipfrac_high,
             "ratio_mean": masked_mean(ratio.detach(), keep)}
    if ref_logp is not None:
        kl = kl_penalty(logp, ref_logp, kl_kind, old_logp)  # (B, T)
        stats["kl"] = masked_mean(kl.detach(), keep)
        if beta > 0:
            per_token = per_token + beta * kl  # (B, T)
    loss = aggregate_loss(per_token, keep, agg, max_tokens, num_tokens, num_seqs)  # ()
    return loss, stats
