"""Length rewards: a linear penalty past a target length, and DAPO's soft overlong punishment.

Reward functions only see ``(problems, completions)`` as text, so the reward-function versions
measure length in **characters** by default, or in tokens when given a tokenizer (anything with
``encode(text) -> list``, e.g. an HF tokenizer; we call ``encode(text, add_special_tokens=False)``
when it accepts that keyword, so special tokens are not counted).
The GRPO loop already applies the token-exact soft overlong penalty itself
(``dapo.soft_overlong_cache``); these are for other loops, evaluation and logging.

Scores are penalties: 0.0 is full marks, down to ``-max_penalty`` (or -1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from seqrl.core.shaping import soft_overlong_penalty
from seqrl.types import Problem, RewardResult


def length_penalty(num_tokens: int, max_tokens: int, target_tokens: int = 0, max_penalty: float = 1.0) -> float:
    """Linear penalty beyond a target length, reaching ``-max_penalty`` at ``max_tokens``:

        p(n) = 0                                             if n ≤ target
             = −max_penalty · (n − target) / (max − target)   if target < n ≤ max
             = −max_penalty                                   if n > max

    >>> [length_penalty(n, max_tokens=20, target_tokens=10) for n in (5, 10, 15, 20, 30)]
    [0.0, 0.0, -0.5, -1.0, -1.0]
    >>> length_penalty(12, max_tokens=20, target_tokens=10, max_penalty=0.5)
    -0.1
    """
    if not 0 <= target_tokens < max_tokens:
        raise ValueError(f"length_penalty: need 0 <= target_tokens < max_tokens (got {target_tokens}, {max_tokens})")
    if max_penalty < 0:
        raise ValueError(f"length_penalty: max_penalty must be >= 0 (got {max_penalty})")
    over = min(max(num_tokens - target_tokens, 0), max_tokens - target_tokens)
    return -max_penalty * over / (max_tokens - target_tokens) if over else 0.0


def soft_overlong_reward(lengths: Sequence[int], max_len: int, cache_len: int, unit: str = "tokens") -> list[RewardResult]:
    """`core.shaping.soft_overlong_penalty` (DAPO eq. 13) as RewardResults with reasons.

    Zero inside ``max_len − cache_len``; linear down to −1 over the ``cache_len`` soft zone;
    −1 beyond ``max_len``.

    >>> [(r.score, r.reason) for r in soft_overlong_reward([10, 18, 21], max_len=20, cache_len=4)]
    [(0.0, ''), (-0.5, 'overlong: 18 tokens in the 4-token soft zone'), (-1.0, 'overlong: 21 tokens > max 20')]
    """
    penalties = soft_overlong_penalty(torch.tensor(list(lengths), dtype=torch.float64), max_len, cache_len)  # (N,)
    results = []
    for n, p in zip(lengths, penalties.tolist()):
        if n > max_len:
            reason = f"overlong: {n} {unit} > max {max_len}"
        elif n > max_len - cache_len:
            reason = f"overlong: {n} {unit} in the {cache_len}-{unit.rstrip('s')} soft zone"
        else:
            reason = ""
        results.append(RewardResult(float(p) + 0.0, reason, {"length": float(n)}))
    return results


def text_length(text: str, tokenizer: Any = None) -> int:
    """Characters of ``text``, or its token count under ``tokenizer``."""
    if tokenizer is None:
        return len(text)
    try:
        return len(tokenizer.encode(text, add_special_tokens=False))
    except TypeError:
        return len(tokenizer.encode(text))


RewardFn = Callable[[list[Problem], list[str]], list[RewardResult]]


def make_length_reward(max_len: int, target_len: int = 0, max_penalty: float = 1.0, tokenizer: Any = None) -> RewardFn:
    """Reward function applying `length_penalty` to each completion (characters, or tokens with a tokenizer).

    >>> fn = make_length_reward(max_len=10, target_len=5)
    >>> [(r.score, r.reason) for r in fn([Problem("q", "a")] * 2, ["abc", "abcdefgh"])]
    [(0.0, ''), (-0.6, 'too long: 8 chars > target 5')]
    """
    length_penalty(0, max_len, target_len, max_penalty)  # validate now, by name
    unit = "chars" if tokenizer is None else "tokens"

    def reward(problems: list[Problem], completions: list[str]) -> list[RewardResult]:
        results = []
        for c in completions:
            n = text_length(c, tokenizer)
            p = length_penalty(n, max_len, target_len, max_penalty)
            results.append(RewardResult(p, f"too long: {n} {unit} > target {target_len}" if p < 0 else "", {"length": float(n)}))
        return results

    return reward


def make_soft_overlong_reward(max_len: int, cache_len: int, tokenizer: Any = None) -> RewardFn:
    """Reward function applying `soft_overlong_reward` (characters, or tokens with a tokenizer).

    >>> fn = make_soft_overlong_reward(max_len=8, cache_len=4)
    >>> [r.score for r in fn([Problem("q", "a")] * 3, ["abc", "abcdef", "abcdefghij"])]
    [0.0, -0.5, -1.0]
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(f"soft overlong: need 0 < cache_len <= max_len (got {cache_len}, {max_len})")
    unit = "chars" if tokenizer is None else "tokens"

    def reward(problems: list[Problem], completions: list[str]) -> list[RewardResult]:
        return soft_overlong_reward([text_length(c, tokenizer) for c in completions], max_len, cache_len, unit)

    return reward
