"""Advantage estimators: group-normalised (GRPO, Dr. GRPO), leave-one-out (RLOO), global batch
normalisation (REINFORCE++), GAE and returns-to-go.

Outcome rewards come as (B, G): B prompts (groups), G sampled completions per prompt. Every
group-based estimator gives exactly 0 to a group whose rewards are all equal (it carries no
learning signal; DAPO's dynamic sampling drops such groups, see `zero_variance_groups`).
"""

from __future__ import annotations

from typing import Literal

import torch

from seqrl.core.masking import check_mask, masked_whiten

SCALES = ("group", "batch", "none")


def _check_groups(rewards: torch.Tensor, fn: str, min_group: int = 2) -> None:
    if rewards.dim() != 2:
        raise ValueError(f"{fn}: rewards must have shape (B, G) (got {tuple(rewards.shape)})")
    if rewards.shape[1] < min_group:
        raise ValueError(f"{fn}: group size G = rewards.shape[1] must be >= {min_group} "
                         f"(got {rewards.shape[1]})")


def zero_variance_groups(rewards: torch.Tensor) -> torch.Tensor:
    """Groups whose G rewards are all equal: rewards (B, G) → (B,) bool.

    DAPO (Yu et al. 2025, dynamic sampling) keeps only groups with
    0 < #correct < G, i.e. drops the groups this function marks.
    """
    _check_groups(rewards, "zero_variance_groups", min_group=1)
    return (rewards == rewards[:, :1]).all(dim=1)  # (B,)


def group_advantages(rewards: torch.Tensor, scale: Literal["group", "batch", "none"] = "group",
                     eps: float = 1e-4) -> torch.Tensor:
    """Group-relative outcome advantage: rewards (B, G) → advantages (B, G).

        A_i = (r_i − mean_g(r)) / (std + eps)

    - scale="group": std = std_g(r), the group's std (GRPO, Shao et al. 2024 "DeepSeekMath",
      §4.1.2, outcome supervision).
    - scale="batch": std = std(r) over all B·G rewards (TRL `scale_rewards="batch"`); the
      baseline is still the group mean.
    - scale="none": no division (Dr. GRPO, Liu et al. 2025 "Understanding R1-Zero-Like
      Training", which removes the std's question-difficulty bias).

    std is the *unbiased* (Bessel, n − 1) estimate, as `torch.std` in TRL's GRPOTrainer, with
    `eps` added to the std (TRL: 1e-4). A group whose rewards are all equal gets exactly 0.
    """
    _check_groups(rewards, "group_advantages")
    if scale not in SCALES:
        raise ValueError(f"group_advantages: scale must be one of {SCALES} (got {scale!r})")
    if eps < 0:
        raise ValueError(f"group_advantages: eps must be >= 0 (got {eps})")
    adv = rewards - rewards.mean(dim=1, keepdim=True)  # (B, G)
    if scale == "group":
        adv = adv / (rewards.std(dim=1, keepdim=True) + eps)  # (B, G)
    elif scale == "batch":
        adv = adv / (rewards.std() + eps)  # (B, G)
    flat = zero_variance_groups(rewards)[:, None]  # (B, 1)
    return torch.where(flat, torch.zeros_like(adv), adv)  # (B, G)


def compute_group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """Kept name: `group_advantages(rewards, scale="group")`, rewards (B, G) → (B, G)."""
    return group_advantages(rewards, scale="group")


def rloo_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """Leave-one-out baseline: rewards (B, G) → advantages (B, G), G ≥ 2.

        A_i = r_i − 1/(G−1) · Σ_{j≠i} r_j   (= G/(G−1) · (r_i − mean_g(r)))

    RLOO (Kool et al. 2019 "Buy 4 REINFORCE samples, get a baseline for free!"; Ahmadian et al.
    2024 "Back to Basics"). A group whose rewards are all equal gets exactly 0.
    """
    _check_groups(rewards, "rloo_advantages")
    g = rewards.shape[1]  # G
    others_mean = (rewards.sum(dim=1, keepdim=True) - rewards) / (g - 1)  # (B, G)
    adv = rewards - others_mean  # (B, G)
    flat = zero_variance_groups(rewards)[:, None]  # (B, 1)
    return torch.where(flat, torch.zeros_like(adv), adv)  # (B, G)


def reinforce_pp_advantages(rewards: torch.Tensor, mask: torch.Tensor | None = None,
                            eps: float = 1e-8) -> torch.Tensor:
    """Global batch normalisation (REINFORCE++, Hu 2025): rewards (B, G) → advantages (B, G).

        A = (r − mean(r)) / sqrt(var(r) + eps)

    with mean and unbiased var over every entry where `mask` (B, G) is nonzero (all entries when
    mask is None); masked-out entries get 0. Any (B, T) token-level rewards work the same way.
    """
    if rewards.dim() != 2:
        raise ValueError(f"reinforce_pp_advantages: rewards must have shape (B, G) "
                         f"(got {tuple(rewards.shape)})")
    keep = torch.ones_like(rewards, dtype=torch.bool) if mask is None else \
        check_mask(rewards, mask, "reinforce_pp_advantages", "rewards")  # (B, G)
    return masked_whiten(rewards, keep, shift_mean=True, eps=eps)  # (B, G)


def reinforce_pp_token_advantages(rewards: torch.Tensor, token_counts: torch.Tensor,
                                  eps: float = 1e-8) -> torch.Tensor:
    """REINFORCE++ with token-level whitening, as verl and OpenRLHF do it: every token of completion i
    carries its outcome reward r_i, and the whitening pools all tokens of the batch, so a completion
    weighs by its length L_i. rewards, token_counts (B, G) → advantages (B, G), one per completion
    (the same for each of its tokens):

        μ = Σ L_i r_i / N,   σ² = Σ L_i (r_i − μ)² / (N − 1),   N = Σ L_i,   A_i = (r_i − μ) / sqrt(σ² + eps)

    — equal to `masked_whiten` over the (B·G, T) token grid. Completions with L_i = 0 get 0.
    """
    if rewards.dim() != 2 or token_counts.shape != rewards.shape:
        raise ValueError(f"reinforce_pp_token_advantages: rewards and token_counts must have one shape (B, G) "
                         f"(got {tuple(rewards.shape)} and {tuple(token_counts.shape)})")
    if bool((token_counts < 0).any()):
        raise ValueError("reinforce_pp_token_advantages: token_counts must be >= 0")
    w = token_counts.to(rewards.dtype)  # (B, G)
    n = w.sum()  # ()
    mean = (w * rewards).sum() / n.clamp_min(1)  # ()
    var = (w * (rewards - mean).square()).sum() / (n - 1).clamp_min(1)  # ()
    adv = (rewards - mean) * torch.rsqrt(var + eps)  # (B, G)
    return torch.where(w > 0, adv, torch.zeros_like(adv))  # (B, G)


def _check_discount(fn: str, name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{fn}: {name} must be in [0, 1] (got {value})")


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
        lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation per token (Schulman et al. 2016, eq. 16).

        δ_t = r_t + γ·V_{t+1} − V_t,   A_t = δ_t + γλ·A_{t+1},   returns_t = A_t + V_t

    gamma  # γ, discount;  lam  # λ, GAE trade-off.
    rewards, values, mask (B, T) → (advantages (B, T), returns (B, T)). Only positions where the
    mask is nonzero take part: t+1 means the next *masked-in* position, after the last one
    V = 0 and A = 0 (the episode ends), and masked-out positions (prompt, padding after the end)
    contribute nothing and get 0. Pass detached values: this is a target, not a loss.
    """
    if values.shape != rewards.shape:
        raise ValueError(f"gae: values shape {tuple(values.shape)} must equal rewards shape "
                         f"{tuple(rewards.shape)}")
    if rewards.dim() != 2:
        raise ValueError(f"gae: rewards must have shape (B, T) (got {tuple(rewards.shape)})")
    keep = check_mask(rewards, mask, "gae", "rewards")  # (B, T)
    _check_discount("gae", "gamma", gamma)
    _check_discount("gae", "lam", lam)
    zero = torch.zeros_like(rewards[:, 0])  # (B,)
    next_value, next_adv = zero, zero  # (B,), (B,)
    advantages = [zero] * rewards.shape[1]
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]  # (B,)
        adv_t = delta + gamma * lam * next_adv  # (B,)
        advantages[t] = torch.where(keep[:, t], adv_t, zero)  # (B,)
        next_value = torch.where(keep[:, t], values[:, t], next_value)  # (B,)
        next_adv = torch.where(keep[:, t], adv_t, next_adv)  # (B,)
    adv = torch.stack(advantages, dim=1)  # (B, T)
    returns = torch.where(keep, adv + values, torch.zeros_like(adv))  # (B, T)
    return adv, returns


def returns_to_go(rewards: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Discounted returns-to-go along the last dimension: rewards (..., T) → (..., T).

        G_t = Σ_{t'=t}^{T−1} γ^{t'−t} r_{t'}

    γ = 1 is the Decision Transformer's undiscounted return-to-go R̂_t (Chen et al. 2021, §3); the DT
    divides it by its return scale inside the model. Padding after an episode's end must hold
    reward 0 (it then changes nothing before it). Computed in the input's dtype (pass float64 for
    long episodes when exact sums matter); T = 0 gives an empty tensor.

    >>> returns_to_go(torch.tensor([1.0, 2.0, 3.0]))
    tensor([6., 5., 3.])
    >>> returns_to_go(torch.tensor([1.0, 2.0, 4.0]), gamma=0.5)
    tensor([3., 4., 4.])
    """
    _check_discount("returns_to_go", "gamma", gamma)
    if not rewards.is_floating_point():
        raise ValueError(f"returns_to_go: rewards must be a float tensor (got {rewards.dtype})")
    if gamma == 1.0:
        return rewards.flip(-1).cumsum(-1).flip(-1)  # (..., T)
    rtg = torch.empty_like(rewards)  # (..., T)
    running = torch.zeros_like(rewards[..., :1])  # (..., 1)
    for t in range(rewards.shape[-1] - 1, -1, -1):
        running = rewards[..., t : t + 1] + gamma * running
        rtg[..., t : t + 1] = running
    return rtg
