"""A lean forward for decoding Llama / Qwen2 causal LMs: the same arithmetic as the HF model, less work.

What it saves against calling the HF model once per token:

* a static KV cache, preallocated once per `generate` call (no per-step concatenation);
* fused projections: q/k/v in one matmul, gate/up in one matmul, built from the HF weights;
* RoPE cos/sin tables computed once by the model's own rotary module (so every rope type whose
  frequencies do not depend on the sequence length gives the model's exact values);
* attention on views of the cache: `scaled_dot_product_attention` for the prefill, two batched
  matmuls for the one-query decode steps (SDPA's CPU flash kernel was ≈ 5× slower there, measured
  at 96 rows × 4 heads × 100 keys); `F.rms_norm`; no module tree, mask builder or output dataclasses;
* finished rows leave the batch by refilling their cache rows from the end (only moved rows are
  copied), and on the CPU the KV buffer is reused between calls (no page faults per call);
* on the CPU, the larger projections and the head run on oneDNN with their weights packed once per
  call (`PACK_WEIGHTS`): the plain GEMM repacks a weight at every step;
* with a `PrefixCache`, a prompt that extends a row an earlier call ended at a stop string copies that
  row's K/V and prefills only the rest: one token where step-wise search continues such rows round
  after round, a tool turn where a multi-turn episode goes on.

Under ``torch.autocast`` (e.g. bf16 on a CPU with AVX-512 BF16) the projections and the head run in
the autocast dtype, their weights cast once per call; the residual stream, norms and RoPE keep the
model's dtype, as autocast keeps them for the elementwise ops. On a CPU the KV cache is bf16 then (as the
HF model's is under autocast) and a decode step attends over all its slots, the unwritten ones masked
(`KV_BF16`): bf16 batched matmuls need the contiguous block to run without copying it.

`torch.compile` was measured and not kept: of the attention core, 23–93 s of compilation per process,
slower on the tiny preset (5.3 vs 3.6 ms a call) and 1.3× faster only on the attention of the small
one, which is < 15 % of its decode step; of the whole step (static shapes, one graph), 9–16× slower
(`benchmarks/compile_probe.py --decode`).

The fused (and packed) weights are built from the live parameters at every `generate` call (a few ms
for the presets, ≈ 0.2 s for SmolLM2-135M on one CPU thread, against seconds of decoding): a trainer
updates the weights between calls, and a cache keyed on version counters would miss updates made
through ``.data`` or by fused optimizer kernels.

`unsupported_reason(model)` names the first feature the lean path does not implement (a subclass, a
PEFT/quantised layer, a forward hook, a dynamic or long-context rope, sliding-window attention, an
activation other than SiLU); the engine then runs the HF forward instead, so nothing is computed
differently in silence.
"""

from __future__ import annotations

import functools
import math
import weakref

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaForCausalLM, Qwen2ForCausalLM

# Rope types whose inverse frequencies are fixed at construction (no per-call `dynamic_rope_update`).
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
_LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def unsupported_reason(model: nn.Module) -> str | None:
    """Why the lean path cannot run `model` exactly (None: it can)."""
    if type(model) not in (LlamaForCausalLM, Qwen2ForCausalLM):
        return f"model class {type(model).__name__} (the lean path implements LlamaForCausalLM and Qwen2ForCausalLM)"
    cfg = model.config
    if cfg.hidden_act != "silu":
        return f"hidden_act {cfg.hidden_act!r} (the lean path implements silu)"
    rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope not in STATIC_ROPE_TYPES:
        return f"rope_type {rope!r} (the lean path implements {', '.join(STATIC_ROPE_TYPES)})"
    if (getattr(cfg, "rope_parameters", None) or {}).get("partial_rotary_factor", 1.0) != 1.0:
        return "partial_rotary_factor != 1 (the lean path rotates the whole head)"
    if "sliding_attention" in (getattr(cfg, "layer_types", None) or ()):
        return "sliding-window attention layers"
    if len(model.model.layers) != cfg.num_hidden_layers:
        return "model.layers does not match config.num_hidden_layers"
    dtypes = {p.dtype for p in model.parameters()}
    if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
        return f"parameter dtypes {sorted(map(str, dtypes))} (the lean path needs one floating dtype)"
    for name, module in model.named_modules():
        if module._forward_hooks or module._forward_pre_hooks:
            return f"a forward hook on {name or 'the model'}"
    if nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks:
        return "a global module forward hook"
    for i, layer in enumerate(model.model.layers):
        for path in _LINEARS:
            module = layer.get_submodule(path)
            if type(module) is not nn.Linear:
                return f"layer {i} {path} is a {type(module).__name__}, not nn.Linear (adapter or quantised layer)"
    if type(model.lm_head) is not nn.Linear or type(model.model.embed_tokens) is not nn.Embedding:
        return "lm_head / embed_tokens are not plain nn.Linear / nn.Embedding"
    if model.lm_head.bias is not None:
        return "lm_head has a bias (the lean path implements the bias-free head)"
    return None


# One KV buffer per (device, dtype) kept between `generate` calls on the CPU: a fresh buffer of a few
# hundred MB costs ≈ 0.3 s of page faults per call there (CUDA's caching allocator reuses memory anyway).
# A decoder takes the buffer out of the pool and puts it back when closed, so two live decoders never
# share one.
_POOL: dict[tuple[str, torch.dtype], torch.Tensor] = {}


def _take_buffer(device: torch.device, dtype: torch.dtype, numel: int) -> torch.Tensor:
    if device.type == "cpu":
        buf = _POOL.pop((str(device), dtype), None)
        if buf is not None and buf.numel() >= numel:
            return buf
    return torch.empty(numel, device=device, dtype=dtype)


def _give_buffer(buf: torch.Tensor) -> None:
    if buf.device.type == "cpu":
        key = (str(buf.device), buf.dtype)
        if key not in _POOL or _POOL[key].numel() < buf.numel():
            _POOL[key] = buf


PACK_WEIGHTS: bool | None = None
"""Run the projections and the head on oneDNN with their weights packed once per call (its blocked
layout, what inductor's CPU freezing uses): 1.2–2.2× per matmul at decode shapes on one thread, where
the plain GEMM repacks the weight at every call. None: wherever a CPU build has oneDNN for the dtype
(fp32; bf16 where the CPU has it); False: `F.linear` (benchmarks compare the two)."""

KV_BF16: bool = True
"""Under bf16 autocast on a CPU, keep the KV cache in bf16 (as the HF model's is under autocast) and let
each decode step attend over every slot of it, a contiguous block with the unwritten slots masked:
one-query attention ran 2.2× faster than over the fp32 cache's slices (bf16 batched matmuls copy a
strided slice first), SmolLM2's rollout 1.14×. bf16 attention rounds its scores and weights, so sampled
log-probs sit further from the trainer's (mean |Δ| 0.0045 vs 0.0028 nats a token on the tiny preset);
PPO's and GRPO's end-to-end gains were equal within noise with either cache (6 and 3 seeds;
benchmarks/RESULTS.md).
False: the cache and attention stay in the model's dtype."""

PACK_MIN_NUMEL = 1 << 17
"""Smaller weights stay plain: oneDNN's ≈ 10 µs per call outweighs the packing below ≈ 128 × 1024 (the
tiny preset's 128 × 384 projections ran 1.0–2× slower packed; 256 × 768 and up, 1.1–1.7× faster)."""


def _packs(device: torch.device, dtype: torch.dtype) -> bool:
    if PACK_WEIGHTS is False or device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    if not (hasattr(torch.ops.mkldnn, "_linear_pointwise") and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")):
        return False
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return dtype == torch.float32


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """RoPE as in HF Llama, x·cos + rotate_half(x)·sin, bit for bit: rotate_half(x)·sin equals
    roll(x, D/2)·sin_signed with sin_signed = (−sin₁, sin₂), in two ops instead of four.
    x (..., heads, D); cos / sin_signed broadcastable to it."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin_signed


def _cat_bias(*linears: nn.Linear) -> torch.Tensor | None:
    if all(m.bias is None for m in linears):
        return None
    return torch.cat([m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in linears])


def _without_autocast(method):
    """Run `method` with autocast off: the decoder's tensors are already in its compute dtype."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with torch.autocast(self.device_type, enabled=False):
            return method(self, *args, **kwargs)
    return wrapper


class LeanDecoder:
    """Prefill + one-token steps of a Llama/Qwen2 model over a static KV cache.

    Rows live in cache slots: prompt i's tokens occupy slots [L - len_i, L) of a left-padded block
    of width L, generated token t occupies slot L + t for every row, so one step writes one column.
    """

    def __init__(self, model: nn.Module, rows: int, slots: int):
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"the lean decode path does not support this model: {reason}")
        cfg = model.config
        self.heads = cfg.num_attention_heads  # H
        self.kv_heads = cfg.num_key_value_heads  # Hkv (< H: grouped-query attention)
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads  # D
        self.hidden = cfg.hidden_size
        self.eps = cfg.rms_norm_eps
        self.gqa = self.heads != self.kv_heads
        self.scale = self.head_dim ** -0.5
        dev, dtype = model.lm_head.weight.device, model.lm_head.weight.dtype
        # Under `torch.autocast` the projections (and the head) run in the autocast dtype, as autocast
        # would run them, with their weights cast once per call instead of at every step; the residual
        # stream, norms and RoPE stay in the model's dtype; the KV cache too, except under bf16 on a CPU.
        self.mm_dtype = torch.get_autocast_dtype(dev.type) if torch.is_autocast_enabled(dev.type) else dtype
        self.device_type = dev.type

        self.packed = _packs(dev, self.mm_dtype)
        # bf16 cache (CPU, bf16 autocast over fp32 weights): decode steps attend over all slots, masked
        self.full = bool(KV_BF16) and dev.type == "cpu" and self.mm_dtype == torch.bfloat16 != dtype
        self.cache_dtype = torch.bfloat16 if self.full else dtype

        def mm(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(self.mm_dtype)

        def w(t: torch.Tensor) -> torch.Tensor:
            t = t.to(self.mm_dtype)
            return torch.ops.mkldnn._reorder_linear_weight(t, rows) if self.packed and t.numel() >= PACK_MIN_NUMEL else t

        self.embed = model.model.embed_tokens.weight  # (V, d)
        self.norm = model.model.norm.weight  # (d,)
        self.lm_head = w(model.lm_head.weight)  # (V, d); the embedding itself when tied
        self.layers = []
        for layer in model.model.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append((
                layer.input_layernorm.weight,
                w(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])),  # ((H+2Hkv)·D, d)
                mm(_cat_bias(a.q_proj, a.k_proj, a.v_proj)),
                w(a.o_proj.weight), mm(a.o_proj.bias),
                layer.post_attention_layernorm.weight,
                w(torch.cat([m.gate_proj.weight, m.up_proj.weight])),  # (2I, d)
                mm(_cat_bias(m.gate_proj, m.up_proj)),
                w(m.down_proj.weight), mm(m.down_proj.bias),
            ))
        # The model's own rotary module gives the tables: identical values for every static rope type.
        pos = torch.arange(slots, device=dev)[None]  # (1, S)
        with torch.autocast(dev.type, enabled=False):
            cos, sin = model.model.rotary_emb(self.embed[:1], position_ids=pos)  # (1, S, D) each
        half = self.head_dim // 2
        self.cos = cos[0].to(dtype)  # (S, D)
        self.sin = torch.cat((-sin[0, :, :half], sin[0, :, half:]), dim=-1).to(dtype)  # (S, D) signed, see _rotate
        # K and V of every layer in one buffer: compaction of finished rows is one indexing op.
        shape = (2, len(self.layers), rows, self.kv_heads, slots, self.head_dim)
        self._storage = _take_buffer(dev, self.cache_dtype, math.prod(shape))
        self.kv = self._storage[: math.prod(shape)].view(shape)  # (2, layers, N, Hkv, S, D)
        if self.full:  # slots not yet written are attended with weight 0: zeros, not NaN (0 · NaN = NaN)
            self.kv.zero_()
            self.slots = torch.arange(slots, device=dev)  # (S,) for the steps' mask
        self.bias = torch.zeros((rows, slots), device=dev, dtype=dtype)  # (N, S) -inf on left padding
        self.padded = False
        self.rows = 0  # rows in use
        self.slot: torch.Tensor | None = None  # (A,) cache row of each active row in engine order (None: same)
        self.used = 0  # slots in use
        self.width = 0  # prefill width L: generated token t sits in slot L + t

    def _linear(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        """x @ w.T + b in the projections' dtype (x cast to it; a no-op without autocast). Adding the
        result to the residual stream, or rotating it with the RoPE tables, promotes it back."""
        if w.is_mkldnn:
            return torch.ops.mkldnn._linear_pointwise(x.to(self.mm_dtype), w, b, "none", [], "")
        return F.linear(x.to(self.mm_dtype), w, b)

    def close(self) -> None:
        """Return the KV buffer to the pool for the next call (the decoder is unusable afterwards)."""
        if self._storage is not None:
            _give_buffer(self._storage)
            self._storage = self.kv = None

    def _prefill_layers(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, lo: int = 0) -> torch.Tensor:
        """Prompt tokens ids (P, R) into cache slots [L - R, L) of cache rows [lo, lo + P), L = `self.width`:
        R = L for whole prompts, less when the slots before them hold a cached prefix. mask (P, 1, R, L):
        which slots each query attends to. Returns the final hidden state of the last position (P, d)."""
        a, t = ids.shape
        hi, end, start = lo + a, self.width, self.width - t
        h, hkv, d = self.heads, self.kv_heads, self.head_dim
        cos, sin = self.cos[positions][:, :, None], self.sin[positions][:, :, None]  # (P, R, 1, D)
        x = F.embedding(ids, self.embed)  # (P, R, d)
        for i, (ln1, wqkv, bqkv, wo, bo, ln2, wgu, bgu, wd, bd) in enumerate(self.layers):
            y = F.rms_norm(x, (self.hidden,), ln1, self.eps)
            qkv = self._linear(y, wqkv, bqkv).view(a, t, h + 2 * hkv, d)  # (P, R, H+2Hkv, D)
            qk = _rotate(qkv[:, :, : h + hkv], cos, sin)  # (P, R, H+Hkv, D)
            self.kv[0, i, lo:hi, :, start:end] = qk[:, :, h:].transpose(1, 2)
            self.kv[1, i, lo:hi, :, start:end] = qkv[:, :, h + hkv:].transpose(1, 2)
            q = qk[:, :, :h].transpose(1, 2)  # (P, H, R, D)
            keys, values = self.kv[0, i, lo:hi, :, :end], self.kv[1, i, lo:hi, :, :end]
            if keys.dtype != q.dtype:  # a bf16 cache: the rounded K/V the decode steps read, in the query's dtype
                keys, values = keys.to(q.dtype), values.to(q.dtype)
            att = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scale,
                                                 enable_gqa=self.gqa)  # (P, H, R, D)
            x = x + self._linear(att.transpose(1, 2).reshape(a, t, h * d), wo, bo)  # (P, R, d)
            y = F.rms_norm(x, (self.hidden,), ln2, self.eps)
            gate, up = self._linear(y, wgu, bgu).chunk(2, dim=-1)  # (P, R, I) each
            x = x + self._linear(F.silu(gate) * up, wd, bd)
        self.used = end
        return x[:, -1]  # (P, d)

    def _logits(self, last: torch.Tensor) -> torch.Tensor:
        return self._linear(F.rms_norm(last, (self.hidden,), self.norm, self.eps), self.lm_head, None).float()  # (A, V)

    @_without_autocast
    def prefill(self, ids: torch.Tensor, attn: torch.Tensor, positions: torch.Tensor, n: int,
                cached: list[torch.Tensor | None] | None = None) -> torch.Tensor:
        """Left-padded prompts ids/attn/positions (P, L); each prompt's cache copied to its n rows.

        cached: per prompt, None or the K/V of its first c < len tokens, (2, layers, Hkv, c, D) (`export` of
        an earlier call's row): those slots are copied in and only the rest is computed — for every prompt
        with a cached prefix, its last T tokens, T the longest uncached rest among them (a cached slot inside
        that block is computed again). Prompts with a cached prefix take the last cache rows, so each group
        is one contiguous forward.

        Returns the next-token logits (P·n, V) in float32, in the prompts' order.
        """
        p, width = ids.shape
        dev = ids.device
        self.width = width
        hits = [i for i in range(p) if cached is not None and cached[i] is not None]
        order = None
        if hits:
            hit = set(hits)
            order = torch.tensor([i for i in range(p) if i not in hit] + hits, device=dev)  # cache row -> prompt
            ids, attn, positions = ids[order], attn[order], positions[order]
        valid = attn.bool()  # (P, L) in cache-row order
        self.padded = not bool(valid.all())
        u = p - len(hits)  # rows [0, u): whole prompts; [u, P): the last `rest` tokens after a cached prefix
        lengths = valid.sum(-1).tolist()  # (P,) in cache-row order
        rest = max((lengths[r] - cached[i].shape[-2] for r, i in enumerate(hits, start=u)), default=1)
        # The left padding of these rows is never computed: zeros, not whatever the buffer held (a masked
        # slot gets weight 0 in attention, and 0 · inf or 0 · NaN would still be NaN).
        self.kv[:, :, u:p, :, :width].zero_()
        for r, i in enumerate(hits, start=u):
            keep = lengths[r] - rest  # the cached slots before the computed block
            if keep > 0:
                self.kv[:, :, r, :, width - lengths[r]: width - rest] = cached[i][..., :keep, :]
        key = torch.arange(width, device=dev)  # (L,)
        last = []
        for lo, hi, t in ((0, u, width), (u, p, rest)):
            if hi == lo:
                continue
            query = key[width - t:, None]  # (R, 1) slots of the computed block
            # Causal over valid slots; a padding query attends to itself only, so no softmax row is empty.
            mask = ((key[None] <= query) & valid[lo:hi, None, :]) | (key[None] == query)  # (P', R, L)
            last.append(self._prefill_layers(ids[lo:hi, width - t:], positions[lo:hi, width - t:], mask[:, None], lo))
        logits = self._logits(torch.cat(last))  # (P, V) in cache-row order
        if n > 1:
            self.kv[:, :, : p * n, :, :width] = self.kv[:, :, :p, :, :width].repeat_interleave(n, dim=2)
            logits = logits.repeat_interleave(n, dim=0)
            valid = valid.repeat_interleave(n, dim=0)
        self.rows = p * n
        self.slot = None
        if order is not None:  # engine row i·n + j (prompt i, sample j) lives in cache row pos(i)·n + j
            pos = torch.empty_like(order).index_copy_(0, order, torch.arange(p, device=dev))  # prompt -> cache row
            self.slot = (pos[:, None] * n + torch.arange(n, device=dev)).flatten()  # (P·n,)
            logits = logits[self.slot]
        # Additive attention bias of the decode steps: -inf on left padding, 0 elsewhere.
        self.bias[: self.rows, :width] = torch.zeros_like(valid, dtype=self.bias.dtype).masked_fill(~valid, float("-inf"))
        return logits

    def export(self, row: int, length: int) -> torch.Tensor:
        """A copy of the K/V of the last `length` filled slots of active row `row` (engine order):
        (2, layers, Hkv, length, D), what `prefill`'s `cached` takes."""
        r = int(self.slot[row]) if self.slot is not None else row
        return self.kv[:, :, r, :, self.used - length: self.used].clone()

    @_without_autocast
    def step(self, token: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One token per active row, token/positions (A,); returns next-token logits (A, V) in float32.

        Attention is two batched matmuls and a softmax: for one query per row this is several times
        faster on CPU than SDPA's flash kernel, and grouped-query heads need no repeat of K/V.
        """
        if self.slot is not None:  # engine order -> cache order
            token = torch.empty_like(token).index_copy_(0, self.slot, token)
            positions = torch.empty_like(positions).index_copy_(0, self.slot, positions)
        a = token.shape[0]
        h, hkv, d = self.heads, self.kv_heads, self.head_dim
        col, hi = self.used, self.used + 1  # this step's cache column
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]  # (A, 1, D)
        if self.full:  # attend over all S slots: -inf after this step's column, and on left padding
            span = self.kv.shape[4]
            bias = torch.zeros(span, device=token.device, dtype=torch.float32).masked_fill(self.slots >= hi, float("-inf"))
            bias = bias + self.bias[:a, None, None, :] if self.padded else bias  # (A, 1, 1, S) or (S,)
        else:
            span = hi
            bias = self.bias[:a, None, None, :hi] if self.padded else None  # (A, 1, 1, S')
        x = F.embedding(token, self.embed)  # (A, d)
        for i, (ln1, wqkv, bqkv, wo, bo, ln2, wgu, bgu, wd, bd) in enumerate(self.layers):
            y = F.rms_norm(x, (self.hidden,), ln1, self.eps)
            qkv = self._linear(y, wqkv, bqkv).view(a, h + 2 * hkv, d)  # (A, H+2Hkv, D)
            qk = _rotate(qkv[:, : h + hkv], cos, sin)  # (A, H+Hkv, D)
            self.kv[0, i, :a, :, col] = qk[:, h:]
            self.kv[1, i, :a, :, col] = qkv[:, h + hkv:]
            q = (qk[:, :h] * self.scale).view(a, hkv, h // hkv, d).to(self.cache_dtype)  # (A, Hkv, G, D)
            scores = torch.matmul(q, self.kv[0, i, :a, :, :span].transpose(-1, -2))  # (A, Hkv, G, S')
            if bias is not None:
                scores = scores + bias
            probs = scores.softmax(-1, dtype=torch.float32).to(self.cache_dtype)  # as HF: softmax in fp32
            att = torch.matmul(probs, self.kv[1, i, :a, :, :span])  # (A, Hkv, G, D)
            x = x + self._linear(att.reshape(a, h * d), wo, bo)  # (A, d)
            y = F.rms_norm(x, (self.hidden,), ln2, self.eps)
            gate, up = self._linear(y, wgu, bgu).chunk(2, dim=-1)  # (A, I) each
            x = x + self._linear(F.silu(gate) * up, wd, bd)
        self.used = hi
        logits = self._logits(x)  # (A, V) in cache order
        return logits if self.slot is None else logits[self.slot]

    def select(self, keep: torch.Tensor) -> None:
        """Keep the active rows `keep` (ascending indices in the engine's row order).

        Only the cache rows that sit beyond the new batch size move, each into a hole left by a
        finished row, so a finish costs a copy of the finished rows' count, not of the whole cache.
        The cache order then differs from the engine's; `slot` maps one to the other, so the engine
        (its sampling and RNG consumption) sees rows in its own order.
        """
        k = keep.numel()
        slot = self.slot[keep] if self.slot is not None else keep  # (k,) cache row of each kept row
        moving = (slot >= k).nonzero().squeeze(-1)  # kept rows that live beyond the new batch
        if moving.numel():
            taken = torch.zeros(self.rows, dtype=torch.bool, device=slot.device)
            taken[slot] = True
            holes = (~taken[:k]).nonzero().squeeze(-1)  # (m,) free cache rows below k
            src = slot[moving]
            self.kv[:, :, holes, :, : self.used] = self.kv[:, :, src, :, : self.used]
            if self.padded:
                self.bias[holes, : self.used] = self.bias[src, : self.used]
            slot = slot.clone()
            slot[moving] = holes
        identity = bool((slot == torch.arange(k, device=slot.device)).all())
        self.slot = None if identity else slot
        self.rows = k


class PrefixCache:
    """The K/V of token sequences earlier `generate` calls fed to the model, for calls that continue them.

    `generate(..., prefix_cache=cache)` stores, for every row that ends at a stop string, the K/V of the
    tokens the model was fed (the prompt and every sampled token but the last, which ended the row), keyed
    by those ids; a later prompt that extends such a key copies them in and computes only the rest.
    Step-wise search continues exactly such rows (each round of beam search or MCTS then prefills one token
    per candidate instead of its prompt and partial solution again); a multi-turn episode continues its
    last turn with the tool turn's tokens (`single_use`: the entry is dropped once continued).

    Valid only while the model's weights stay as they were. Each call checks a fingerprint of the
    weights first — per parameter its storage, version counter and a float64 sum of ≈ 64 of its values
    spread over it (an optimizer step, fused kernels included, moves nearly every value; a tensor swapped
    in through ``.data`` or `load_state_dict` has another storage) — and the model, dtype and autocast
    dtype; any change empties the cache. The lean decoder only (the HF fallback neither reads nor fills
    it). Up to `max_bytes` are kept on the model's device, the least recently used evicted first; a call
    never evicts what it stored itself (its rows past the budget are not kept).
    """

    def __init__(self, max_bytes: int = 1 << 30, single_use: bool = False):
        if max_bytes < 0:
            raise ValueError(f"PrefixCache.max_bytes must be >= 0 (got {max_bytes})")
        self.max_bytes = max_bytes
        self.single_use = single_use  # an entry serves one continuation (a multi-turn episode's next turn)
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: dict[tuple[int, ...], tuple[torch.Tensor, int]] = {}  # key -> (K/V, call that stored it)
        self._owner: tuple | None = None
        self._model: weakref.ref | None = None
        self._call = 0
        self._call_bytes = 0  # stored by the current call

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, fed) -> bool:
        """Whether the K/V of the fed ids `fed` are kept."""
        return tuple(fed) in self._entries

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = self._call_bytes = 0

    def bind(self, model: nn.Module, dtype: torch.dtype, mm_dtype: torch.dtype) -> None:
        """Start a call: empty the cache unless it was filled by this model, with these weights and dtypes."""
        self._call += 1
        self._call_bytes = 0
        owner = (dtype, mm_dtype, _fingerprint(model))
        if self._model is None or self._model() is not model or owner != self._owner:
            self.clear()
            self._owner, self._model = owner, weakref.ref(model)

    def get(self, ids: list[int]) -> torch.Tensor | None:
        """The cached K/V of the longest stored prefix of `ids` short of all of it, (2, layers, Hkv, c, D)
        with c < len(ids) (``ids[:-1]`` for a row continued by one token; less for a multi-turn episode
        whose tool turn follows), or None. With `single_use` the entry leaves the cache."""
        ids = tuple(ids)
        key = ids[:-1]
        entry = self._entries.pop(key, None) if len(ids) > 1 else None
        if entry is None and len(ids) > 1:
            best = max((k for k in self._entries if len(k) < len(ids) and ids[: len(k)] == k), key=len, default=None)
            if best is not None:
                key, entry = best, self._entries.pop(best)
        if entry is None:
            self.misses += 1
            return None
        if self.single_use:
            self._drop(entry)
        else:
            self._entries[key] = entry  # the most recently used last
        self.hits += 1
        return entry[0]

    def room(self, size: int) -> bool:
        """Whether `size` bytes fit after evicting only what earlier calls stored."""
        return size <= self.max_bytes - self._call_bytes

    def put(self, fed: list[int], kv: torch.Tensor) -> bool:
        """Keep `kv` for the fed ids `fed` if `room` allows; returns whether it was kept."""
        size = kv.numel() * kv.element_size()
        if not self.room(size):
            return False
        old = self._entries.pop(tuple(fed), None)
        if old is not None:
            self._drop(old)
        if self.bytes + size > self.max_bytes:  # evict: the least recently used first (dicts keep insertion order)
            for key in list(self._entries):
                if self.bytes + size <= self.max_bytes:
                    break
                if self._entries[key][1] != self._call:
                    self._drop(self._entries.pop(key))
        self._entries[tuple(fed)] = (kv, self._call)
        self.bytes += size
        self._call_bytes += size
        return True

    def _drop(self, entry: tuple[torch.Tensor, int]) -> None:
        size = entry[0].numel() * entry[0].element_size()
        self.bytes -= size
        if entry[1] == self._call:
            self._call_bytes -= size


def _fingerprint(model: nn.Module) -> tuple:
    """Per parameter: storage address, version counter, and a float64 sum of ≈ 64 values spread over it."""
    params = list(model.parameters())
    with torch.no_grad():
        sums = torch.stack([p.detach().reshape(-1)[:: max(1, p.numel() // 64)].sum(dtype=torch.float64)
                            for p in params]) if params else torch.zeros(0)
    return tuple((p.data_ptr(), p._version) for p in params), tuple(sums.tolist())
