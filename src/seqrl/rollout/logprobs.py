"""Per-token log-probabilities of given completions under a model: the one full forward pass the RL
trainers compare the sampler's log-probs with, and compute π_old and π_ref from."""

from __future__ import annotations

import torch

from seqrl.core.policy_loss import entropy_from_logits
from seqrl.models.lm import model_device


def sequence_logprobs(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    completion_ids: torch.Tensor,
    pad_id: int,
    temperature: float = 1.0,
    bf16: bool = False,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(o_t | q, o_<t) of each completion token, and optionally the entropy there.

    Rows are prompt + completion, right-padded; completion_ids (m, T) may carry padding after each
    completion's end (those positions are garbage and must be masked by the caller).
    Returns logp (m, T) and entropy (m, T) or None, on the device of `completion_ids` (the forward
    pass runs on the model's device; `completion_ids` may be on the CPU or there).
    """
    dev = model_device(model)
    if completion_ids.device not in (torch.device("cpu"), dev):
        raise ValueError(f"sequence_logprobs: completion_ids is on device {completion_ids.device}, the model on "
                         f"{dev}; give them on the CPU or the model's device (run.device)")
    m, t = completion_ids.shape
    lengths = [len(p) for p in prompt_ids]
    width = max(lengths) + t
    ids = torch.full((m, width), pad_id, dtype=torch.long)  # (m, L)
    attn = torch.zeros((m, width), dtype=torch.long)  # (m, L)
    for i, p in enumerate(prompt_ids):
        ids[i, : len(p)] = torch.tensor(p)
        ids[i, len(p) : len(p) + t] = completion_ids[i]
        attn[i, : len(p) + t] = 1
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=ids.to(dev), attention_mask=attn.to(dev)).logits  # (m, L, V)
    # The logits predicting completion token j sit at position len(prompt) − 1 + j.
    pos = (torch.tensor(lengths)[:, None] - 1 + torch.arange(t)[None, :]).to(dev)  # (m, T)
    picked = logits.gather(1, pos[..., None].expand(-1, -1, logits.shape[-1])).float() / temperature  # (m, T, V)
    logp = torch.log_softmax(picked, dim=-1).gather(-1, completion_ids.to(dev)[..., None]).squeeze(-1)  # (m, T)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = entropy_from_logits(picked.detach()).to(completion_ids.device)  # (m, T)
    return logp.to(completion_ids.device), entropy
