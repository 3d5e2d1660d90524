"""The rollout engine against HF `generate` and a full forward pass."""

from __future__ import annotations

import pytest
import torch

from seqrl.models import ModelConfig, load_policy
from seqrl.rollout import SamplingParams, generate
from seqrl.rollout.engine import _filter_logits

QUESTIONS = ["12+34=", "5+7=", "123*45=", "9-81="]


def _hf_greedy(policy, questions, max_new):
    tok = policy.tokenizer
    enc = tok([policy.prompt_text(q) for q in questions], return_tensors="pt", padding=True, add_special_tokens=False)
    out = policy.model.generate(**enc, max_new_tokens=max_new, do_sample=False, pad_token_id=tok.pad_token_id,
                                eos_token_id=tok.eos_token_id)
    return out[:, enc.input_ids.shape[1]:]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_greedy_equals_hf_generate_token_for_token(arch):
    torch.manual_seed(1)
    policy = load_policy(ModelConfig(preset="tiny", arch=arch, max_seq_len=96))
    ours = generate(policy, policy.encode_prompts(QUESTIONS), 1, SamplingParams(temperature=0, max_new_tokens=24))
    theirs = _hf_greedy(policy, QUESTIONS, 24)
    for i in range(len(QUESTIONS)):
        n = int(ours.lengths[i])
        assert ours.completion_ids[i, :n].tolist() == theirs[i, :n].tolist()
        if ours.finish_reasons[i] == "length":
            assert n == 24


def test_greedy_parity_with_eos_mid_batch(tiny_policy):
    # Make EOS the greedy choice after a few tokens on some rows by biasing the EOS logit.
    policy = tiny_policy
    eos = policy.tokenizer.eos_token_id
    with torch.no_grad():
        policy.model.lm_head.weight  # tied with the embedding
        bias = torch.zeros(policy.model.config.vocab_size)
    handle = policy.model.lm_head.register_forward_hook(
        lambda m, i, o: o + torch.where(torch.arange(o.shape[-1]) == eos, 0.9 * o.abs().amax(-1, keepdim=True), bias)
    )
    try:
        ours = generate(policy, policy.encode_prompts(QUESTIONS), 1, SamplingParams(temperature=0, max_new_tokens=16))
        theirs = _hf_greedy(policy, QUESTIONS, 16)
    finally:
        handle.remove()
    assert "stop" in ours.finish_reasons
    for i in range(len(QUESTIONS)):
        n = int(ours.lengths[i])
        assert ours.completion_ids[i, :n].tolist() == theirs[i, :n].tolist()
        if ours.finish_reasons[i] == "stop":
            assert ours.completion_ids[i, n - 1] == eos
            assert ours.completion_mask[i, n:].sum() == 0


def test_sampled_logprobs_equal_full_forward(tiny_policy):
    policy = tiny_policy
    ro = generate(policy, policy.encode_prompts(QUESTIONS[:2]), 3, SamplingParams(temperature=1.0, max_new_tokens=20, seed=3))
    assert ro.completion_ids.shape[0] == 6 and ro.prompt_index == [0, 0, 0, 1, 1, 1]
    for i in range(6):
        prompt = ro.prompt_ids[i // 3]
        n = int(ro.lengths[i])
        completion = ro.completion_ids[i, :n]
        with torch.no_grad():
            logits = policy.model(torch.tensor([prompt + completion.tolist()])).logits[0].double()
        full = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1].gather(-1, completion[:, None]).squeeze(-1)
        assert torch.allclose(ro.logprobs[i, :n].double(), full, atol=1e-5, rtol=0)
        assert torch.all(ro.logprobs[i, n:] == 0)


def test_same_seed_same_samples_and_temperature_changes_logprobs(tiny_policy):
    prompts = tiny_policy.encode_prompts(QUESTIONS)
    a = generate(tiny_policy, prompts, 2, SamplingParams(max_new_tokens=12, seed=7))
    b = generate(tiny_policy, prompts, 2, SamplingParams(max_new_tokens=12, seed=7))
    assert torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts
    assert a.num_generated_tokens == int(a.completion_mask.sum())
    assert a.num_prompt_tokens == sum(len(p) for p in prompts)  # each prompt encoded once for n=2


def test_stop_strings_end_the_completion(tiny_policy):
    policy = tiny_policy
    eos = policy.tokenizer.eos_token_id
    ro = generate(policy, policy.encode_prompts(QUESTIONS), 4, SamplingParams(max_new_tokens=40, seed=0, stop=("7", "Q")))
    by_stop_string = 0
    for i, (text, reason) in enumerate(zip(ro.texts, ro.finish_reasons)):
        n = int(ro.lengths[i])
        ended_by_eos = int(ro.completion_ids[i, n - 1]) == eos
        if reason == "stop" and not ended_by_eos:
            by_stop_string += 1
            assert text.endswith(("7", "Q")), text
        # no stop string before the end
        assert "7" not in text[:-1] and "Q" not in text[:-1], text
        if reason == "length":
            assert n == 40
    assert by_stop_string > 0  # 16 random samples of 40 tokens: some hit "7" or "Q"


def test_prompt_longer_than_context_is_an_error_naming_the_limit(tiny_policy):
    with pytest.raises(ValueError, match="context of 96 tokens"):
        generate(tiny_policy, [[5] * 200], 1, SamplingParams(max_new_tokens=4))


def test_generation_stops_at_context_limit(tiny_policy):
    ro = generate(tiny_policy, [[5] * 90], 1, SamplingParams(temperature=0, max_new_tokens=50))
    assert int(ro.lengths[0]) <= 6 and ro.finish_reasons[0] in ("length", "stop")


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(top_p=0), dict(top_k=-2), dict(max_new_tokens=0), dict(stop=("",))])
def test_sampling_params_validation(bad):
    with pytest.raises(ValueError, match="sampling"):
        SamplingParams(**bad)


def test_top_k_and_top_p_filters_on_hand_values():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64))
    # top-k=2 keeps the two largest
    kept = torch.isfinite(_filter_logits(logits, 2, 1.0))
    assert kept.tolist() == [[True, True, False, False]]
    # top-p=0.75: mass before each token = 0, .5, .8, .95 -> keep while < .75 -> first two
    kept = torch.isfinite(_filter_logits(logits, 0, 0.75))
    assert kept.tolist() == [[True, True, False, False]]
    # top-p=0.85 needs the third token too (.8 < .85), not the fourth (.95)
    kept = torch.isfinite(_filter_logits(logits, 0, 0.85))
    assert kept.tolist() == [[True, True, True, False]]


def test_finished_rows_stop_costing_compute(tiny_policy):
    policy = tiny_policy
    eos = policy.tokenizer.eos_token_id
    handle = policy.model.lm_head.register_forward_hook(
        lambda m, i, o: o + (torch.arange(o.shape[-1]) == eos) * 1.5 * o.abs().amax(-1, keepdim=True))
    try:
        ro = generate(policy, policy.encode_prompts(QUESTIONS), 8, SamplingParams(max_new_tokens=30, seed=0))
    finally:
        handle.remove()
    # decode work counted row by row equals the generated tokens, below the padded rectangle
    assert ro.stats["decode_rows_x_steps"] == ro.num_generated_tokens
    assert ro.stats["decode_rows_x_steps"] < ro.stats["padded_rows_x_steps"]


def test_the_stop_check_decodes_windows_as_the_tokenizer_does(tiny_policy):
    from seqrl.rollout.engine import window_decoder

    tok = tiny_policy.tokenizer
    ids = tok.encode("<think>12+34=46\n\n</think><answer>46</answer>", add_special_tokens=False) + [tok.eos_token_id]
    windows = [ids[i:i + k] for k in (1, 3, 4) for i in range(len(ids) - k + 1)]
    assert window_decoder(tok)(windows) == [tok.decode(w, skip_special_tokens=False) for w in windows]
    tok.clean_up_tokenization_spaces = True  # decode then does more than the Rust call: decoded row by row
    try:
        assert window_decoder(tok)(windows[:5]) == [tok.decode(w, skip_special_tokens=False) for w in windows[:5]]
    finally:
        tok.clean_up_tokenization_spaces = False
