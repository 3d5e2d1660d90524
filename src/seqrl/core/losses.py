"""Losses as pure functions of tensors."""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def token_nll_sum(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Summed next-token negative log-likelihood over labelled positions, and their count.

    logits (B, L, V) predict position t+1 from position t; labels (B, L) hold the token ids to
    score and `IGNORE_INDEX` (-100) where nothing is scored (prompt, padding). Returning the sum
    and the count lets a caller divide by the token count of the *whole* batch, so the gradient of
    a batch split into micro-batches equals the gradient of the batch in one piece.
    """
    pred = logits[:, :-1, :]  # (B, L-1, V)
    if pred.dtype in (torch.float16, torch.bfloat16):
        pred = pred.float()  # the softmax in fp32 under autocast
    target = labels[:, 1:]  # (B, L-1)
    total = F.cross_entropy(pred.reshape(-1, pred.shape[-1]), target.reshape(-1),
                            ignore_index=IGNORE_INDEX, reduction="sum")
    return total, int((target != IGNORE_INDEX).sum())


def action_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, discrete: bool = False) -> torch.Tensor:
    """The Decision Transformer's action loss over real (unpadded) steps only; a scalar.

    continuous: pred, target (B, K, A), mask (B, K) →  Σ_{real b,k} ‖pred − target‖² / (n_real · A)
                (mean squared error over the real steps' action entries, as the official code)
    discrete:   pred logits (B, K, n), target (B, K) long →  mean over real steps of −log softmax(pred)[target];
                logits (B, K, D, n), target (B, K, D) (continuous actions as D tokens each, e.g. the VLA's
                binned actions) → the mean over real steps and the D dimensions

    A batch without a real step gives 0 (no NaN).
    """
    if mask.shape != pred.shape[:2]:
        raise ValueError(f"action_loss: mask must have shape {tuple(pred.shape[:2])} (got {tuple(mask.shape)})")
    real = mask.bool()  # (B, K)
    if not bool(real.any()):
        return pred.sum() * 0.0
    if discrete:
        if target.shape != pred.shape[:-1]:
            raise ValueError(f"action_loss: discrete targets must have shape {tuple(pred.shape[:-1])} "
                             f"(got {tuple(target.shape)})")
        return F.cross_entropy(pred[real].flatten(0, -2), target[real].flatten())  # mean over real steps (× D)
    if target.shape != pred.shape:
        raise ValueError(f"action_loss: targets must have shape {tuple(pred.shape)} (got {tuple(target.shape)})")
    return ((pred - target)[real] ** 2).mean()  # (n_real, A) → mean
