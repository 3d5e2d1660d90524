"""Format rewards on the house completion format."""

from __future__ import annotations

import re

from seqrl.rewards.math import find_boxed
from seqrl.types import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN, Problem, RewardResult

_THINK_THEN_ANSWER = re.compile(re.escape(THINK_CLOSE) + r"\s*" + re.escape(ANSWER_OPEN))


def _r1_shape(completion: str) -> bool:
    """Whether the text is ``<think>…</think>`` then ``<answer>…</answer>`` (spaces around), the
    bodies being anything. Linear: the regex with two lazy bodies backtracks over repeated tags."""
    start = len(completion) - len(completion.lstrip())
    if not completion.startswith(THINK_OPEN, start):
        return False
    end = len(completion.rstrip()) - len(ANSWER_CLOSE)
    if end < start or not completion.startswith(ANSWER_CLOSE, end):
        return False
    m = _THINK_THEN_ANSWER.search(completion, start + len(THINK_OPEN))
    return m is not None and m.end() <= end


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
        if _r1_shape(completion):
            return RewardResult(0.0, "each tag must appear exactly once")
        return RewardResult(0.0, "expected <think>…</think><answer>…</answer>")
    if not _r1_shape(completion):
        return RewardResult(0.0, "expected <think>…</think><answer>…</answer>")
    return RewardResult(1.0)


def format_reward(problems: list[Problem], completions: list[str]) -> list[RewardResult]:
    """`think_answer_format` for each completion (a reward function)."""
    return [think_answer_format(c) for c in completions]


def think_answer_partial(completion: str, think_credit: float = 0.1, boxed_credit: float = 0.1) -> RewardResult:
    """Partial format credit (the seed design's shaping): +``think_credit`` for a
    ``<think>…</think>`` pair (open tag before close tag), +``boxed_credit`` for a non-empty
    ``\\boxed{…}`` with balanced braces. ``parts`` holds each credit earned (``think``, ``boxed``);
    the reason lists what is missing.

    >>> think_answer_partial("<think>7+5</think> so \\\\boxed{12}")
    RewardResult(score=0.2, reason='', parts={'think': 0.1, 'boxed': 0.1})
    >>> think_answer_partial("<think>7+5</think><answer>12</answer>")
    RewardResult(score=0.1, reason='missing \\\\boxed{…}', parts={'think': 0.1, 'boxed': 0.0})
    >>> think_answer_partial("</think>12<think>").reason
    'missing <think>…</think>; missing \\\\boxed{…}'
    """
    if not isinstance(completion, str):
        completion = ""
    opened = completion.find(THINK_OPEN)
    has_think = opened >= 0 and completion.find(THINK_CLOSE, opened + len(THINK_OPEN)) >= 0
    has_boxed = any(find_boxed(completion))
    parts = {"think": think_credit if has_think else 0.0, "boxed": boxed_credit if has_boxed else 0.0}
    missing = [m for m, ok in (("missing <think>…</think>", has_think), ("missing \\boxed{…}", has_boxed)) if not ok]
    return RewardResult(round(parts["think"] + parts["boxed"], 12), "; ".join(missing), parts)


def format_partial_reward(problems: list[Problem], completions: list[str]) -> list[RewardResult]:
    """`think_answer_partial` for each completion (a reward function; at most 0.2)."""
    return [think_answer_partial(c) for c in completions]
