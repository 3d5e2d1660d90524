"""Format rewards on the house completion format."""

from __future__ import annotations

import re

from seqrl.data.base import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN, Problem
from seqrl.rewards.base import RewardResult

_R1 = re.compile(
    r"^\s*" + re.escape(THINK_OPEN) + r"(?P<think>.*?)" + re.escape(THINK_CLOSE) + r"\s*"
    + re.escape(ANSWER_OPEN) + r"(?P<answer>.*?)" + re.escape(ANSWER_CLOSE) + r"\s*$",
    re.S,
)


def think_answer_format(completion: str) -> RewardResult:
    """R1-style format: ``<think>…</think>`` then ``<answer>…</answer>``, each once, nothing after.

    >>> think_answer_format("<think>7+5=12</think><answer>12</answer>").score
    1.0
    >>> think_answer_format("<answer>12</answer>").reason
    'expected <think>…</think><answer>…</answer>'
    >>> think_answer_format("<think>a</think><answer>1</answer><answer>2</answer>").reason
    'each tag must appear exactly once'
    """
    if any(completion.count(tag) != 1 for tag in (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)):
        if _R1.match(completion):
            return RewardResult(0.0, "each tag must appear exactly once")
        return RewardResult(0.0, "expected <think>…</think><answer>…</answer>")
    if not _R1.match(completion):
        return RewardResult(0.0, "expected <think>…</think><answer>…</answer>")
    return RewardResult(1.0)


def format_reward(problems: list[Problem], completions: list[str]) -> list[RewardResult]:
    """`think_answer_format` for each completion (a reward function)."""
    return [think_answer_format(c) for c in completions]
