"""Batched sampling with a KV cache: the one generation interface the rest of seqrl uses.

`generate(policy, prompts, n, params)` returns token ids, masks, per-token log-probs of the sampled
tokens, finish reasons and token counts. Compared with calling `model.generate` it does less work:

* each distinct prompt is prefilled once and its KV cache copied to its `n` samples;
* the prefill computes logits for the last position only;
* a finished sequence leaves the batch (its rows are dropped from the KV cache), so it stops costing
  compute — with natural EOS stopping most rows finish well before `max_new_tokens`;
* no logits-processor pipeline: temperature / top-k / top-p are three tensor ops;
* a large vocabulary is sampled by inverse CDF, one uniform per row (`sample_rows`), where
  `torch.multinomial` draws one exponential per vocabulary entry.

Log-probs are those of the sampling distribution before truncation, ``log_softmax(logits / T)``
(T = 1 for greedy), which is what a full forward pass of the policy gives at T = 1: the RL
trainers compare them with a recomputation. Greedy decoding matches `model.generate` token for token.

The forward pass: for Llama / Qwen2 models the lean decoder (`seqrl.rollout.lean`: static KV cache,
fused projections, no module tree) runs by default; any other model, or one with a feature the lean
path does not implement, runs the HF forward with a `DynamicCache`. ``SamplingParams.decode`` chooses
("auto", "lean", "hf"); both paths share the sampling code, so a seed gives the same tokens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from transformers import DynamicCache

try:
    from transformers.tokenization_utils_tokenizers import TokenizersBackend
except ImportError:  # another transformers layout: decode row by row
    TokenizersBackend = None

from seqrl.models.lm import Policy, model_device
from seqrl.rollout.lean import LeanDecoder, PrefixCache, unsupported_reason
from seqrl.utils.progress import progress_bar


@dataclass(frozen=True)
class SamplingParams:
    """How to sample."""

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy (argmax)."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""
    top_k: int = 0
    """Keep the k most likely tokens (0 = all)."""
    max_new_tokens: int = 64
    """Hard cap on generated tokens (finish reason "length")."""
    stop: tuple[str, ...] = ()
    """Stop strings; the completion ends after the token that completes one (finish reason "stop")."""
    seed: int | None = None
    """Seed of a private generator (None: torch's global RNG)."""
    ignore_eos: bool = False
    """Keep generating past EOS (benchmarks with a forced length); stop strings still apply."""
    decode: Literal["auto", "lean", "hf"] = "auto"
    """Forward pass: "auto" = the lean decoder where the model supports it (Llama/Qwen2), else HF;
    "lean" = the lean decoder or a ValueError naming the unsupported feature; "hf" = the HF forward."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"sampling.temperature must be >= 0 (got {self.temperature})")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"sampling.top_p must be in (0, 1] (got {self.top_p})")
        if self.top_k < 0:
            raise ValueError(f"sampling.top_k must be >= 0 (got {self.top_k})")
        if self.max_new_tokens < 1:
            raise ValueError(f"sampling.max_new_tokens must be >= 1 (got {self.max_new_tokens})")
        if any(not s for s in self.stop):
            raise ValueError("sampling.stop must not contain empty strings")
        if self.decode not in ("auto", "lean", "hf"):
            raise ValueError(f"sampling.decode must be one of auto, lean, hf (got {self.decode!r})")


@dataclass
class Rollouts:
    """Samples for P prompts × n each; rows are grouped by prompt (row i belongs to prompt i // n)."""

    prompt_ids: list[list[int]]
    """Token ids of each distinct prompt (P lists)."""
    n: int
    """Samples per prompt."""
    completion_ids: torch.Tensor
    """(P·n, T) generated ids, right-padded with the pad id."""
    completion_mask: torch.Tensor
    """(P·n, T) 1.0 on generated tokens (the EOS token included), 0.0 on padding."""
    logprobs: torch.Tensor
    """(P·n, T) log-prob of each sampled token under log_softmax(logits / T); 0 on padding."""
    finish_reasons: list[str]
    """Per row: "stop" (EOS or a stop string) or "length"."""
    texts: list[str]
    """Per row: the decoded completion without special tokens."""
    ended_by: list[str] = field(default_factory=list)
    """Per row: "eos", "stop_string" (one of `SamplingParams.stop`) or "length"."""
    num_prompt_tokens: int = 0
    """Prompt tokens run through the model (each distinct prompt once)."""
    stats: dict[str, float] = field(default_factory=dict)
    """Timing and batch-shrink statistics of the call."""

    @property
    def prompt_index(self) -> list[int]:
        return [i // self.n for i in range(len(self.texts))]

    @property
    def lengths(self) -> torch.Tensor:
        """(P·n,) generated tokens per row."""
        return self.completion_mask.sum(-1).long()

    @property
    def num_generated_tokens(self) -> int:
        return int(self.completion_mask.sum().item())


def _pad_left(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
        mask[i, width - len(s) :] = 1
    return ids, mask  # (P, L), (P, L)


def _filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask to -inf everything outside top-k and the top-p nucleus; logits (A, V)."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (A, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (A, V)
        probs = sorted_logits.softmax(-1)
        # Drop a token when the mass strictly before it already reaches top_p (the first is always kept).
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p  # (A, V)
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


ICDF_MIN_VOCAB = 4096
"""Rows over at least this many tokens are sampled by inverse CDF (`sample_inverse_cdf`): one uniform
per row, where `torch.multinomial` draws an exponential per vocabulary entry (33 ms a step for 32 rows
of SmolLM2's 49,152 tokens on one CPU thread, 18 % of a rollout). Smaller vocabularies keep multinomial,
and with it the sample streams their seeded runs were measured on."""

_BLOCK = 256


def sample_inverse_cdf(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of probs (A, V) (rows summing to ≈ 1; zeros never drawn), by inverse CDF in
    two levels: blocks of 256 tokens by their float64 cumulative mass, then the token inside the
    block, so a token's interval has float64 accuracy relative to its block's mass (one float32
    cumulative sum over 49k tokens would blur the tail's probabilities by its rounding). Returns (A,)."""
    a, v = probs.shape
    pad = (-v) % _BLOCK
    blocks = F.pad(probs, (0, pad)).view(a, -1, _BLOCK)  # (A, nb, 256)
    mass = blocks.sum(-1, dtype=torch.float64)  # (A, nb)
    cdf = mass.cumsum(-1)  # (A, nb)
    if not bool(((cdf[:, -1] > 0) & torch.isfinite(cdf[:, -1])).all()) or bool((probs < 0).any()):
        raise RuntimeError("probability tensor contains either inf, nan or element < 0 "
                           "(the policy's logits are not finite)")
    u = torch.rand((a, 1), generator=generator, dtype=torch.float64, device=probs.device) * cdf[:, -1:]  # (A, 1)
    last_block = (mass > 0).to(torch.int64).cumsum(-1).argmax(-1, keepdim=True)  # (A, 1) last block with mass
    b = torch.searchsorted(cdf, u, right=True).minimum(last_block)  # (A, 1) u's block
    rest = u - torch.where(b > 0, cdf.gather(1, (b - 1).clamp(min=0)), 0.0)  # (A, 1) mass into the block
    inner = blocks[torch.arange(a, device=probs.device), b[:, 0]]  # (A, 256)
    icdf = inner.to(torch.float64).cumsum(-1)  # (A, 256)
    last = (inner > 0).to(torch.int64).cumsum(-1).argmax(-1, keepdim=True)  # (A, 1) last token with mass
    j = torch.searchsorted(icdf, rest, right=True).minimum(last)  # (A, 1)
    return (b * _BLOCK + j)[:, 0]


def sample_rows(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of probs (A, V): multinomial, or inverse CDF from `ICDF_MIN_VOCAB` tokens up."""
    if probs.shape[-1] >= ICDF_MIN_VOCAB:
        return sample_inverse_cdf(probs, generator)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def window_decoder(tok):
    """`windows -> [tok.decode(w, skip_special_tokens=False) for w in windows]`, in one call of the Rust
    tokenizer where that is what `decode` runs (a fast tokenizer without clean-up of spaces, neither
    method overridden): the stop-string check decodes every active row's last tokens at every step."""
    backend = getattr(tok, "_tokenizer", None)
    if (TokenizersBackend is not None and isinstance(tok, TokenizersBackend) and backend is not None
            and type(tok).decode is TokenizersBackend.decode and type(tok)._decode is TokenizersBackend._decode
            and not tok.clean_up_tokenization_spaces):
        return lambda windows: backend.decode_batch(windows, skip_special_tokens=False) if windows else []
    return lambda windows: [tok.decode(w, skip_special_tokens=False) for w in windows]


def _eos_ids(policy: Policy) -> list[int]:
    ids: set[int] = set()
    for source in (policy.model.generation_config.eos_token_id, policy.tokenizer.eos_token_id):
        if source is None:
            continue
        ids.update(source if isinstance(source, (list, tuple)) else [source])
    return sorted(ids)


class _HFDecoder:
    """The HF model's own forward over a `DynamicCache`: any causal LM (the lean decoder's fallback)."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.attn: torch.Tensor | None = None  # (A, L + t) attention mask of the active rows

    def prefill(self, ids: torch.Tensor, attn: torch.Tensor, positions: torch.Tensor, n: int) -> torch.Tensor:
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=positions, cache=self.cache,
                         use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1, :].float()  # (P, V)
        if n > 1:
            self.cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, dim=0)  # (N, V)
            attn = attn.repeat_interleave(n, dim=0)  # (N, L)
        self.attn = attn
        return logits

    def step(self, token: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        self.attn = torch.cat([self.attn, self.attn.new_ones((len(token), 1))], dim=-1)  # (A, L+t+1)
        out = self.model(input_ids=token[:, None], attention_mask=self.attn, position_ids=positions[:, None],
                         cache=self.cache, use_cache=True)
        return out.logits[:, -1, :].float()  # (A, V)

    def select(self, keep: torch.Tensor) -> None:
        self.cache.batch_select_indices(keep)
        self.attn = self.attn[keep]

    def close(self) -> None:
        self.cache = self.attn = None


def decode_path(model: torch.nn.Module, decode: str = "auto") -> tuple[str, str | None]:
    """Which forward `generate` runs for `model` ("lean" or "hf") and, when not lean, why."""
    if decode == "hf":
        return "hf", "sampling.decode = 'hf'"
    reason = unsupported_reason(model)
    if reason is not None and decode == "lean":
        raise ValueError(f"sampling.decode = 'lean' but the lean decode path does not support this model: {reason}; "
                         f"use decode='auto' (falls back to the HF forward) or 'hf'")
    return ("hf", reason) if reason is not None else ("lean", None)


@torch.no_grad()
def generate(
    policy: Policy,
    prompts: list[str] | list[list[int]],
    n: int = 1,
    params: SamplingParams = SamplingParams(),
    prefix_cache: PrefixCache | None = None,
) -> Rollouts:
    """Sample `n` completions for each prompt.

    prompts: templated prompt strings (see `Policy.prompt_text`) or token id lists.
    prefix_cache: K/V kept across calls (`PrefixCache`): a prompt that extends a row an earlier call
    ended at a stop string prefills only its new tokens; rows ending at a stop string here are added to it.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1 (got {n})")
    if not prompts:
        raise ValueError("generate() needs at least one prompt")
    model, tok = policy.model, policy.tokenizer
    prompt_ids = [
        list(p) if not isinstance(p, str) else tok.encode(p, add_special_tokens=not tok.chat_template)
        for p in prompts
    ]
    limit = policy.max_seq_len
    longest = max(len(p) for p in prompt_ids)
    if min(len(p) for p in prompt_ids) == 0:
        raise ValueError("generate(): an empty prompt (0 tokens)")
    if longest >= limit:
        raise ValueError(
            f"prompt of {longest} tokens does not fit the model's context of {limit} tokens "
            f"(max_position_embeddings); shorten it or use a model with a longer context"
        )
    max_new = min(params.max_new_tokens, limit - longest)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    dev = model_device(model)  # the forward pass and sampling run there; the results return on the CPU
    eos = torch.tensor([] if params.ignore_eos else _eos_ids(policy), dtype=torch.long, device=dev)
    gen = None
    if params.seed is not None:
        gen = torch.Generator(device=dev).manual_seed(params.seed)
    was_training = model.training
    model.eval()
    t0 = time.perf_counter()

    # Prefill each distinct prompt once, then give each of its n samples a copy of the cache.
    ids, attn = _pad_left(prompt_ids, pad_id)  # (P, L)
    ids, attn = ids.to(dev), attn.to(dev)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)  # (P, L)
    path, _ = decode_path(model, params.decode)
    cached = None
    if path == "lean":
        decoder = LeanDecoder(model, rows=len(prompt_ids) * n, slots=ids.shape[1] + max_new)
        if prefix_cache is not None:
            prefix_cache.bind(model, decoder.kv.dtype, decoder.mm_dtype)
            cached = [prefix_cache.get(p) for p in prompt_ids]
            kv_bytes_per_token = decoder.kv[:, :, 0, :, 0].numel() * decoder.kv.element_size()
            for p, kv in zip(prompt_ids, cached):
                want = decoder.kv[:, :, 0, :, :1].shape
                if kv is not None and (tuple(kv.shape[:-2]) != tuple(want[:-2]) or kv.shape[-1] != want[-1]
                                       or not 0 < kv.shape[-2] < len(p)):
                    raise ValueError(f"prefix_cache: an entry of shape {tuple(kv.shape)} for a prompt of {len(p)} "
                                     f"tokens (expected {tuple(want[:-2])} × fewer than {len(p)} slots × {want[-1]})")
    else:
        decoder = _HFDecoder(model)
        prefix_cache = None  # its K/V layout is the lean decoder's
    try:
        logits = decoder.prefill(ids, attn, positions, n, cached) if cached else decoder.prefill(ids, attn, positions, n)
        next_pos = attn.sum(-1).repeat_interleave(n)  # (N,) position of the next token
        t_prefill = time.perf_counter() - t0

        num = len(prompt_ids) * n
        out_ids = torch.full((num, max_new), pad_id, dtype=torch.long)  # (N, T)
        out_lp = torch.zeros((num, max_new), dtype=torch.float32)  # (N, T)
        lengths = torch.zeros(num, dtype=torch.long)
        reasons = ["length"] * num
        ended_by = ["length"] * num
        active = torch.arange(num)  # rows still generating, in cache order
        generated: list[list[int]] = [[] for _ in range(num)]
        stop_window = max((len(tok.encode(s, add_special_tokens=False)) for s in params.stop), default=0) + 2
        decode_windows = window_decoder(tok)
        rows_x_steps = 0

        for t in range(max_new):
            rows_x_steps += len(active)
            if params.temperature == 0:
                logp = torch.log_softmax(logits, dim=-1)  # (A, V)
                token = logits.argmax(-1)  # (A,)
            else:
                scaled = logits / params.temperature  # (A, V)
                logp = torch.log_softmax(scaled, dim=-1)
                filtered = _filter_logits(scaled, params.top_k, params.top_p)
                token = sample_rows(filtered.softmax(-1), gen)  # (A,)
            out_ids[active, t] = token.cpu()
            out_lp[active, t] = logp.gather(-1, token[:, None]).squeeze(-1).cpu()
            lengths[active] += 1

            done = torch.isin(token, eos).cpu()  # (A,)
            at_eos = done.clone()
            if params.stop:
                rows = active.tolist()
                for row, new in zip(rows, token.tolist()):
                    generated[row].append(new)
                check = (~done).nonzero().flatten().tolist()
                tails = decode_windows([generated[rows[j]][-stop_window:] for j in check])
                for j, tail in zip(check, tails):
                    if any(s in tail for s in params.stop):
                        done[j] = True
            for j in done.nonzero().flatten().tolist():
                row = int(active[j])
                reasons[row] = "stop"
                ended_by[row] = "eos" if at_eos[j] else "stop_string"
                if prefix_cache is not None and not at_eos[j]:  # a row a step-wise caller may continue
                    fed = prompt_ids[row // n] + out_ids[row, :t].tolist()
                    if prefix_cache.room(len(fed) * kv_bytes_per_token):
                        prefix_cache.put(fed, decoder.export(j, len(fed)))
            if t == max_new - 1:
                break
            if done.any():
                keep = (~done).nonzero().squeeze(-1)  # (A',)
                if keep.numel() == 0:
                    break
                active = active[keep]
                keep = keep.to(dev)
                decoder.select(keep)
                token, next_pos = token[keep], next_pos[keep]
            logits = decoder.step(token, next_pos)  # (A, V)
            next_pos = next_pos + 1
    finally:
        decoder.close()
        if was_training:
            model.train()

    width = int(lengths.max().item()) if num else 0
    mask = (torch.arange(max_new)[None, :] < lengths[:, None]).float()[:, :width]  # (N, T)
    out_ids, out_lp = out_ids[:, :width], out_lp[:, :width] * mask
    texts = tok.batch_decode([row[: int(l)] for row, l in zip(out_ids.tolist(), lengths)],
                             skip_special_tokens=True)
    elapsed = time.perf_counter() - t0
    return Rollouts(
        prompt_ids=prompt_ids,
        n=n,
        completion_ids=out_ids,
        completion_mask=mask,
        logprobs=out_lp,
        finish_reasons=reasons,
        texts=texts,
        ended_by=ended_by,
        num_prompt_tokens=sum(len(p) for p in prompt_ids),
        stats={
            "gen_s": elapsed,
            "prefill_s": t_prefill,
            "decode_rows_x_steps": float(rows_x_steps),
            "padded_rows_x_steps": float(num * width),
            "lean_decode": float(path == "lean"),
            "prefix_cache_hits": float(sum(c is not None for c in cached or ())),
        },
    )


def sample_solutions(policy, problems: list, n: int, temperature: float, max_new_tokens: int, seed: int,
                     chunk: int = 128, progress: bool = False) -> list[list[str]]:
    """`n` completions of each problem from `policy` (a `Policy`) through the rollout engine, `chunk`
    problems per call (call k samples with seed + k: a pure function of the arguments)."""
    out: list[list[str]] = []
    with progress_bar(len(problems), "sampling", disable=not progress) as bar:
        for k, start in enumerate(range(0, len(problems), chunk)):
            part = problems[start:start + chunk]
            params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed + k)
            texts = generate(policy, policy.encode_prompts(part), n, params).texts
            out += [texts[i * n:(i + 1) * n] for i in range(len(part))]
            bar.advance(len(part))
    return out
