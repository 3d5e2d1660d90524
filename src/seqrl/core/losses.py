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
