"""Per-token log-probabilities of given completions under a model: the forward pass the RL trainers
compare the sampler's log-probs with, train through, and compute π_old and π_ref from.

Two forwards compute the same numbers (tested: loss and every gradient within 1e-6 in float64):

* `sequence_logprobs`, the padded forward: each row is prompt + completion, right-padded to the
  longest prompt + T, so a prompt shared by G completions is computed G times and every row pays
  for the longest prompt and the full width T;
* `shared_prompt_logprobs`, the shared-prompt forward: each distinct prompt (but its last token) runs
  once, its KV cache is indexed out to the rows that continue it (gradients flow back through the
  indexing into the prompt's computation), and the completions run on top, cut to the micro-batch's
  longest completion. `pack_micro_batches` orders rows so a group's completions share a micro-batch
  and completions of similar length travel together.
"""

from __future__ import annotations

import inspect
import sys

import torch

from seqrl.core.policy_loss import entropy_from_logits
from seqrl.models.lm import cache_kwarg, model_device
from seqrl.utils import dist
from seqrl.utils.dist import bf16_autocast


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
    with bf16_autocast(dev, bf16):
        logits = model(input_ids=ids.to(dev), attention_mask=attn.to(dev)).logits  # (m, L, V)
    # The logits predicting completion token j sit at position len(prompt) − 1 + j.
    pos = (torch.tensor(lengths)[:, None] - 1 + torch.arange(t)[None, :]).to(dev)  # (m, T)
    picked = logits.gather(1, pos[..., None].expand(-1, -1, logits.shape[-1]))  # (m, T, V)
    return token_logprobs(picked, completion_ids, temperature, with_entropy)


def token_logprobs(logits: torch.Tensor, completion_ids: torch.Tensor, temperature: float,
                   with_entropy: bool, entropy_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log_softmax(logits / temperature) at the completion tokens, and the entropy there (with its
    graph only when `entropy_grad`: an entropy bonus). The one place logits meet the temperature
    outside the sampler.

    logits (m, t, V) predict completion_ids[:, :t] (t ≤ T); positions t … T−1 are returned as 0.
    Half-precision logits are computed in float32; float32 and float64 keep their precision.
    """
    m, t = logits.shape[:2]
    width = completion_ids.shape[1]
    x = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    picked = x / temperature  # (m, t, V)
    target = completion_ids[:, :t].to(logits.device)[..., None]  # (m, t, 1)
    logp = torch.log_softmax(picked, dim=-1).gather(-1, target).squeeze(-1)  # (m, t)
    entropy = None
    if with_entropy and entropy_grad:
        entropy = entropy_from_logits(picked)  # (m, t)
    elif with_entropy:
        with torch.no_grad():
            entropy = entropy_from_logits(picked.detach())  # (m, t)
    if t < width:
        logp = torch.nn.functional.pad(logp, (0, width - t))  # (m, T)
        entropy = torch.nn.functional.pad(entropy, (0, width - t)) if entropy is not None else None
    return logp.to(completion_ids.device), entropy.to(completion_ids.device) if entropy is not None else None


def shared_prompt_unsupported(model: torch.nn.Module) -> str | None:
    """Why `shared_prompt_logprobs` cannot run `model` (None: it can).

    It needs a Hugging Face decoder-only causal LM whose forward takes a KV cache (`cache`, or
    `past_key_values` in older versions) and `position_ids`, with full attention in every layer:
    sliding-window attention counts cache slots, which the prompts' padding would shift, and a
    linear-attention or recurrent layer would fold that padding into its state.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT model's own
    config = getattr(base, "config", None)
    if config is None or not hasattr(base, "forward"):
        return f"{type(base).__name__} is not a Hugging Face model (no config)"
    if getattr(config, "is_encoder_decoder", False):
        return f"{type(base).__name__} is an encoder-decoder model"
    params = inspect.signature(base.forward).parameters
    if cache_kwarg(base) is None:
        return f"{type(base).__name__}.forward takes no KV cache (cache / past_key_values)"
    if "position_ids" not in params:
        return f"{type(base).__name__}.forward takes no position_ids"
    other = sorted({str(t) for t in getattr(config, "layer_types", None) or () if t != "full_attention"})
    if any("sliding" in t for t in other) or (
            getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)):
        return "sliding-window attention (it counts cache slots, which prompt padding shifts)"
    if other:  # linear attention / recurrent layers would carry the prefix's padding in their state
        return f"layers other than full attention ({', '.join(other)})"
    return None


def use_shared_prompt_forward(setting: str, model: torch.nn.Module) -> bool:
    """Whether a trainer's `shared_prompt_forward` setting (auto | on | off) runs `shared_prompt_logprobs`
    for `model`: auto falls back to the padded forward with a one-line note, on refuses a model it
    cannot run, naming why."""
    if setting == "off":
        return False
    reason = shared_prompt_unsupported(model)
    if reason is None:
        return True
    if setting == "on":
        raise ValueError(f"shared_prompt_forward = 'on' but this model cannot share prompts: {reason}; "
                         f"use 'auto' (falls back to the padded forward) or 'off'")
    if dist.is_main():
        print(f"note: shared_prompt_forward auto: padded forward ({reason})", file=sys.stderr)
    return False


def shared_prompt_logprobs(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    pad_id: int,
    temperature: float = 1.0,
    bf16: bool = False,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`sequence_logprobs` computing each distinct prompt once: the same (m, T) log-probs and entropies
    on the completion tokens (`completion_mask` nonzero); 0 past the longest completion of the rows.

    Layout. Prefix forward: each distinct prompt without its last token, right-padded to the longest
    (positions 0 … len − 2, pads masked). Its KV cache is indexed to the m rows. Row forward: the
    prompt's last token then the completion up to its second-to-last position t − 1 (t: the rows'
    longest completion), at positions len − 1 …; the attention mask hides the prefix's pad slots. So
    the logits at row position j predict completion token j, as in the padded forward. Rows whose
    prompt has a single token (no prefix) make the call fall back to `sequence_logprobs`.
    """
    dev = model_device(model)
    if completion_ids.device not in (torch.device("cpu"), dev):
        raise ValueError(f"shared_prompt_logprobs: completion_ids is on device {completion_ids.device}, the model "
                         f"on {dev}; give them on the CPU or the model's device (run.device)")
    m, width = completion_ids.shape
    if completion_mask.shape != completion_ids.shape:
        raise ValueError(f"shared_prompt_logprobs: completion_mask shape {tuple(completion_mask.shape)} must equal "
                         f"completion_ids shape {tuple(completion_ids.shape)}")
    filled = (completion_mask != 0).any(0).nonzero()  # columns some row uses
    t = int(filled.max()) + 1 if len(filled) else 0
    if t == 0 or min(len(p) for p in prompt_ids) < 2:
        return sequence_logprobs(model, prompt_ids, completion_ids, pad_id, temperature, bf16, with_entropy)
    keys: dict[tuple[int, ...], int] = {}
    which = torch.tensor([keys.setdefault(tuple(p), len(keys)) for p in prompt_ids])  # (m,) row → prompt
    prompts = list(keys)
    lengths = torch.tensor([len(p) for p in prompts])  # (P,)
    width_pre = int(lengths.max()) - 1
    pre_ids = torch.full((len(prompts), width_pre), pad_id, dtype=torch.long)  # (P, Lp)
    pre_mask = torch.zeros((len(prompts), width_pre), dtype=torch.long)  # (P, Lp)
    for i, p in enumerate(prompts):
        pre_ids[i, : len(p) - 1] = torch.tensor(p[:-1])
        pre_mask[i, : len(p) - 1] = 1
    last = torch.tensor([p[-1] for p in prompts])[which]  # (m,) each row's last prompt token
    row_ids = torch.cat([last[:, None], completion_ids[:, : t - 1].cpu()], dim=1)  # (m, t)
    row_mask = torch.cat([pre_mask[which], torch.ones((m, t), dtype=torch.long)], dim=1)  # (m, Lp + t)
    row_pos = (lengths[which] - 1)[:, None] + torch.arange(t)[None, :]  # (m, t)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cache_kw = cache_kwarg(base)
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(base.forward).parameters else {}
    with bf16_autocast(dev, bf16):
        pre = model(input_ids=pre_ids.to(dev), attention_mask=pre_mask.to(dev),
                    position_ids=torch.arange(width_pre)[None, :].expand(len(prompts), -1).to(dev),
                    use_cache=True, **keep)  # the prefix's logits are not needed
        cache = getattr(pre, cache_kw)
        if len(prompts) < m or (which != torch.arange(m)).any():
            cache.batch_select_indices(which.to(dev))  # (P, …) → (m, …): differentiable indexing
        logits = model(input_ids=row_ids.to(dev), attention_mask=row_mask.to(dev), position_ids=row_pos.to(dev),
                       use_cache=True, **{cache_kw: cache}).logits  # (m, t, V)
    return token_logprobs(logits, completion_ids, temperature, with_entropy)


def pack_micro_batches(rows: torch.Tensor, prompt_ids: list[list[int]], completion_mask: torch.Tensor,
                       size: int) -> list[torch.Tensor]:
    """`rows` split into micro-batches of at most `size` for the shared-prompt forward.

    Rows of one prompt stay adjacent (a prompt is computed once per micro-batch it appears in) and
    prompts come in order of their longest completion, longest first, so each micro-batch's width
    (its longest completion) wastes little on shorter rows. The split only reorders the sum of the
    micro-batch losses; with the batch's global normalisers the total is the same.
    """
    if not len(rows):
        return []
    lengths = (completion_mask != 0).long().cumsum(1).argmax(1) + 1  # (N,) last used column + 1
    lengths = lengths * (completion_mask != 0).any(1)
    groups: dict[tuple[int, ...], list[int]] = {}
    for r in rows.tolist():
        groups.setdefault(tuple(prompt_ids[r]), []).append(r)
    order = sorted(groups.values(), key=lambda g: -int(lengths[g].max()))
    flat = torch.tensor([r for g in order for r in g], dtype=rows.dtype)
    return list(flat.split(size))
