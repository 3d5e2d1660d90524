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
  copied), and on the CPU the KV buffer is reused between calls (no page faults per call).

Under ``torch.autocast`` (e.g. bf16 on a CPU with AVX-512 BF16) the projections and the head run in
the autocast dtype, their weights cast once per call; the residual stream, RoPE, the KV cache and
attention keep the model's dtype, as autocast keeps them for the elementwise ops.

`torch.compile` of the attention core was measured and not kept: 23–93 s of compilation per process,
slower on the tiny preset (5.3 vs 3.6 ms a call) and 1.3× faster only on the attention of the small
one, which is < 15 % of its decode step.

The fused weights are built from the live parameters at every `generate` call (a few ms): a trainer
updates the weights between calls, and a cache keyed on version counters would miss updates made
through ``.data``.

`unsupported_reason(model)` names the first feature the lean path does not implement (a subclass, a
PEFT/quantised layer, a forward hook, a dynamic or long-context rope, sliding-window attention, an
activation other than SiLU); the engine then runs the HF forward instead, so nothing is computed
differently in silence.
"""

from __future__ import annotations

import functools
import math

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
        # stream, norms, RoPE, the KV cache and attention stay in the model's dtype (bf16 batched
        # matmuls over the cache's strided views copied the whole cache at every step on the CPU).
        self.mm_dtype = torch.get_autocast_dtype(dev.type) if torch.is_autocast_enabled(dev.type) else dtype
        self.device_type = dev.type

        def mm(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(self.mm_dtype)

        self.embed = model.model.embed_tokens.weight  # (V, d)
        self.norm = model.model.norm.weight  # (d,)
        self.lm_head = mm(model.lm_head.weight)  # (V, d); the embedding itself when tied
        self.layers = []
        for layer in model.model.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append((
                layer.input_layernorm.weight,
                mm(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])),  # ((H+2Hkv)·D, d)
                mm(_cat_bias(a.q_proj, a.k_proj, a.v_proj)),
                mm(a.o_proj.weight), mm(a.o_proj.bias),
                layer.post_attention_layernorm.weight,
                mm(torch.cat([m.gate_proj.weight, m.up_proj.weight])),  # (2I, d)
                mm(_cat_bias(m.gate_proj, m.up_proj)),
                mm(m.down_proj.weight), mm(m.down_proj.bias),
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
        self._storage = _take_buffer(dev, dtype, math.prod(shape))
        self.kv = self._storage[: math.prod(shape)].view(shape)  # (2, layers, N, Hkv, S, D)
        self.bias = torch.zeros((rows, slots), device=dev, dtype=dtype)  # (N, S) -inf on left padding
        self.padded = False
        self.rows = 0  # rows in use
        self.slot: torch.Tensor | None = None  # (A,) cache row of each active row in engine order (None: same)
        self.used = 0  # slots in use

    def _linear(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        """x @ w.T + b in the projections' dtype (x cast to it; a no-op without autocast). Adding the
        result to the residual stream, or rotating it with the RoPE tables, promotes it back."""
        return F.linear(x.to(self.mm_dtype), w, b)

    def close(self) -> None:
        """Return the KV buffer to the pool for the next call (the decoder is unusable afterwards)."""
        if self._storage is not None:
            _give_buffer(self._storage)
            self._storage = self.kv = None

    def _prefill_layers(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Prompts ids (P, L) into cache slots [0, L); returns the final hidden state of the last position."""
        a, t = ids.shape
        h, hkv, d = self.heads, self.kv_heads, self.head_dim
        cos, sin = self.cos[positions][:, :, None], self.sin[positions][:, :, None]  # (P, L, 1, D)
        x = F.embedding(ids, self.embed)  # (P, L, d)
        for i, (ln1, wqkv, bqkv, wo, bo, ln2, wgu, bgu, wd, bd) in enumerate(self.layers):
            y = F.rms_norm(x, (self.hidden,), ln1, self.eps)
            qkv = self._linear(y, wqkv, bqkv).view(a, t, h + 2 * hkv, d)  # (P, L, H+2Hkv, D)
            qk = _rotate(qkv[:, :, : h + hkv], cos, sin)  # (P, L, H+Hkv, D)
            self.kv[0, i, :a, :, :t] = qk[:, :, h:].transpose(1, 2)
            self.kv[1, i, :a, :, :t] = qkv[:, :, h + hkv:].transpose(1, 2)
            q = qk[:, :, :h].transpose(1, 2)  # (P, H, L, D)
            att = F.scaled_dot_product_attention(q, self.kv[0, i, :a, :, :t], self.kv[1, i, :a, :, :t],
                                                 attn_mask=mask, scale=self.scale, enable_gqa=self.gqa)  # (P, H, L, D)
            x = x + self._linear(att.transpose(1, 2).reshape(a, t, h * d), wo, bo)  # (P, L, d)
            y = F.rms_norm(x, (self.hidden,), ln2, self.eps)
            gate, up = self._linear(y, wgu, bgu).chunk(2, dim=-1)  # (P, L, I) each
            x = x + self._linear(F.silu(gate) * up, wd, bd)
        self.used = t
        return x[:, -1]  # (P, d)

    def _logits(self, last: torch.Tensor) -> torch.Tensor:
        return self._linear(F.rms_norm(last, (self.hidden,), self.norm, self.eps), self.lm_head, None).float()  # (A, V)

    @_without_autocast
    def prefill(self, ids: torch.Tensor, attn: torch.Tensor, positions: torch.Tensor, n: int) -> torch.Tensor:
        """Left-padded prompts ids/attn/positions (P, L); each prompt's cache copied to its n rows.

        Returns the next-token logits (P·n, V) in float32.
        """
        p, width = ids.shape
        valid = attn.bool()  # (P, L)
        self.padded = not bool(valid.all())
        causal = torch.ones((width, width), dtype=torch.bool, device=ids.device).tril()  # (L, L)
        # A padding query attends to itself only, so no softmax row is empty (no NaN in the cache).
        mask = (causal & valid[:, None, :]) | torch.eye(width, dtype=torch.bool, device=ids.device)  # (P, L, L)
        logits = self._logits(self._prefill_layers(ids, positions, mask[:, None]))  # (P, V)
        if n > 1:
            self.kv[:, :, : p * n, :, :width] = self.kv[:, :, :p, :, :width].repeat_interleave(n, dim=2)
            logits = logits.repeat_interleave(n, dim=0)
            valid = valid.repeat_interleave(n, dim=0)
        self.rows = p * n
        # Additive attention bias of the decode steps: -inf on left padding, 0 elsewhere.
        self.bias[: self.rows, :width] = torch.zeros_like(valid, dtype=self.bias.dtype).masked_fill(~valid, float("-inf"))
        return logits

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
        bias = self.bias[:a, None, None, :hi] if self.padded else None  # (A, 1, 1, S')
        x = F.embedding(token, self.embed)  # (A, d)
        for i, (ln1, wqkv, bqkv, wo, bo, ln2, wgu, bgu, wd, bd) in enumerate(self.layers):
            y = F.rms_norm(x, (self.hidden,), ln1, self.eps)
            qkv = self._linear(y, wqkv, bqkv).view(a, h + 2 * hkv, d)  # (A, H+2Hkv, D)
            qk = _rotate(qkv[:, : h + hkv], cos, sin)  # (A, H+Hkv, D)
            self.kv[0, i, :a, :, col] = qk[:, h:]
            self.kv[1, i, :a, :, col] = qkv[:, h + hkv:]
            q = (qk[:, :h] * self.scale).view(a, hkv, h // hkv, d)  # (A, Hkv, G, D)
            scores = torch.matmul(q, self.kv[0, i, :a, :, :hi].transpose(-1, -2))  # (A, Hkv, G, S')
            if bias is not None:
                scores = scores + bias
            probs = scores.softmax(-1, dtype=torch.float32).to(scores.dtype)  # as HF: softmax in fp32
            att = torch.matmul(probs, self.kv[1, i, :a, :, :hi])  # (A, Hkv, G, D)
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
