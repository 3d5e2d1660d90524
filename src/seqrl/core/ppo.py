"""PPO with a critic, as pure functions: per-token rewards with a KL penalty (InstructGPT), the
clipped value loss, explained variance and GAE advantages normalised within groups.

Shapes: B completions, T completion token positions; `mask` (B, T) is nonzero on generated tokens.
"""

from __future__ import annotations

import torch

from seqrl.core.masking import check_mask, masked_mean, masked_var, masked_whiten, zero_outside


def kl_shaped_rewards(scores: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor | None,
                      mask: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token rewards of RLHF PPO (Ziegler et al. 2019; Ouyang et al. 2022, eq. 2):

        r_t = −β·(log π_old(o_t) − log π_ref(o_t))   on every completion token  (k1 estimator)
        r_T += score                                 on the last completion token only

    scores (B,) — the sequence reward (RM score and/or verifiers); logp, ref_logp, mask (B, T); the
    log-probs are constants (detached). ref_logp may be None when β = 0. Returns (rewards (B, T),
    kl (B, T) = the k1 term, 0 outside the mask). A completion with no token gets no reward.
    """
    keep = check_mask(logp, mask, "kl_shaped_rewards", "logp")  # (B, T)
    if scores.shape != logp.shape[:1]:
        raise ValueError(f"kl_shaped_rewards: scores shape {tuple(scores.shape)} must be (B,) = {tuple(logp.shape[:1])}")
    if beta < 0:
        raise ValueError(f"kl_shaped_rewards: beta must be >= 0 (got {beta})")
    if ref_logp is None:
        if beta > 0:
            raise ValueError("kl_shaped_rewards: beta > 0 needs ref_logp")
        kl = torch.zeros_like(logp)  # (B, T)
    else:
        if ref_logp.shape != logp.shape:
            raise ValueError(f"kl_shaped_rewards: ref_logp shape {tuple(ref_logp.shape)} must equal {tuple(logp.shape)}")
        kl = zero_outside(logp.detach() - ref_logp.detach(), keep)  # (B, T)
    rewards = -beta * kl  # (B, T)
    has = keep.any(dim=1)  # (B,)
    last = (keep.shape[1] - 1 - keep.flip(1).int().argmax(dim=1))  # (B,) last masked-in position
    bonus = torch.zeros_like(rewards)  # (B, T)
    bonus[has, last[has]] = scores[has].to(rewards.dtype)
    return rewards + bonus, kl


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       mask: torch.Tensor, clip: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped value loss (OpenAI baselines ppo2; TRL / OpenRLHF), per token:

        V_clip = V_old + clip(V − V_old, −c, c)
        ℓ_t    = ½ · max((V − R)², (V_clip − R)²)

    c = clip; None gives the plain ½(V − R)². values (with gradient), old_values (the critic when the
    batch was collected), returns, mask (B, T) → (ℓ (B, T), 0 outside the mask; clipfrac (), the
    detached fraction of masked tokens where the clipped term is the larger one).
    """
    keep = check_mask(values, mask, "clipped_value_loss", "values")  # (B, T)
    for name, t in (("old_values", old_values), ("returns", returns)):
        if t.shape != values.shape:
            raise ValueError(f"clipped_value_loss: {name} shape {tuple(t.shape)} must equal {tuple(values.shape)}")
    if clip is not None and clip <= 0:
        raise ValueError(f"clipped_value_loss: clip must be > 0 or None (got {clip})")
    values, old_values, returns = zero_outside(values, keep), zero_outside(old_values.detach(), keep), \
        zero_outside(returns.detach(), keep)
    plain = (values - returns).square()  # (B, T)
    if clip is None:
        return zero_outside(0.5 * plain, keep), torch.zeros((), dtype=values.dtype)
    clipped_v = old_values + (values - old_values).clamp(-clip, clip)  # (B, T)
    clipped = (clipped_v - returns).square()  # (B, T)
    loss = 0.5 * torch.maximum(plain, clipped)  # (B, T)
    frac = masked_mean((clipped > plain).to(values.dtype).detach(), keep)  # ()
    return zero_outside(loss, keep), frac


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """1 − Var(R − V) / Var(R) over the masked tokens: 1 a perfect critic, 0 one no better than a
    constant, < 0 worse. values, returns, mask (B, T) → (); NaN when Var(R) = 0 (undefined)."""
    keep = check_mask(values, mask, "explained_variance", "values")  # (B, T)
    var_r = masked_var(returns, keep)  # ()
    if float(var_r) == 0.0:
        return torch.tensor(float("nan"), dtype=values.dtype)
    return 1 - masked_var(returns - values, keep) / var_r  # ()


def group_whiten_tokens(advantages: torch.Tensor, mask: torch.Tensor, group_size: int,
                        eps: float = 1e-8) -> torch.Tensor:
    """Token advantages (B·G, T) whitened within each group of G consecutive rows (one prompt's G
    samples): (A − mean_g) / sqrt(var_g + eps), mean and unbiased var over the group's masked
    tokens (`masked_whiten` per group). GAE per token then this is `advantage: gae_then_group`.
    Returns (B·G, T), 0 outside the mask."""
    keep = check_mask(advantages, mask, "group_whiten_tokens", "advantages")  # (N, T)
    n = advantages.shape[0]
    if group_size < 1 or n % group_size:
        raise ValueError(f"group_whiten_tokens: rows ({n}) must be a multiple of group_size ({group_size})")
    out = torch.zeros_like(advantages)  # (N, T)
    for g in range(0, n, group_size):
        out[g : g + group_size] = masked_whiten(advantages[g : g + group_size], keep[g : g + group_size], eps=eps)
    return out
