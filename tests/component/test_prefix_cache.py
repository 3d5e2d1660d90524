"""K/V kept across `generate` calls (`PrefixCache`): a prompt continuing a row an earlier call ended at a
stop string computes one token, and samples what a full prefill samples; a stale cache is never read."""

from __future__ import annotations

import pytest
import torch

from seqrl.rollout import PrefixCache, SamplingParams, generate
from seqrl.search import steps as steps_mod
from seqrl.search.steps import PolicyStepper
from seqrl.search.tree import beam_search
from seqrl.types import Problem
from tests.component.test_search_policy import LengthScorer
from tests.component.test_rollout_lean import QUESTIONS, _custom_policy


STOPS = tuple("\n(tn=oQ\\|1")  # characters the test models write often: many rows end at a stop string


def _continuations(policy, cache, n=4, stop=STOPS, seed=5):
    """Rows of a first call ended at a stop string, as prompts (prompt + every sampled token)."""
    prompts = policy.encode_prompts(QUESTIONS)
    first = generate(policy, prompts, n, SamplingParams(max_new_tokens=20, stop=stop, seed=seed), prefix_cache=cache)
    rows = [r for r, e in enumerate(first.ended_by) if e == "stop_string"]
    return [prompts[r // n] + first.completion_ids[r, : int(first.lengths[r])].tolist() for r in rows], prompts


@pytest.mark.parametrize("arch,overrides", [("llama", {}), ("qwen2", {"num_key_value_heads": 2})])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_continuing_from_the_cache_samples_what_a_full_prefill_samples(arch, overrides, temperature):
    policy = _custom_policy(arch, seed=1, **overrides)
    cache = PrefixCache()
    cont, prompts = _continuations(policy, cache)
    assert len(cont) >= 4 and len(cache) == len({tuple(c[:-1]) for c in cont})  # only stop-string rows are kept
    mixed = cont[:2] + [prompts[0]] + cont[2:] + [prompts[2]]  # hits and misses interleaved, lengths differ
    params = SamplingParams(temperature=temperature, max_new_tokens=15, seed=9, stop=STOPS[2:])
    full = generate(policy, mixed, 3, params)
    hits_before = cache.hits
    cached = generate(policy, mixed, 3, params, prefix_cache=cache)
    assert cached.stats["prefix_cache_hits"] == len(cont) and cache.hits - hits_before == len(cont)
    assert cached.completion_ids.tolist() == full.completion_ids.tolist()
    assert cached.ended_by == full.ended_by and cached.texts == full.texts
    assert torch.allclose(cached.logprobs, full.logprobs, atol=1e-5)
    assert len(set(cached.lengths.tolist())) > 2  # rows left the batch at several steps


@pytest.mark.parametrize("arch,overrides", [("llama", {}), ("qwen2", {"num_key_value_heads": 2})])
def test_a_row_extended_by_several_tokens_prefills_only_them_and_samples_what_a_full_prefill_samples(arch, overrides):
    """A multi-turn episode's next turn: the row a turn ended at a stop string, then a tool turn of several
    tokens (its length differs by row, and one rest is longer than a whole short prompt). Each entry
    serves once (`single_use`)."""
    policy = _custom_policy(arch, seed=1, **overrides)
    cache = PrefixCache(single_use=True)
    cont, prompts = _continuations(policy, cache)
    tool = policy.tokenizer.encode("<tool_response>42</tool_response>", add_special_tokens=False)
    extended = [c + tool[: 3 + 5 * (k % 3)] for k, c in enumerate(cont)] + [prompts[1]]
    params = SamplingParams(temperature=1.0, max_new_tokens=15, seed=9, stop=STOPS[2:])
    full = generate(policy, extended, 1, params)
    cached = generate(policy, extended, 1, params, prefix_cache=cache)
    assert cached.stats["prefix_cache_hits"] == len({tuple(c[:-1]) for c in cont})  # two equal rows: one entry
    assert cached.completion_ids.tolist() == full.completion_ids.tolist() and cached.ended_by == full.ended_by
    assert torch.allclose(cached.logprobs, full.logprobs, atol=1e-5)
    assert not any(c[:-1] in cache for c in cont) and cont  # each continued entry was dropped
    assert generate(policy, extended[:2], 1, params, prefix_cache=cache).stats["prefix_cache_hits"] == 0


def test_under_bf16_autocast_cached_rows_score_their_tokens_as_a_full_forward_does(monkeypatch):
    """The bf16 cache (`lean.KV_BF16`): K/V exported and copied back in bf16; a continued row's log-probs
    are within bf16 rounding of the fp32 full forward of its own tokens (a misplaced slot is not)."""
    from seqrl.rollout import lean
    from tests.component.test_rollout_lean import _full_forward_logprobs

    monkeypatch.setattr(lean, "KV_BF16", True)
    policy = _custom_policy("qwen2", seed=1, num_key_value_heads=2)
    cache = PrefixCache()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cont, _ = _continuations(policy, cache)
        assert len(cont) >= 4 and all(kv.dtype == torch.bfloat16 for kv, _ in cache._entries.values())
        out = generate(policy, cont, 2, SamplingParams(temperature=1.0, max_new_tokens=12, seed=4), prefix_cache=cache)
    assert out.stats["prefix_cache_hits"] == len(cont)
    worst = 0.0
    for i in range(out.completion_ids.shape[0]):
        n = int(out.lengths[i])
        full = _full_forward_logprobs(policy, out.prompt_ids[i // 2], out.completion_ids[i, :n])
        worst = max(worst, float((out.logprobs[i, :n].double() - full).abs().max()))
    assert 1e-4 < worst < 0.05, worst


def test_an_in_place_weight_update_empties_the_cache():
    policy = _custom_policy("llama", seed=2)
    cache = PrefixCache()
    cont, _ = _continuations(policy, cache)
    assert cont and len(cache) > 0
    with torch.no_grad():
        for p in policy.model.parameters():
            p.mul_(1.1)  # what an optimizer step does: the cached K/V are stale now
    params = SamplingParams(temperature=0, max_new_tokens=10)
    hits = cache.hits
    again = generate(policy, cont, 1, params, prefix_cache=cache)
    assert cache.hits == hits and again.stats["prefix_cache_hits"] == 0
    assert again.completion_ids.tolist() == generate(policy, cont, 1, params).completion_ids.tolist()


def test_another_autocast_dtype_empties_the_cache():
    policy = _custom_policy("llama", seed=2)
    cache = PrefixCache()
    cont, _ = _continuations(policy, cache)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = generate(policy, cont, 1, SamplingParams(temperature=0, max_new_tokens=4), prefix_cache=cache)
    assert out.stats["prefix_cache_hits"] == 0


def test_the_byte_budget_evicts_the_least_recently_used_of_earlier_calls_only():
    model = torch.nn.Linear(2, 2)
    cache = PrefixCache(max_bytes=3 * 40)
    cache.bind(model, torch.float32, torch.float32)  # call 1
    assert [cache.put([i, i], torch.zeros(10)) for i in range(5)] == [True, True, True, False, False]  # 40 bytes each
    assert len(cache) == 3 and cache.bytes == 120  # a call never evicts its own rows
    cache.bind(model, torch.float32, torch.float32)  # call 2, same weights: kept
    assert cache.get([0, 0, 9]) is not None  # used again: now the most recent
    assert cache.put([5, 5], torch.zeros(10)) and cache.put([6, 6], torch.zeros(10))
    assert cache.get([1, 1, 9]) is None and cache.get([2, 2, 9]) is None  # the least recently used went
    assert cache.get([0, 0, 9]) is not None and len(cache) == 3
    assert not cache.put([7], torch.zeros(100))  # larger than the whole budget
    assert len(PrefixCache(max_bytes=0)) == 0
    with pytest.raises(ValueError, match="max_bytes"):
        PrefixCache(max_bytes=-1)


def test_a_fused_optimizer_step_and_a_data_swap_empty_the_cache():
    """Fused AdamW leaves the version counters as they were; the sampled values still move."""
    model = torch.nn.Linear(64, 64)
    cache = PrefixCache()
    cache.bind(model, torch.float32, torch.float32)
    cache.put([1, 2], torch.zeros(4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    model(torch.randn(3, 64)).sum().backward()
    opt.step()
    cache.bind(model, torch.float32, torch.float32)
    assert len(cache) == 0
    cache.put([1, 2], torch.zeros(4))
    model.weight.data = model.weight.data.clone()  # same values, another storage
    cache.bind(model, torch.float32, torch.float32)
    assert len(cache) == 0


def test_nan_in_the_unused_buffer_does_not_reach_a_cached_row(monkeypatch):
    """The left padding of a row continued from the cache is zeroed, not left as the pooled buffer held it."""
    from seqrl.rollout import lean

    policy = _custom_policy("llama", seed=1)
    cache = PrefixCache()
    cont, _ = _continuations(policy, cache)
    mixed = cont + [policy.encode_prompts(["1234567+89012345="])[0]]  # a longer prompt: the others are padded
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=2)
    full = generate(policy, mixed, 2, params)
    for buf in lean._POOL.values():
        buf.fill_(float("nan"))
    cached = generate(policy, mixed, 2, params, prefix_cache=cache)
    assert cached.stats["prefix_cache_hits"] == len(cont)
    assert torch.isfinite(cached.logprobs).all() and cached.completion_ids.tolist() == full.completion_ids.tolist()


def test_the_hf_forward_neither_reads_nor_fills_the_cache():
    policy = _custom_policy("llama", seed=1)
    cache = PrefixCache()
    prompts = policy.encode_prompts(QUESTIONS)
    out = generate(policy, prompts, 4, SamplingParams(max_new_tokens=20, stop=STOPS, seed=5, decode="hf"),
                   prefix_cache=cache)
    assert "stop_string" in out.ended_by and len(cache) == 0


def test_beam_search_finds_the_same_solutions_with_and_without_the_cache(tiny_policy, monkeypatch):
    monkeypatch.setattr(steps_mod, "STEP_SEP", "\n")  # a separator the untrained model writes often
    problems = [Problem("12+34=", "46"), Problem("5+6=", "11"), Problem("71-9=", "62")]

    def search(cache):
        stepper = PolicyStepper(tiny_policy, step_tokens=6, solution_tokens=40, seed=3, prefix_cache=cache)
        return beam_search(problems, stepper, LengthScorer(), n=6, beam_width=2, max_steps=5), stepper

    with_cache, stepper = search(PrefixCache())
    without, _ = search(None)
    assert stepper.prefix_cache.hits > 0
    assert with_cache.chosen == without.chosen and with_cache.pools == without.pools
    assert with_cache.account.generated_tokens == without.account.generated_tokens


def test_another_model_empties_the_cache():
    cache = PrefixCache()
    a = _custom_policy("llama", seed=1)
    cont, _ = _continuations(a, cache)
    b = _custom_policy("llama", seed=1)  # equal weights, another module: the cache is not trusted across models
    out = generate(b, cont, 1, SamplingParams(temperature=0, max_new_tokens=4), prefix_cache=cache)
    assert out.stats["prefix_cache_hits"] == 0 and len(cache) == 0
