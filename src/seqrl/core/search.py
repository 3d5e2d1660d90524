"""Search math: step-score aggregation, score-weighted voting, and the AUC of a scorer.

Aggregations of a solution's per-step scores s_1..s_T (Lightman et al. 2023 use the product; Math-
Shepherd the minimum; Snell et al. 2024 found the last step's score best for search):

    min:  min_t s_t        last: s_T        prod: Π_t s_t        mean: (1/T) Σ_t s_t
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

AGGREGATIONS = ("min", "last", "prod", "mean")


class EmptyStepsError(ValueError):
    """A solution with no steps has no score to aggregate."""


def aggregate_step_scores(scores: Sequence[float], how: str) -> float:
    """One solution score from its step scores (`AGGREGATIONS`); an empty list is `EmptyStepsError`.

    >>> [aggregate_step_scores([0.9, 0.5, 0.8], h) for h in AGGREGATIONS]  # prod: 0.9·0.5·0.8
    [0.5, 0.8, 0.36000000000000004, 0.7333333333333334]
    """
    if how not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS} (got {how!r})")
    if len(scores) == 0:
        raise EmptyStepsError(f"cannot aggregate ({how}) the scores of a solution with no steps")
    if how == "min":
        return float(min(scores))
    if how == "last":
        return float(scores[-1])
    if how == "prod":
        return float(math.prod(scores))
    return float(math.fsum(scores) / len(scores))


def weighted_vote(answers: Sequence[str | None], weights: Sequence[float],
                  key: Callable[[str], Hashable] | None = None) -> tuple[str | None, float]:
    """The answer with the largest summed weight (search-and-learn's weighted best-of-N) and that sum.

    None answers take no part. Ties (equal sums) go to the answer that appears first, so the result
    depends only on the order of the candidates, never on hashing. With `key`, answers with the same
    key pool their weights (the winner is the first seen of the winning key's answers).

    >>> weighted_vote(["3", "4", "3", None], [0.2, 0.5, 0.2, 9.0])   # 3: 0.4, 4: 0.5
    ('4', 0.5)
    >>> weighted_vote(["4", "3", "3"], [0.5, 0.25, 0.25])            # tie 0.5 = 0.5: first seen
    ('4', 0.5)
    >>> weighted_vote([None], [1.0])
    (None, 0.0)
    """
    if len(answers) != len(weights):
        raise ValueError(f"weighted_vote: {len(answers)} answers for {len(weights)} weights")
    totals: dict = {}
    first: dict = {}
    for a, w in zip(answers, weights):
        if a is not None:
            k = a if key is None else key(a)
            totals.setdefault(k, []).append(float(w))
            first.setdefault(k, a)
    if not totals:
        return None, 0.0
    sums = {k: math.fsum(ws) for k, ws in totals.items()}  # dicts keep first-seen order
    best = max(sums.values())
    winner = next(k for k, s in sums.items() if s == best)
    return first[winner], best


def binary_auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve: P(score of a random positive > score of a random negative), ties
    counted ½ (the Mann–Whitney U statistic ÷ n_pos·n_neg). NaN when one class is absent.

    >>> binary_auc([0.9, 0.4, 0.4, 0.1], [True, True, False, False])   # pairs: 1, 1, ½, 1 → 3.5/4
    0.875
    """
    if len(scores) != len(labels):
        raise ValueError(f"binary_auc: {len(scores)} scores for {len(labels)} labels")
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):  # average ranks (1-based) over runs of equal scores
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    n_pos = sum(bool(x) for x in labels)
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    rank_sum = math.fsum(r for r, y in zip(ranks, labels) if y)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def step_label_loss(logits, targets, head: str):
    """Mean cross-entropy of step scores against (possibly soft) labels y ∈ [0, 1].

    2class: logits (N, 2), p = softmax(logits)₁, loss = −[y·log p₁ + (1−y)·log p₀]
    scalar: logits (N, 1), p = σ(logit),        loss = −[y·log p + (1−y)·log(1−p)]  (BCE with logits)
    targets: (N,) floats. An empty batch (N = 0) gives 0 with a gradient path, not NaN.
    """
    import torch
    import torch.nn.functional as F

    if logits.shape[0] == 0:
        return logits.sum() * 0.0
    y = targets.to(torch.float32)  # (N,)
    if head == "2class":
        logp = logits.float().log_softmax(-1)  # (N, 2)
        return -(y * logp[:, 1] + (1 - y) * logp[:, 0]).mean()
    if head == "scalar":
        return F.binary_cross_entropy_with_logits(logits.float()[:, 0], y)
    raise ValueError(f"head must be '2class' or 'scalar' (got {head!r})")


def uct_score(q: float, parent_visits: int, child_visits: int, c: float = 1.0) -> float:
    """UCT (Kocsis & Szepesvári 2006): Q(s,a) + c·sqrt(ln N(s) / N(s,a)); an unvisited child is +inf.

    >>> round(uct_score(0.5, 10, 2, c=1.0), 6)   # 0.5 + sqrt(ln 10 / 2) = 0.5 + 1.072983
    1.572983
    >>> uct_score(0.0, 10, 0)
    inf
    """
    if child_visits == 0:
        return math.inf
    return q + c * math.sqrt(math.log(max(parent_visits, 1)) / child_visits)


def puct_score(q: float, prior: float, parent_visits: int, child_visits: int,
               c_init: float = 1.25, c_base: float = 19652.0) -> float:
    """PUCT as in AlphaZero / MuZero (Schrittwieser et al. 2020, eq. 2):

        Q(s,a) + P(s,a) · sqrt(N(s)) / (1 + N(s,a)) · (c_init + log((N(s) + c_base + 1) / c_base))

    >>> round(puct_score(0.5, 0.25, 16, 3), 6)   # 0.5 + 0.25·4/4·(1.25 + log(19669/19652)) = 0.5 + 0.312716
    0.812716
    """
    c = c_init + math.log((parent_visits + c_base + 1) / c_base)
    return q + prior * math.sqrt(parent_visits) / (1 + child_visits) * c


def softmax_priors(mean_logprobs: Sequence[float]) -> list[float]:
    """Priors P(s,·) over sibling steps from each step's mean token log-probability: softmax, so a
    step's prior does not depend on its length.

    >>> [round(p, 6) for p in softmax_priors([math.log(0.2), math.log(0.6)])]
    [0.25, 0.75]
    """
    if not mean_logprobs:
        return []
    top = max(mean_logprobs)
    weights = [math.exp(x - top) for x in mean_logprobs]
    total = math.fsum(weights)
    return [w / total for w in weights]
