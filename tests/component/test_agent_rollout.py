"""The multi-turn rollout: the policy's turns and the tool turns in one token sequence, the policy's
tokens masked in and their sampler log-probs equal to the trainer's recomputation on the whole episode,
every limit ending an episode with its name."""

from __future__ import annotations

import pytest
import torch

from seqrl.agents import Toolbox
from seqrl.agents.rollout import Sampled, episode_metrics, multi_turn_rollout, tool_framing, tool_turn_text
from seqrl.agents.tools import ToolResult
from seqrl.models.lm import ModelConfig, load_policy
from seqrl.rollout import SamplingParams, sequence_logprobs


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


CALL = '<tool_call>{{"name": "{}", "arguments": {}}}</tool_call>'
SCRIPTS = {  # per prompt: the policy's turns (a turn without a call ends with EOS)
    "3+4=": ["Let me add. " + CALL.format("add", '{"a": 3, "b": 4}'), "The sum is 7."],
    "5+5=": [CALL.format("nope", "{}"), CALL.format("add", '{"a": "x", "b": 1}'), CALL.format("add", '{"a": 1, "b": 1}'),
             "never reached"],
    "9+9=": [CALL.format("add", '{"a": 9, "b": 9}') + " " + CALL.format("add", '{"a": 1, "b": 2}'),
             CALL.format("add", '{"a": 0, "b": 0}') + CALL.format("add", '{"a": 0, "b": 1}'), "never reached"],
}


def scripted(policy, prompts: dict[tuple, str], scripts: dict | None = None):
    """A sampler that writes each episode's scripted turns, with the log-probs the model gives those
    tokens after exactly the context the rollout handed it."""
    tok, model = policy.tokenizer, policy.model
    seen: dict[str, int] = {}

    def sample(contexts, max_new, seed):
        out = []
        for ctx in contexts:
            key = next(k for p, k in prompts.items() if tuple(ctx[: len(p)]) == p)
            turn = (scripts or SCRIPTS)[key][seen.get(key, 0)]
            seen[key] = seen.get(key, 0) + 1
            ids = tok.encode(turn, add_special_tokens=False)
            ended = "stop_string" if turn.endswith("</tool_call>") else "eos"
            if ended == "eos":
                ids.append(tok.eos_token_id)
            with torch.no_grad():
                lp, _ = sequence_logprobs(model, [ctx], torch.tensor([ids]), tok.pad_token_id)
            out.append(Sampled(ids[:max_new], lp[0, :max_new].tolist(), ended if len(ids) <= max_new else "length"))
        return out

    return sample


def _recomputed_gap(policy, e) -> float:
    with torch.no_grad():
        lp, _ = sequence_logprobs(policy.model, [e.prompt_ids], torch.tensor([e.ids]), policy.tokenizer.pad_token_id)
    mask = torch.tensor(e.mask, dtype=torch.bool)
    return float((lp[0][mask] - torch.tensor(e.logprobs)[mask]).abs().max())


def _policy(tokenizer=None):
    torch.manual_seed(0)
    policy = load_policy(ModelConfig(preset="tiny", max_seq_len=512))
    if tokenizer is not None:  # the tiny preset's weights over another vocabulary (its chat template)
        from seqrl.models.lm import build_model
        policy.model = build_model(ModelConfig(preset="tiny", max_seq_len=512), len(tokenizer),
                                   tokenizer.pad_token_id, tokenizer.eos_token_id)
        policy.tokenizer = tokenizer
    return policy.model.eval() and policy


def test_episodes_interleave_policy_and_tool_tokens_and_end_by_their_limits():
    policy = _policy()
    tok = policy.tokenizer
    prompts = {tuple(tok.encode(k, add_special_tokens=False)): k for k in SCRIPTS}
    episodes = multi_turn_rollout(policy, list(prompts), Toolbox([add]), SamplingParams(max_new_tokens=200),
                                  max_turns=3, max_tool_calls=3, sampler=scripted(policy, prompts))
    first, second, third = episodes
    assert (first.end, first.turns, dict(first.calls)) == ("answer", 2, {"add": 1})
    assert (second.end, second.turns, dict(second.errors)) == ("max_turns", 3, {"unknown_tool": 1, "bad_arguments": 1})
    assert (third.end, third.turns, third.tool_calls) == ("max_tool_calls", 2, 2)  # the second turn's 2 are not run
    for e in episodes:
        assert len(e.ids) == len(e.mask) == len(e.logprobs) and 0 < sum(e.mask) < len(e.mask)
        assert _recomputed_gap(policy, e) < 1e-5
        assert all(lp == 0.0 for lp, m in zip(e.logprobs, e.mask) if not m)
    # the tool tokens are the inline results (the tiny template renders no tool turn), the policy's are its turns
    tool_text = tok.decode([t for t, m in zip(first.ids, first.mask) if not m])
    assert tool_text == "\n<tool_response>7</tool_response>\n"
    assert tok.decode([t for t, m in zip(first.ids, first.mask) if m], skip_special_tokens=True) == "".join(SCRIPTS["3+4="])
    assert [m["role"] for m in first.messages] == ["assistant", "tool", "assistant"]
    assert first.messages[0]["tool_calls"] == [{"name": "add", "arguments": {"a": 3, "b": 4}}]
    m = episode_metrics(episodes)
    assert m["agent/calls/add"] == (1 + 2 + 2) / 3 and m["agent/end/answer"] == 1 / 3
    assert m["agent/errors/unknown_tool"] == 1 / 3


def test_a_chat_template_frames_the_results_as_tool_turns():
    import os

    from transformers import AutoTokenizer

    from seqrl.models.catalog import cached

    folder = cached("smollm2-135m-instruct")
    if folder is None:  # make test fetches it; CI fails rather than skips
        if os.environ.get("SEQRL_REQUIRE_REAL_MODEL"):
            pytest.fail("smollm2-135m-instruct is not in the cache and SEQRL_REQUIRE_REAL_MODEL is set")
        pytest.skip("smollm2-135m-instruct not fetched: run `seqrl models get smollm2-135m-instruct`")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    text, inline = tool_turn_text([ToolResult("add", "7"), ToolResult("add", "9")], tool_framing(tokenizer))
    assert not inline and text == ("<|im_end|>\n<|im_start|>tool\n7<|im_end|>\n<|im_start|>tool\n9<|im_end|>\n"
                                   "<|im_start|>assistant\n")
    policy = _policy(tokenizer)
    prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": "3+4="}], tokenize=False,
                                                            add_generation_prompt=True), add_special_tokens=False)
    prompts = {tuple(prompt): "3+4="}
    (e,) = multi_turn_rollout(policy, [prompt], Toolbox([add]), SamplingParams(max_new_tokens=200),
                              sampler=scripted(policy, prompts))
    assert e.end == "answer" and _recomputed_gap(policy, e) < 1e-5
    assert tokenizer.decode([t for t, m in zip(e.ids, e.mask) if not m]) == (
        "<|im_end|>\n<|im_start|>tool\n7<|im_end|>\n<|im_start|>assistant\n")


def test_the_engine_samples_each_turn_and_its_logprobs_equal_the_recomputation():
    policy = _policy()
    prompts = [policy.tokenizer.encode(q, add_special_tokens=False) for q in ("12+30=", "7+8=")]
    episodes = multi_turn_rollout(policy, prompts, Toolbox([add]), SamplingParams(max_new_tokens=24, seed=3), n=2,
                                  max_episode_tokens=16)
    assert len(episodes) == 4 and [e.prompt_ids for e in episodes] == [prompts[0]] * 2 + [prompts[1]] * 2
    for e in episodes:
        assert e.end in ("answer", "max_tokens") and 0 < len(e.ids) <= 16 and all(e.mask)
        assert _recomputed_gap(policy, e) < 1e-4
    assert any(e.end == "max_tokens" for e in episodes)  # the episode budget (16) cut the sampler's 24


def test_the_engine_continues_a_turn_from_its_cached_keys_and_values():
    """The engine sampler across two turns: turns that stopped (at a stop string standing in for a closed
    call) continue with a tool turn from their cached K/V — the same tokens and log-probs as re-prefilling
    the history (cache_bytes=0), which the trainer's recomputation also matches."""
    from seqrl.agents.rollout import engine_sampler
    from tests.component.test_prefix_cache import STOPS

    policy = _policy()
    tok = policy.tokenizer
    params = SamplingParams(temperature=1.0, max_new_tokens=20, stop=STOPS)
    contexts = [tok.encode(q, add_special_tokens=False) for q in ("12+30=", "7+8=", "100-1=", "3*4=")] * 2
    tool = tok.encode("\n<tool_response>42</tool_response>\n", add_special_tokens=False)
    got = {}
    for name, cache_bytes in (("cached", 1 << 30), ("re-prefilled", 0)):
        sample = engine_sampler(policy, params, cache_bytes)
        first = sample(contexts, 20, 5)
        stopped = [(c + s.tokens, k) for k, (c, s) in enumerate(zip(contexts, first)) if s.ended_by == "stop_string"]
        nxt = [fed + tool[: 4 + k % 5] for fed, k in stopped]
        got[name] = (nxt, [(s.tokens, s.logprobs) for s in sample(nxt, 12, 6)])
        if cache_bytes:  # every continued row read its earlier turn's K/V (two equal rows share one entry)
            assert sample.cache.hits == len({tuple(fed[:-1]) for fed, _ in stopped}) > 0
    (nxt, cached), (_, full) = got["cached"], got["re-prefilled"]
    assert len(nxt) >= 4 and [t for t, _ in cached] == [t for t, _ in full]
    assert max(abs(a - b) for (_, x), (_, y) in zip(cached, full) for a, b in zip(x, y)) < 1e-5
    with torch.no_grad():
        lp, _ = sequence_logprobs(policy.model, [nxt[0]], torch.tensor([cached[0][0]]), tok.pad_token_id)
    assert float((lp[0] - torch.tensor(cached[0][1])).abs().max()) < 1e-4


def test_the_prompt_tells_the_tools_as_the_config_says():
    from seqrl.agents.rollout import encode_prompts, template_renders_tools

    policy = _policy()
    box, tok = Toolbox([add]), policy.tokenizer
    text = {mode: tok.decode(encode_prompts(policy, ["3+4="], box, mode)[0]) for mode in ("auto", "full", "compact", "none")}
    assert not template_renders_tools(tok, box)  # the tiny template has no tools: auto is full
    assert text["auto"] == text["full"] and "<tools>" in text["full"] and '"name": "add"' in text["full"]
    assert "Tools: add(a: integer, b: integer): Add two integers. Call: <tool_call>" in text["compact"]
    assert "Tools" not in text["none"] and "<tools>" not in text["none"] and text["none"].endswith("3+4=<|assistant|>")


def test_a_malformed_call_is_an_error_result_that_counts_against_the_budget():
    policy = _policy()
    tok = policy.tokenizer
    scripts = {"1+1=": ["<tool_call>{add: 1}</tool_call>", "2"]}
    prompts = {tuple(tok.encode(k, add_special_tokens=False)): k for k in scripts}
    (e,) = multi_turn_rollout(policy, list(prompts), Toolbox([add]), SamplingParams(max_new_tokens=100),
                              sampler=scripted(policy, prompts, scripts))
    assert (e.end, dict(e.calls), dict(e.errors), e.tool_calls) == ("answer", {}, {"malformed": 1}, 1)
    assert "malformed tool call" in e.messages[1]["content"] and _recomputed_gap(policy, e) < 1e-5
    (e,) = multi_turn_rollout(policy, list(prompts), Toolbox([add]), SamplingParams(max_new_tokens=100),
                              max_tool_calls=0, sampler=scripted(policy, prompts, scripts))
    assert e.end == "max_tool_calls" and e.turns == 1
