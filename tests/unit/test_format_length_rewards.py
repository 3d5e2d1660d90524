"""Partial format credit, length penalties, the new builtin reward names and `seqrl reward`."""

from __future__ import annotations

import json

import pytest

from seqrl.rewards.combine import BUILTIN_REWARDS, RewardSpec, build_reward, score_completions
from seqrl.rewards.format import format_partial_reward, think_answer_format, think_answer_partial
from seqrl.types import Problem, RewardResult
from seqrl.rewards.length import (
    length_penalty,
    make_length_reward,
    make_soft_overlong_reward,
    soft_overlong_reward,
)


@pytest.mark.parametrize("completion,score,parts,reason", [
    ("<think>a</think> \\boxed{1}", 0.2, {"think": 0.1, "boxed": 0.1}, ""),
    ("<think>a</think><answer>1</answer>", 0.1, {"think": 0.1, "boxed": 0.0}, "missing \\boxed{…}"),
    ("\\boxed{\\frac{1}{2}}", 0.1, {"think": 0.0, "boxed": 0.1}, "missing <think>…</think>"),
    ("</think>x<think> \\boxed{}", 0.0, {"think": 0.0, "boxed": 0.0}, "missing <think>…</think>; missing \\boxed{…}"),
    ("<think>unclosed \\boxed{1", 0.0, {"think": 0.0, "boxed": 0.0}, "missing <think>…</think>; missing \\boxed{…}"),
    ("", 0.0, {"think": 0.0, "boxed": 0.0}, "missing <think>…</think>; missing \\boxed{…}"),
])
def test_think_answer_partial(completion, score, parts, reason):
    assert think_answer_partial(completion) == RewardResult(score, reason, parts)


def test_think_answer_partial_credits_are_options():
    assert think_answer_partial("<think>a</think>\\boxed{1}", think_credit=0.5, boxed_credit=0.25).score == 0.75


def test_strict_format_unchanged():
    assert think_answer_format("<think>7+5=12</think><answer>12</answer>").score == 1.0
    assert think_answer_format("<answer>12</answer>").reason == "expected <think>…</think><answer>…</answer>"


def test_length_penalty_hand_values():
    # target 10, max 20: slope 1/10 per token past 10, capped at -1 from 20 on
    assert [length_penalty(n, 20, 10) for n in (0, 10, 11, 15, 20, 21, 1000)] == [0.0, 0.0, -0.1, -0.5, -1.0, -1.0, -1.0]
    # target 0: the whole range is penalised; max_penalty scales it: -0.2 * 3/4
    assert length_penalty(3, 4, 0, max_penalty=0.2) == pytest.approx(-0.15, abs=1e-12)


@pytest.mark.parametrize("args", [(5, 10, 10), (5, 10, -1), (5, 10, 11)])
def test_length_penalty_rejects_bad_targets(args):
    with pytest.raises(ValueError, match="target_tokens"):
        length_penalty(*args)


def test_soft_overlong_reward_hand_values():
    # L_max 20, L_cache 4: zone (16, 20]; 18 -> (16-18)/4 = -0.5; 17 -> -0.25; 21 -> -1
    results = soft_overlong_reward([16, 17, 18, 20, 21], max_len=20, cache_len=4)
    assert [r.score for r in results] == [0.0, -0.25, -0.5, -1.0, -1.0]
    assert results[0].reason == ""
    assert results[2].reason == "overlong: 18 tokens in the 4-token soft zone"
    assert results[4].reason == "overlong: 21 tokens > max 20"
    with pytest.raises(ValueError, match="cache_len"):
        soft_overlong_reward([1], max_len=4, cache_len=5)


class CharTokenizer:
    """Two characters a token (enough to tell tokens from characters)."""

    def encode(self, text, add_special_tokens=True):
        return [text[i:i + 2] for i in range(0, len(text), 2)] + ([0] if add_special_tokens else [])


def test_length_reward_functions_count_chars_or_tokens():
    problems = [Problem("q", "a")] * 2
    chars = make_soft_overlong_reward(max_len=8, cache_len=4)(problems, ["abcd", "abcdefgh"])
    assert [r.score for r in chars] == [0.0, -1.0]
    assert chars[1].reason == "overlong: 8 chars in the 4-char soft zone"
    tokens = make_soft_overlong_reward(max_len=8, cache_len=4, tokenizer=CharTokenizer())(problems, ["abcd", "abcdefgh" * 2])
    assert [r.score for r in tokens] == [0.0, -1.0]  # 2 and 8 tokens
    assert tokens[1].parts == {"length": 8.0}
    linear = make_length_reward(max_len=10, target_len=4, tokenizer=CharTokenizer())(problems, ["a" * 8, "a" * 14])
    assert [(r.score, r.reason) for r in linear] == [(0.0, ""), (-0.5, "too long: 7 tokens > target 4")]


def test_new_builtin_rewards_are_registered_and_score():
    assert {"math", "format_partial"} <= set(BUILTIN_REWARDS)
    problems = [Problem("q", "1/2")] * 3
    completions = ["<think>x</think><answer>0.5</answer>", "<think>x</think>\\boxed{2}", "junk"]
    fns = {name: (build_reward(RewardSpec(name), task=None), 1.0) for name in ("math", "format_partial", "format")}
    batch = score_completions(fns, problems, completions)
    assert batch.scores["math"] == [1.0, 0.0, 0.0]
    assert batch.scores["format_partial"] == [0.1, 0.2, 0.0]
    assert batch.scores["format"] == [1.0, 0.0, 0.0]
    assert batch.total == pytest.approx([2.1, 0.2, 0.0])
    assert batch.reasons["math"][2] == "no answer found"
    assert format_partial_reward(problems[:1], ["<think>x</think>"])[0].score == 0.1
    with pytest.raises(ValueError, match="reward name"):
        RewardSpec("length")


def test_cli_reward_math(capsys):
    from seqrl.cli import main

    assert main(["reward", "math", "--pred", "so \\boxed{\\frac{1}{2}}", "--gold", "0.5"]) == 0
    assert capsys.readouterr().out.strip() == "score=1.0 reason=''"
    assert main(["reward", "math", "--pred", "got 15", "--gold", "15", "--mode", "strict"]) == 0
    assert capsys.readouterr().out.strip() == "score=0.0 reason='no answer found'"
    assert main(["reward", "math", "--pred", "<answer>3</answer>", "--gold", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"score": 0.0, "reason": "not equivalent: 3 vs 4", "parts": {"extracted": 1.0, "equivalent": 0.0},
                   "extracted": "3", "source": "answer_tag"}
