"""Evaluation math: the unbiased pass@k estimator, majority voting, and the standard error of a change in
a success rate."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from math import comb, sqrt


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


def majority_vote(answers: list[str | None], key: Callable[[str], Hashable] | None = None
                  ) -> tuple[str | None, int]:
    """The most frequent non-None answer and its count; ties go to the answer seen first. With `key`,
    answers with the same key are one vote (the winner is the first seen of the winning key's answers).

    >>> majority_vote(["3", None, "4", "4", "3"])
    ('3', 2)
    >>> majority_vote(["1,000", "999", "1000", "999"], key=lambda a: a.replace(",", ""))
    ('1,000', 2)
    >>> majority_vote([None, None])
    (None, 0)
    """
    keyed = [None if a is None else (a if key is None else key(a)) for a in answers]
    counts = Counter(k for k in keyed if k is not None)
    if not counts:
        return None, 0
    best = max(counts.values())
    winner = next(a for a, k in zip(answers, keyed) if k is not None and counts[k] == best)
    return winner, best


def rate_diff_se(before: float, after: float, n: int) -> float:
    """Standard error of `after − before` for two success rates, each the mean of `n` Bernoulli outcomes
    drawn independently: sqrt(p₀(1−p₀)/n + p₁(1−p₁)/n).

    For pass@1 over P problems × k samples, n = P·k: the sampling noise given the problems (the same P
    in both evaluations). The binomial form bounds that noise from above, since the mean of the
    per-problem p_i(1−p_i) is at most p̄(1−p̄). For greedy accuracy on P problems, n = P.

    >>> round(rate_diff_se(0.3, 0.4, 3200), 4)   # sqrt(0.21/3200 + 0.24/3200) = sqrt(1.40625e-4)
    0.0119
    >>> rate_diff_se(0.0, 1.0, 10)   # certain outcomes: no noise
    0.0
    """
    if n < 1:
        raise ValueError(f"rate_diff_se needs n >= 1 (got {n})")
    for name, p in (("before", before), ("after", after)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"rate_diff_se needs {name} in [0, 1] (got {p})")
    return sqrt(before * (1 - before) / n + after * (1 - after) / n)
