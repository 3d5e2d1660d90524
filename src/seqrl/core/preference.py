"""Pairwise preference math for reward models: the Bradley–Terry loss and where a scalar head reads.

A reward model scores a whole sequence with one number, read from a per-token head at the sequence's
last real (non-pad) token. B pairs (chosen, rejected) of the same prompt give scores r_c, r_r (B,).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position of each row's last nonzero mask entry: attention_mask (B, L) → (B,) long.

    Works under left padding (the last position), right padding (before the pads) and any mix; a row
    without a real token is an error (it has no score).
    """
    if attention_mask.dim() != 2:
        raise ValueError(f"last_token_index: attention_mask must have shape (B, L) (got {tuple(attention_mask.shape)})")
    real = attention_mask != 0  # (B, L)
    if not bool(real.any(dim=1).all()):
        raise ValueError("last_token_index: a row of attention_mask has no real token")
    length = attention_mask.shape[1]
    return (length - 1 - real.flip(1).int().argmax(dim=1)).long()  # (B,) first real token from the right


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor, margin: torch.Tensor | None = None,
                       center_coef: float = 0.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Bradley–Terry pairwise loss (Ouyang et al. 2022, eq. 1; TRL `RewardTrainer`):

        loss = mean_i −log σ(r_c,i − r_r,i − m_i)  +  center_coef · mean_i (r_c,i + r_r,i)²

    chosen, rejected (B,) scores; margin (B,) or None (m = 0: Llama 2's margin term, a pair rated
    "much better" must be separated by at least m); center_coef as TRL's
    `center_rewards_coefficient` (Eisenstein et al. 2023): pulls the scores toward mean 0, which the
    pairwise term alone leaves free. Returns (loss (), stats) with detached "accuracy" (fraction of
    pairs with r_c > r_r; a tie counts as wrong) and "margin" (mean r_c − r_r).
    """
    if chosen.dim() != 1 or chosen.shape != rejected.shape:
        raise ValueError(f"bradley_terry_loss: chosen and rejected must have one shape (B,) "
                         f"(got {tuple(chosen.shape)} and {tuple(rejected.shape)})")
    if margin is not None and margin.shape != chosen.shape:
        raise ValueError(f"bradley_terry_loss: margin shape {tuple(margin.shape)} must equal {tuple(chosen.shape)}")
    if center_coef < 0:
        raise ValueError(f"bradley_terry_loss: center_coef must be >= 0 (got {center_coef})")
    diff = chosen - rejected  # (B,)
    logits = diff if margin is None else diff - margin.to(diff.dtype)  # (B,)
    loss = -F.logsigmoid(logits).mean()  # ()
    if center_coef:
        loss = loss + center_coef * (chosen + rejected).square().mean()
    d = diff.detach()
    return loss, {"accuracy": (d > 0).to(d.dtype).mean(), "margin": d.mean()}
