"""Best-of-N: sample N solutions per problem, pick one by a rule, and account for every token and second.

Selection rules (`SELECT`):

* ``first``: the first sample (what pass@1 / greedy-free sampling would give);
* ``majority``: the most frequent final answer (self-consistency); its first sample;
* ``max``: the sample with the highest aggregated scorer score;
* ``weighted``: the answer with the largest sum of aggregated scores over the samples that give it
  (search-and-learn's weighted best-of-N); its best-scored sample.

Ties go to the earliest sample (for answers: the answer seen first), so a selection depends only on
the order of the samples. Samples without an answer take no part in votes; with no answer at all, a
vote falls back to the first sample. A sample with no steps, or too long for the scorer's context,
scores 0 (counted).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from seqrl.answers import answer_key
from seqrl.core.metrics import majority_vote
from seqrl.core.search import AGGREGATIONS, aggregate_step_scores, weighted_vote
from seqrl.models.lm import Policy
from seqrl.models.prm import StepsTooLongError
from seqrl.rollout import SamplingParams, generate
from seqrl.types import Problem, Task, extract_answer

SELECT = ("first", "majority", "max", "weighted")


class Scorer(Protocol):
    """Per-step scores of solutions (a PRM, an ORM, a verifier); `tokens_scored` counts its input tokens."""

    tokens_scored: int

    def score(self, problems: Sequence[Problem | str], solutions: Sequence[str]) -> list[list[float]]: ...


class Sampler(Protocol):
    """N solutions per problem and the number of tokens generated for them."""

    def sample(self, problems: Sequence[Problem], n: int) -> tuple[list[list[str]], int]: ...


@dataclass
class PolicySampler:
    """A `Policy` sampled through the rollout engine, `batch_size` sequences per call."""

    policy: Policy
    params: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=1.0, max_new_tokens=64))
    batch_size: int = 256

    def sample(self, problems: Sequence[Problem], n: int) -> tuple[list[list[str]], int]:
        per_call = max(1, self.batch_size // n)
        out: list[list[str]] = []
        tokens = 0
        for start in range(0, len(problems), per_call):
            chunk = problems[start:start + per_call]
            ro = generate(self.policy, self.policy.encode_prompts(chunk), n, self.params)
            out += [ro.texts[j * n:(j + 1) * n] for j in range(len(chunk))]  # rows grouped by prompt
            tokens += ro.num_generated_tokens
        return out, tokens


@dataclass
class VerifierScorer:
    """The task's verifier as a scorer (an oracle: one score per solution, 1 correct / 0 not)."""

    task: Task
    tokens_scored: int = 0

    def score(self, problems: Sequence[Problem], solutions: Sequence[str]) -> list[list[float]]:
        return [[float(self.task.verify(p, s).correct)] for p, s in zip(problems, solutions)]


@dataclass
class Account:
    """What a best-of-N call cost."""

    generated_tokens: int = 0
    scorer_tokens: int = 0
    gen_s: float = 0.0
    score_s: float = 0.0
    other_s: float = 0.0
    """Everything else: answer extraction, voting, verification, bookkeeping."""
    total_s: float = 0.0
    empty_solutions: int = 0
    """Samples with no steps, or too long for the scorer (scored 0)."""
    too_long: int = 0
    """Samples too long for the scorer's context (among `empty_solutions`)."""


@dataclass
class BestOfN:
    """Chosen solutions (one per problem) with everything needed to check them."""

    chosen: list[str]
    chosen_index: list[int]
    candidates: list[list[str]]
    answers: list[list[str | None]]
    scores: list[list[float]] | None
    """Aggregated scorer score per candidate (None without a scorer)."""
    correct: list[bool] | None
    """Whether each chosen solution verifies (when a task was given)."""
    account: Account

    @property
    def accuracy(self) -> float:
        if self.correct is None:
            raise ValueError("accuracy needs the task (best_of_n(..., task=...))")
        return sum(self.correct) / max(len(self.correct), 1)


def score_safely(scorer: Scorer, problems: Sequence[Problem], solutions: Sequence[str]) -> tuple[list[list[float]], int]:
    """`scorer.score`, except that a solution too long for a reward model's context scores ``[]``
    (so it aggregates to 0) instead of stopping the search; returns (scores, how many were too long)."""
    try:
        return scorer.score(problems, solutions), 0
    except StepsTooLongError:
        out, too_long = [], 0
        for p, s in zip(problems, solutions):
            try:
                out.append(scorer.score([p], [s])[0])
            except StepsTooLongError:
                out.append([])
                too_long += 1
        return out, too_long


def choose(answers: Sequence[str | None], scores: Sequence[float] | None, select: str) -> int:
    """Index of the selected sample (see the module docstring).

    >>> choose(["3", "4", "4"], None, "majority"), choose(["3", "4", "4"], [0.9, 0.5, 0.3], "max")
    (1, 0)
    >>> choose(["3", "4", "4"], [0.9, 0.5, 0.3], "weighted")   # 3: 0.9 beats 4: 0.5 + 0.3
    0
    >>> choose(["999", "1,000", "1000.0"], [0.6, 0.5, 0.3], "weighted")   # one answer, 1000: 0.8 > 0.6
    1
    """
    if select not in SELECT:
        raise ValueError(f"select must be one of {SELECT} (got {select!r})")
    if select == "first":
        return 0
    if select == "majority":
        winner, _ = majority_vote(list(answers), key=answer_key)
        return 0 if winner is None else list(answers).index(winner)
    if scores is None:
        raise ValueError(f"select={select!r} needs a scorer")
    if select == "max":
        return max(range(len(scores)), key=lambda i: (scores[i], -i))
    winner, _ = weighted_vote(answers, scores, key=answer_key)
    if winner is None:
        return 0
    won = answer_key(winner)
    return max((i for i, a in enumerate(answers) if a is not None and answer_key(a) == won),
               key=lambda i: (scores[i], -i))


def scored_solutions(scorer: Scorer, problems: Sequence[Problem], texts: Sequence[str], aggregation: str,
                     account: Account) -> list[float]:
    """One score per solution: its per-step scores (`score_safely`: too long for the scorer's context
    scores 0) aggregated by `aggregation`; a solution with no step scores 0 (counted in
    ``account.empty_solutions``). Adds the scorer's tokens and time to `account`."""
    if not texts:
        return []
    t = time.perf_counter()
    before = scorer.tokens_scored
    per_step, too_long = score_safely(scorer, list(problems), list(texts))
    account.too_long += too_long
    account.scorer_tokens += scorer.tokens_scored - before
    account.score_s += time.perf_counter() - t
    account.empty_solutions += sum(1 for s in per_step if not s)
    return [aggregate_step_scores(s, aggregation) if s else 0.0 for s in per_step]


def best_of_n(problems: Sequence[Problem], policy: Policy | Sampler, n: int, scorer: Scorer | None = None,
              select: str = "first", aggregation: str = "last", task: Task | None = None,
              params: SamplingParams | None = None) -> BestOfN:
    """Sample `n` solutions per problem from `policy` (a `Policy`, or any `Sampler`), score them with
    `scorer` (per-step scores aggregated with `aggregation`), pick one per problem by `select`, and
    verify the choice with `task` when given. The account splits the wall time into generation,
    scoring and the rest."""
    if n < 1:
        raise ValueError(f"best_of_n: n must be >= 1 (got {n})")
    if select not in SELECT:
        raise ValueError(f"best_of_n: select must be one of {SELECT} (got {select!r})")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"best_of_n: aggregation must be one of {AGGREGATIONS} (got {aggregation!r})")
    if select in ("max", "weighted") and scorer is None:
        raise ValueError(f"best_of_n: select={select!r} needs a scorer")
    if not problems:
        raise ValueError("best_of_n needs at least one problem")
    sampler = PolicySampler(policy, params or SamplingParams()) if isinstance(policy, Policy) else policy
    account = Account()
    t0 = time.perf_counter()

    t = time.perf_counter()
    candidates, account.generated_tokens = sampler.sample(list(problems), n)
    account.gen_s = time.perf_counter() - t
    if len(candidates) != len(problems) or any(len(c) != n for c in candidates):
        raise ValueError(f"best_of_n: the sampler returned {[len(c) for c in candidates]} samples for "
                         f"{len(problems)} problems × {n}")

    flat_scores = None
    if scorer is not None:  # problem i's n samples, in order
        flat_scores = scored_solutions(scorer, [p for p in problems for _ in range(n)],
                                       [s for c in candidates for s in c], aggregation, account)

    extract = task.extract_answer if task is not None else extract_answer
    answers = [[extract(s) for s in c] for c in candidates]
    scores = None if flat_scores is None else [flat_scores[i * n:(i + 1) * n] for i in range(len(problems))]
    index = [choose(a, None if scores is None else scores[i], select) for i, a in enumerate(answers)]
    chosen = [c[k] for c, k in zip(candidates, index)]
    correct = None if task is None else [task.verify(p, s).correct for p, s in zip(problems, chosen)]
    account.total_s = time.perf_counter() - t0
    account.other_s = max(0.0, account.total_s - account.gen_s - account.score_s)
    return BestOfN(chosen, index, candidates, answers, scores, correct, account)


def best_of_n_with_prm(question: str, candidates: Sequence[str], aggregation: str = "min", *, prm: Scorer
                       ) -> tuple[str, list[float]]:
    """The candidate solution of `question` with the highest aggregated PRM score, and every
    candidate's score (ties: the earliest)."""
    if not candidates:
        raise ValueError("best_of_n_with_prm needs at least one candidate")
    step_scores = prm.score([question] * len(candidates), list(candidates))
    scores = [aggregate_step_scores(s, aggregation) if s else 0.0 for s in step_scores]
    best = max(range(len(scores)), key=lambda i: (scores[i], -i))
    return candidates[best], scores
