"""Evaluation math: the unbiased pass@k estimator and majority voting."""

from __future__ import annotations

from collections import Counter
from math import comb


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021, eq. 1).

    pass@k = 1 − C(n−c, k) / C(n, k): the chance that k samples drawn without replacement from
    the n contain at least one correct one.

    >>> pass_at_k(4, 1, 1)
    0.25
    >>> pass_at_k(4, 1, 2)   # 1 - C(3,2)/C(4,2) = 1 - 3/6
    0.5
    >>> pass_at_k(5, 0, 3), pass_at_k(5, 3, 3)   # none correct; n - c < k so a hit is certain
    (0.0, 1.0)
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n (got n={n}, c={c})")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n (got k={k}, n={n})")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def majority_vote(answers: list[str | None]) -> tuple[str | None, int]:
    """The most frequent non-None answer and its count; ties go to the answer seen first.

    >>> majority_vote(["3", None, "4", "4", "3"])
    ('3', 2)
    >>> majority_vote([None, None])
    (None, 0)
    """
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None, 0
    best = max(counts.values())
    winner = next(a for a in answers if a is not None and counts[a] == best)
    return winner, best
