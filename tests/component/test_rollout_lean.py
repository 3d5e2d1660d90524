"""The lean decode path (static KV cache, fused projections) against HF `generate`, the full HF
forward and the engine's HF-forward path; its fallbacks for config features it does not implement."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from seqrl.models import ModelConfig, Policy, load_policy
from seqrl.models.tokenizer import build_char_tokenizer
from seqrl.rollout import SamplingParams, generate
from seqrl.rollout.engine import decode_path

# Prompts of different lengths: the batch is left-padded.
QUESTIONS = ["12+34=", "5+7=", "123*45=", "9-81=", "1000-1="]


def _hf_greedy(policy, prompt_ids, max_new):
    tok = policy.tokenizer
    width = max(len(p) for p in prompt_ids)
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompt_ids])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids])
    out = policy.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False,
                                pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return out[:, width:]


def _assert_greedy_equals_hf(policy, max_new=20):
    prompts = policy.encode_prompts(QUESTIONS)
    assert len({len(p) for p in prompts}) > 1  # padding is exercised
    ours = generate(policy, prompts, 1, SamplingParams(temperature=0, max_new_tokens=max_new))
    assert ours.stats["lean_decode"] == 1.0
    theirs = _hf_greedy(policy, prompts, max_new)
    for i in range(len(prompts)):
        n = int(ours.lengths[i])
        assert ours.completion_ids[i, :n].tolist() == theirs[i, :n].tolist()
        assert n == max_new or ours.finish_reasons[i] == "stop"


def _full_forward_logprobs(policy, prompt, completion):
    with torch.no_grad():
        logits = policy.model(torch.tensor([prompt + completion.tolist()])).logits[0].double()
    return torch.log_softmax(logits, -1)[len(prompt) - 1 : -1].gather(-1, completion[:, None]).squeeze(-1)


def _preset(arch, seed):
    """A tiny preset; its biases (Qwen2's q/k/v) set non-zero, since the init leaves them at 0."""
    torch.manual_seed(seed)
    policy = load_policy(ModelConfig(preset="tiny", arch=arch, max_seq_len=96))
    _randomize_biases(policy.model)
    return policy


def _randomize_biases(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(0.5 * torch.randn_like(p))


def _custom_policy(arch="llama", seed=0, **overrides):
    """A tiny model of the given architecture with config overrides, and the char tokenizer."""
    tok = build_char_tokenizer()
    common = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=96,
                  tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                  bos_token_id=None)
    common.update(overrides)
    config = LlamaConfig(**common) if arch == "llama" else Qwen2Config(**common)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    with torch.no_grad():  # larger weights than the init's 0.02: confident, input-dependent predictions
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    _randomize_biases(model)
    return Policy(model.eval(), tok)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_lean_greedy_equals_hf_generate_on_left_padded_prompts(arch):
    _assert_greedy_equals_hf(_preset(arch, 1))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_lean_sampled_logprobs_equal_full_hf_forward(arch):
    policy = _preset(arch, 2)
    prompts = policy.encode_prompts(QUESTIONS[:3])
    ro = generate(policy, prompts, 3, SamplingParams(temperature=1.0, max_new_tokens=20, seed=3))
    assert ro.stats["lean_decode"] == 1.0 and ro.prompt_index == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    for i in range(9):
        n = int(ro.lengths[i])
        full = _full_forward_logprobs(policy, ro.prompt_ids[i // 3], ro.completion_ids[i, :n])
        assert torch.allclose(ro.logprobs[i, :n].double(), full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_lean_and_hf_paths_sample_the_same_tokens_with_rows_finishing(arch):
    policy = _preset(arch, 3)
    eos = policy.tokenizer.eos_token_id
    with torch.no_grad():  # make EOS likely enough that rows finish at different steps
        policy.model.lm_head.weight[eos] += 1.5 * policy.model.model.norm.weight.sign() / policy.model.config.hidden_size ** 0.5
    prompts = policy.encode_prompts(QUESTIONS)
    runs = {}
    for decode in ("lean", "hf"):
        runs[decode] = generate(policy, prompts, 4, SamplingParams(temperature=1.0, top_k=40, top_p=0.95,
                                                                   max_new_tokens=30, seed=11, stop=("7",),
                                                                   decode=decode))
    lean, hf = runs["lean"], runs["hf"]
    assert lean.stats["lean_decode"] == 1.0 and hf.stats["lean_decode"] == 0.0
    assert torch.equal(lean.completion_ids, hf.completion_ids)
    assert lean.finish_reasons == hf.finish_reasons and lean.texts == hf.texts
    assert torch.equal(lean.completion_mask, hf.completion_mask)
    assert torch.allclose(lean.logprobs, hf.logprobs, atol=1e-5, rtol=0)
    assert lean.stats["decode_rows_x_steps"] == hf.stats["decode_rows_x_steps"] == lean.num_generated_tokens
    lengths = set(lean.lengths.tolist())
    assert len(lengths) > 3 and "stop" in lean.finish_reasons  # rows left the batch at several steps


def test_weights_changed_after_a_call_are_used_by_the_next(tiny_policy):
    policy = tiny_policy
    prompts = policy.encode_prompts(QUESTIONS)
    params = SamplingParams(temperature=0, max_new_tokens=16)
    before = generate(policy, prompts, 1, params)
    # Update through .data, the way a trainer or a weight sync may: no autograd version bump.
    torch.manual_seed(5)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.data.add_(0.05 * torch.randn_like(p))
    after = generate(policy, prompts, 1, params)
    reference = generate(policy, prompts, 1, SamplingParams(temperature=0, max_new_tokens=16, decode="hf"))
    assert after.stats["lean_decode"] == 1.0
    assert not torch.equal(before.completion_ids, after.completion_ids)
    assert torch.equal(after.completion_ids, reference.completion_ids)
    assert torch.allclose(after.logprobs, reference.logprobs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch,overrides", [
    ("llama", dict(num_key_value_heads=2)),  # grouped-query attention
    ("qwen2", dict(num_key_value_heads=1)),  # multi-query attention, with q/k/v bias
    ("llama", dict(tie_word_embeddings=False)),
    ("llama", dict(attention_bias=True, mlp_bias=True)),
    ("llama", dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0})),
    ("llama", dict(head_dim=8)),  # head_dim != hidden / heads
])
def test_lean_supports_config_features_exactly(arch, overrides):
    policy = _custom_policy(arch, **overrides)
    assert decode_path(policy.model) == ("lean", None)
    _assert_greedy_equals_hf(policy)
    ro = generate(policy, policy.encode_prompts(QUESTIONS[:2]), 2, SamplingParams(max_new_tokens=12, seed=1))
    for i in range(4):
        n = int(ro.lengths[i])
        full = _full_forward_logprobs(policy, ro.prompt_ids[i // 2], ro.completion_ids[i, :n])
        assert torch.allclose(ro.logprobs[i, :n].double(), full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch,overrides,reason", [
    ("llama", dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}), "rope_type"),
    ("qwen2", dict(use_sliding_window=True, sliding_window=4, max_window_layers=1), "sliding-window"),
    ("llama", dict(hidden_act="gelu"), "hidden_act"),
    ("llama", dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
     "partial_rotary_factor"),
])
def test_unsupported_config_features_fall_back_to_the_hf_forward(arch, overrides, reason):
    policy = _custom_policy(arch, **overrides)
    path, why = decode_path(policy.model)
    assert path == "hf" and reason in why
    prompts = policy.encode_prompts(QUESTIONS)
    ro = generate(policy, prompts, 1, SamplingParams(temperature=0, max_new_tokens=12))
    assert ro.stats["lean_decode"] == 0.0
    theirs = _hf_greedy(policy, prompts, 12)
    for i in range(len(prompts)):
        n = int(ro.lengths[i])
        assert ro.completion_ids[i, :n].tolist() == theirs[i, :n].tolist()
    with pytest.raises(ValueError, match=reason):
        generate(policy, prompts, 1, SamplingParams(temperature=0, max_new_tokens=4, decode="lean"))


def test_forward_hooks_and_wrapped_layers_fall_back(tiny_policy):
    policy = tiny_policy
    handle = policy.model.lm_head.register_forward_hook(lambda m, i, o: o)
    try:
        assert decode_path(policy.model)[0] == "hf" and "hook" in decode_path(policy.model)[1]
    finally:
        handle.remove()
    assert decode_path(policy.model) == ("lean", None)

    class LoggingLinear(torch.nn.Linear):  # stands for an adapter or quantised layer
        pass

    old = policy.model.model.layers[1].mlp.up_proj
    new = LoggingLinear(old.in_features, old.out_features, bias=False)
    new.weight = old.weight
    policy.model.model.layers[1].mlp.up_proj = new
    path, why = decode_path(policy.model)
    assert path == "hf" and "mlp.up_proj" in why
    assert decode_path(policy.model, "hf") == ("hf", "sampling.decode = 'hf'")


def test_decode_option_is_validated():
    with pytest.raises(ValueError, match="sampling.decode"):
        SamplingParams(decode="fast")


def test_reused_kv_buffer_carries_nothing_between_calls(tiny_policy):
    from seqrl.rollout.lean import LeanDecoder

    policy = tiny_policy
    big = generate(policy, policy.encode_prompts(QUESTIONS), 4, SamplingParams(max_new_tokens=40, seed=1))
    assert big.stats["lean_decode"] == 1.0
    prompts = policy.encode_prompts(["7*7=", "31+4="])  # a smaller call into the pooled (larger) buffer
    small = generate(policy, prompts, 3, SamplingParams(max_new_tokens=9, seed=2))
    reference = generate(policy, prompts, 3, SamplingParams(max_new_tokens=9, seed=2, decode="hf"))
    assert torch.equal(small.completion_ids, reference.completion_ids)
    assert torch.allclose(small.logprobs, reference.logprobs, atol=1e-5, rtol=0)
    # Two live decoders never share a buffer; a closed one returns it to the pool.
    a, b = LeanDecoder(policy.model, rows=4, slots=16), LeanDecoder(policy.model, rows=4, slots=16)
    assert a.kv.data_ptr() != b.kv.data_ptr()
    ptr = a.kv.data_ptr()
    a.close()
    c = LeanDecoder(policy.model, rows=2, slots=8)  # fits: takes the returned buffer
    assert c.kv.data_ptr() == ptr
    b.close()
    c.close()


def test_an_lm_head_bias_falls_back_to_the_hf_forward(tiny_policy):
    policy = tiny_policy
    policy.model.lm_head.bias = torch.nn.Parameter(torch.zeros(policy.model.config.vocab_size))
    try:
        path, why = decode_path(policy.model)
        assert path == "hf" and "bias" in why
    finally:
        policy.model.lm_head.bias = None
    assert decode_path(policy.model) == ("lean", None)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_lean_under_bf16_autocast_runs_projections_in_bf16_close_to_fp32(arch):
    """Under `torch.autocast(bf16)` the projections run in bf16 (weights cast once per call): the
    sampled log-probs differ from the fp32 forward's by bf16 rounding only, and the model stays fp32."""
    policy = _preset(arch, 2)
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    prompts = policy.encode_prompts(QUESTIONS[:3])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ro = generate(policy, prompts, 3, SamplingParams(temperature=1.0, max_new_tokens=20, seed=3))
    assert ro.stats["lean_decode"] == 1.0 and ro.logprobs.dtype == torch.float32
    worst = 0.0
    for i in range(9):
        n = int(ro.lengths[i])
        full = _full_forward_logprobs(policy, ro.prompt_ids[i // 3], ro.completion_ids[i, :n])
        worst = max(worst, float((ro.logprobs[i, :n].double() - full).abs().max()))
    assert 1e-4 < worst < 0.05, worst  # bf16 ran (fp32 agrees to 1e-5), and only rounding differs
    after = policy.model.state_dict()
    assert all(after[k].dtype == v.dtype and torch.equal(after[k], v) for k, v in before.items())


def test_lean_decoder_casts_only_the_projections_and_the_cache_under_autocast(tiny_policy, monkeypatch):
    from seqrl.rollout import lean
    from seqrl.rollout.lean import LeanDecoder

    model = tiny_policy.model
    for kv_bf16, cache in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(lean, "KV_BF16", kv_bf16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            dec = LeanDecoder(model, rows=2, slots=8)
        try:
            assert dec.mm_dtype == torch.bfloat16 and dec.lm_head.dtype == torch.bfloat16
            assert dec.layers[0][1].dtype == torch.bfloat16  # fused q/k/v
            assert dec.kv.dtype == cache and dec.full == (cache == torch.bfloat16)
            assert dec.embed.dtype == torch.float32 and dec.norm.dtype == torch.float32  # residual stream, norms
        finally:
            dec.close()
    dec = LeanDecoder(model, rows=2, slots=8)
    try:
        assert dec.mm_dtype == torch.float32 and dec.layers[0][1].dtype == torch.float32
    finally:
        dec.close()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_attending_over_the_whole_bf16_cache_equals_attending_over_its_written_slots(arch, monkeypatch):
    """With `KV_BF16` under bf16 autocast the cache is bf16 and each step attends over all its slots, the
    unwritten ones masked (`LeanDecoder.full`): the same tokens and log-probs as the same cache read only up to the step's
    column, with left padding, rows finishing early (compaction) and a pooled buffer full of NaN."""
    from seqrl.rollout import lean

    policy = _custom_policy(arch, seed=5, **({"num_key_value_heads": 2} if arch == "qwen2" else {}))
    prompts = policy.encode_prompts(QUESTIONS)  # different lengths: left padding
    params = SamplingParams(temperature=1.0, max_new_tokens=24, seed=11, stop=("7", "q"))
    monkeypatch.setitem(lean._POOL, ("cpu", torch.bfloat16), torch.full((1 << 20,), float("nan"), dtype=torch.bfloat16))
    monkeypatch.setattr(lean, "KV_BF16", True)
    real_init = lean.LeanDecoder.__init__
    runs = {}
    for full in (True, False):
        def init(self, *args, full=full, **kwargs):
            real_init(self, *args, **kwargs)
            assert self.cache_dtype == torch.bfloat16 and self.full
            self.full = full  # False: the same bf16 cache, attention over the written slots only

        monkeypatch.setattr(lean.LeanDecoder, "__init__", init)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            runs[full] = generate(policy, prompts, 3, params)
    a, b = runs[True], runs[False]
    assert a.stats["lean_decode"] == 1.0 and torch.isfinite(a.logprobs).all()
    assert a.completion_ids.tolist() == b.completion_ids.tolist() and len(set(a.lengths.tolist())) > 2
    # a longer reduction rounds the bf16 attention output differently (≤ 3e-4 seen with AVX-512 BF16, 7.6e-3
    # on an AVX2-only CPU, where bf16 runs through other kernels); a mask one slot off changes tokens and
    # log-probs by more than 1
    assert torch.allclose(a.logprobs, b.logprobs, atol=2e-2, rtol=0)


def test_the_bf16_cache_samples_within_bf16_rounding_of_the_fp32_cache(monkeypatch):
    """`KV_BF16` (the default) makes the cache bf16 under autocast, False keeps it fp32; both caches score
    their tokens within bf16 rounding of the fp32 full forward."""
    from seqrl.rollout import lean

    policy = _custom_policy("qwen2", seed=5, hidden_size=128, intermediate_size=256, num_key_value_heads=2)
    with torch.no_grad():
        for p in policy.model.parameters():
            if p.dim() == 2:
                p.mul_(0.25)  # a smooth distribution, where rounding shows as rounding
    prompts = policy.encode_prompts(QUESTIONS)
    params = SamplingParams(temperature=1.0, max_new_tokens=24, seed=11, stop=("7", "q"))
    for kv_bf16 in (True, False):
        monkeypatch.setattr(lean, "KV_BF16", kv_bf16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ro = generate(policy, prompts, 3, params)
        worst = 0.0
        for i in range(ro.completion_ids.shape[0]):
            n = int(ro.lengths[i])
            full = _full_forward_logprobs(policy, ro.prompt_ids[i // 3], ro.completion_ids[i, :n])
            worst = max(worst, float((ro.logprobs[i, :n].double() - full).abs().max()))
        assert 1e-4 < worst < 0.05, (kv_bf16, worst)  # bf16 ran, and only rounding differs


def _packing_available():
    from seqrl.rollout.lean import _packs

    return _packs(torch.device("cpu"), torch.float32)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_packed_weights_sample_what_plain_linear_samples(arch, monkeypatch):
    """oneDNN on packed weights (the CPU default where torch has oneDNN) and `F.linear` on the plain
    weights: the same tokens, log-probs within fp32 rounding, rows finishing at different steps."""
    from seqrl.rollout import lean

    policy = _custom_policy(arch, seed=4, hidden_size=256, intermediate_size=512,  # large enough to be packed
                            **({"num_key_value_heads": 2} if arch == "qwen2" else {}))
    prompts = policy.encode_prompts(QUESTIONS)
    params = SamplingParams(temperature=1.0, max_new_tokens=24, seed=7, stop=("7", "q", "e", "a"))
    runs = {}
    for packed in (None, False):
        monkeypatch.setattr(lean, "PACK_WEIGHTS", packed)
        dec = lean.LeanDecoder(policy.model, rows=2, slots=8)
        assert dec.packed == (packed is None and _packing_available())
        dec.close()
        runs[packed] = generate(policy, prompts, 4, params)
    a, b = runs[None], runs[False]
    assert a.completion_ids.tolist() == b.completion_ids.tolist() and a.ended_by == b.ended_by
    assert torch.allclose(a.logprobs, b.logprobs, atol=1e-5)
    assert len(set(a.lengths.tolist())) > 2


def test_packing_is_used_on_a_cpu_with_onednn(tiny_policy):
    from seqrl.rollout.lean import LeanDecoder

    if not torch.backends.mkldnn.is_available():
        pytest.fail("this torch build has no oneDNN: the CPU wheel the project installs has it")
    from seqrl.rollout.lean import PACK_MIN_NUMEL

    dec = LeanDecoder(tiny_policy.model, rows=4, slots=8)
    try:  # the tiny preset's weights are below the size where packing pays
        assert dec.packed and not any(w.is_mkldnn for layer in dec.layers for w in layer if w is not None)
    finally:
        dec.close()
    policy = _custom_policy("llama", hidden_size=256, intermediate_size=512)
    dec = LeanDecoder(policy.model, rows=4, slots=8)
    try:  # fused q/k/v 768 × 256 and gate/up 1024 × 256 packed, o_proj 256 × 256 and the 110-token head not
        weights = (dec.layers[0][1], dec.layers[0][3], dec.layers[0][6], dec.lm_head)
        assert [w.is_mkldnn for w in weights] == [w.shape.numel() >= PACK_MIN_NUMEL for w in weights] == [True, False, True, False]
    finally:
        dec.close()


def test_packed_weights_under_bf16_autocast_stay_close_to_fp32():
    """Under `torch.autocast(bf16)` the packed weights are bf16 (where oneDNN has bf16): the sampled
    log-probs differ from the fp32 forward's by bf16 rounding only."""
    from seqrl.rollout.lean import LeanDecoder, _packs

    policy = _custom_policy("llama", seed=6, hidden_size=256, intermediate_size=512)
    with torch.no_grad():
        for p in policy.model.parameters():
            if p.dim() == 2:
                p.mul_(0.25)  # back to the init's scale: a smooth distribution, where rounding shows as rounding
    with torch.autocast("cpu", dtype=torch.bfloat16):
        dec = LeanDecoder(policy.model, rows=2, slots=8)
        try:
            assert dec.layers[0][1].dtype == torch.bfloat16
            assert dec.layers[0][1].is_mkldnn == _packs(torch.device("cpu"), torch.bfloat16)
        finally:
            dec.close()
        prompts = policy.encode_prompts(QUESTIONS[:3])
        ro = generate(policy, prompts, 2, SamplingParams(temperature=1.0, max_new_tokens=12, seed=3))
    worst = 0.0
    for i in range(6):
        n = int(ro.lengths[i])
        full = _full_forward_logprobs(policy, ro.prompt_ids[i // 2], ro.completion_ids[i, :n])
        worst = max(worst, float((ro.logprobs[i, :n].double() - full).abs().max()))
    assert 1e-4 < worst < 0.05, worst
