"""Supervised fine-tuning on (prompt, completion) pairs with the prompt tokens masked out.

`encode_pairs` / `encode_examples` turn problems and completions into token ids, `collate` pads a
batch, `accumulate_gradients` backs the token-mean NLL over micro-batches, and `finetune` runs a
short single-process loop over a fixed example set (STaR's per-iteration fine-tune; the SFT trainer
keeps its own loop for resume, distribution and evaluation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from seqrl.core.losses import IGNORE_INDEX, token_nll_sum
from seqrl.models.lm import Policy, check_on_device, model_device
from seqrl.types import Problem
from seqrl.training.run import FiniteCheck
from seqrl.training.update import OptimGroup, apply_update
from seqrl.utils.dist import bf16_autocast

Example = tuple[list[int], list[int]] | tuple[list[int], list[int], list[int]]
"""(prompt ids, completion ids + EOS), or with a third list, per completion token 1 where it is trained
(a multi-turn episode: the policy's tokens 1, the tool turns' 0)."""


def encode_pairs(policy: Policy, problems: Sequence[Problem], completions: Sequence[str]) -> list[Example]:
    """(prompt ids, completion ids + EOS) per (problem, completion); the prompt rendered by the policy
    (`Policy.prompt`); an example longer than the context is an error naming the problem."""
    if len(problems) != len(completions):
        raise ValueError(f"encode_pairs: {len(problems)} problems but {len(completions)} completions")
    tok = policy.tokenizer
    prompts = policy.encode_prompts(list(problems))
    examples = []
    for prob, prompt, text in zip(problems, prompts, completions):
        completion = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
        if len(prompt) + len(completion) > policy.max_seq_len:
            raise ValueError(
                f"example {prob.uid or prob.prompt!r} has {len(prompt) + len(completion)} tokens, more than "
                f"the model's context of {policy.max_seq_len} (model.max_seq_len)"
            )
        examples.append((prompt, completion))
    return examples


def encode_examples(policy: Policy, problems: list[Problem], target: str = "solution") -> list[Example]:
    """`encode_pairs` on each problem's worked solution (`Problem.target`), or with ``target="completion"``
    on its row's own reply (`row_completion`)."""
    return encode_pairs(policy, problems, [p.target if target == "solution" else row_completion(p) for p in problems])


def row_completion(problem: Problem) -> str:
    """A dataset row's own reply: its ``completion`` column (text, or messages ending in the assistant's
    turn) or the last assistant turn of its ``messages``; a row with neither is an error naming it.

    >>> row_completion(Problem("2+2=", "4", metadata={"completion": " 4"}))
    ' 4'
    >>> row_completion(Problem("hi", "", metadata={"messages": [{"role": "user", "content": "hi"},
    ...                                                          {"role": "assistant", "content": "hello"}]}))
    'hello'
    """
    meta = problem.metadata or {}
    value = meta.get("completion")
    if value is None and isinstance(meta.get("messages"), list) and meta["messages"]:
        value = meta["messages"]
    if isinstance(value, list) and value and isinstance(value[-1], dict) and value[-1].get("role") == "assistant":
        value = value[-1].get("content")
    if not isinstance(value, str):
        where = meta.get("source", problem.uid or problem.prompt[:40])
        raise ValueError(f"{where}: target completion needs a 'completion' column (text or an assistant message) or "
                         f"'messages' ending in the assistant's turn")
    return value


def collate(examples: list[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded input ids, attention mask and labels (-100 on prompt and padding, and on the
    completion tokens an example's third list leaves out)."""
    width = max(len(e[0]) + len(e[1]) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)  # (B, L)
    labels = torch.full((len(examples), width), IGNORE_INDEX, dtype=torch.long)  # (B, L)
    mask = torch.zeros((len(examples), width), dtype=torch.long)  # (B, L)
    for i, e in enumerate(examples):
        p, c = e[0], e[1]
        seq = p + c
        ids[i, : len(seq)] = torch.tensor(seq)
        target = torch.tensor(c)
        if len(e) > 2:
            if len(e[2]) != len(c):
                raise ValueError(f"collate: example {i} has {len(c)} completion tokens but {len(e[2])} mask entries")
            target = target.masked_fill(torch.tensor(e[2]) == 0, IGNORE_INDEX)
        labels[i, len(p) : len(seq)] = target
        mask[i, : len(seq)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def accumulate_gradients(model, chunks: list[dict[str, torch.Tensor]], bf16: bool = False,
                         device_type: str | None = None, n_tokens: int | None = None) -> tuple[float, int]:
    """Backward the token-mean NLL of a batch given as micro-batches; returns (NLL sum, tokens).

    Each micro-batch's summed NLL is divided by the token count of the whole batch (`n_tokens`, by
    default that of `chunks`; under torchrun that of every process's share), so the accumulated
    gradient equals that of the batch in one piece.
    """
    dev = model_device(model)
    for chunk in chunks:
        for key in ("input_ids", "labels"):
            check_on_device(f"batch {key}", chunk[key], dev)
    if n_tokens is None:
        n_tokens = sum(int((c["labels"][:, 1:] != IGNORE_INDEX).sum()) for c in chunks)
    loss_sum = 0.0
    for chunk in chunks:
        with bf16_autocast(device_type or dev, bf16):
            logits = model(input_ids=chunk["input_ids"], attention_mask=chunk["attention_mask"]).logits  # (b, L, V)
        nll, _ = token_nll_sum(logits, chunk["labels"])
        (nll / max(n_tokens, 1)).backward()
        loss_sum += nll.item()
    return loss_sum, n_tokens


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The example order of one epoch: a permutation of range(n), a pure function of (seed, epoch)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch)).tolist()


def finetune(model, examples: list[Example], *, steps: int, batch_size: int, optimizer, scheduler, pad_id: int,
             seed: int, grad_clip: float = 1.0, bf16: bool = False, on_nonfinite: str = "stop",
             label: str = "fine-tune") -> dict[str, float]:
    """`steps` optimizer steps of token-mean NLL on `examples`, batches drawn in per-epoch
    permutations (a pure function of `seed`, so a rerun repeats the same batches), each ending with
    `apply_update` under `on_nonfinite` (``stop`` raises `NonFiniteError` naming `label` and the step;
    ``skip_step`` skips that update).

    Returns ``loss/sft`` (the mean of the finite step losses), ``loss/sft_last``, ``stats/grad_norm``
    (of the last step) and ``stats/skipped_updates``.
    """
    if not examples:
        raise ValueError("finetune() needs at least one example")
    if steps < 1 or batch_size < 1:
        raise ValueError(f"finetune(): steps and batch_size must be >= 1 (got {steps}, {batch_size})")
    dev = model_device(model)
    n, losses, grad_norm, orders = len(examples), [], 0.0, {}
    group, check = OptimGroup("model", model, optimizer, scheduler, grad_clip), FiniteCheck(on_nonfinite, label=label)

    model.train()
    for step in range(steps):
        positions = range(step * batch_size, (step + 1) * batch_size)
        for epoch in {p // n for p in positions} - orders.keys():
            orders[epoch] = epoch_order(n, seed, epoch)
        idx = [orders[p // n][p % n] for p in positions]
        batch = {k: v.to(dev) for k, v in collate([examples[i] for i in idx], pad_id).items()}
        loss_sum, n_tokens = accumulate_gradients(model, [batch], bf16, dev.type)
        losses.append(loss_sum / max(n_tokens, 1))
        grad_norm = apply_update([group], step, check, losses[-1]).norm
    finite = [x for x in losses if math.isfinite(x)]
    mean = sum(finite) / len(finite) if finite else float("nan")
    return {"loss/sft": mean, "loss/sft_last": losses[-1], "stats/grad_norm": grad_norm,
            "stats/skipped_updates": float(check.skipped)}
