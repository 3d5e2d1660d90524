"""Step-level search guided by a scorer: beam search and diverse verifier tree search (DVTS).

Semantics of search-and-learn (Snell et al. 2024; Beeching et al. 2024), for N solutions per problem
and beam width M:

* **beam**: round 0 samples N first steps; every round scores each candidate (its partial solution,
  step scores aggregated with ``last`` by default), sets completed ones aside, keeps the best N/M of the
  rest, and expands them into N candidates again (M each; when completions left fewer than N/M beams,
  the kept ones share the N expansions, the better-scored first, as search-and-learn repeats its active
  beams up to N). Identical candidates stay separate beams by default, as in search-and-learn
  (``filter_duplicates`` off): a step the policy samples often keeps that weight in the search, where
  merging gives every distinct prefix the same share of the budget (``merge_duplicates=True``). It stops
  when N solutions are complete, no beam is left, or after ``max_steps`` rounds (unfinished beams then
  join the pool).
* **dvts**: N/M independent subtrees; each keeps only its best of M candidates per round, and ends
  when that best is complete; every one of the M candidates of its last round joins the pool (finished
  or not, as search-and-learn returns them), so the pool holds N solutions, not N/M.
* **lookahead k**: a candidate is scored after rolling it k more steps greedily (the rolled steps are
  scored, not kept; their tokens count in the budget).

The final pick among the pool uses the best-of-N rules (`seqrl.search.best_of_n.choose`, weighted by
default). The scorer sees only the problem and the partial solution: the gold answer is never used. A
candidate too long for the scorer's context scores 0, as in best-of-N (`Account.too_long` counts it),
and the search goes on (MCTS values nodes the same way).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from seqrl.core.search import AGGREGATIONS
from seqrl.search.best_of_n import SELECT, Account, Scorer, choose, scored_solutions
from seqrl.search.steps import Stepper
from seqrl.types import Problem, Task, extract_answer


@dataclass
class Beam:
    text: str
    """The partial (or complete) solution so far."""
    score: float = 0.0
    complete: bool = False
    group: int = 0
    """DVTS subtree (0 for beam search)."""


@dataclass
class SearchResult:
    """Chosen solutions (one per problem), the pool each was chosen from, and the cost."""

    chosen: list[str]
    pools: list[list[Beam]]
    correct: list[bool] | None
    account: Account
    rounds: int = 0
    stats: dict[str, float] = field(default_factory=dict)
    oracle: bool = False
    """Terminal nodes were valued with the task's verifier (training-data generation, not test-time search)."""

    @property
    def accuracy(self) -> float:
        if self.correct is None:
            raise ValueError("accuracy needs the task")
        return sum(self.correct) / max(len(self.correct), 1)


def _expand(stepper: Stepper, problems: Sequence[Problem], prefixes: Sequence[str], n: int, account: Account,
            greedy: bool = False):
    t = time.perf_counter()
    before = stepper.generated_tokens
    steps = stepper.next_steps(list(problems), list(prefixes), n, greedy=greedy)
    account.generated_tokens += stepper.generated_tokens - before
    account.gen_s += time.perf_counter() - t
    return steps


def tree_search(problems: Sequence[Problem], stepper: Stepper, scorer: Scorer, n: int, beam_width: int,
                method: str = "beam", max_steps: int = 8, lookahead: int = 0, aggregation: str = "last",
                select: str = "weighted", task: Task | None = None, merge_duplicates: bool = False) -> SearchResult:
    """Beam search or DVTS (`method`) for every problem at once (one stepper call per round and width).

    n: N solutions per problem; beam_width: M (N must be a multiple of M); merge_duplicates: beam search
    keeps one of identical partial solutions (each distinct prefix then gets an equal share)."""
    if method not in ("beam", "dvts"):
        raise ValueError(f"method must be 'beam' or 'dvts' (got {method!r})")
    if n < 1 or beam_width < 1 or n % beam_width:
        raise ValueError(f"n ({n}) must be a positive multiple of beam_width ({beam_width})")
    if aggregation not in AGGREGATIONS or select not in SELECT:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS} and select one of {SELECT}")
    if max_steps < 1 or lookahead < 0:
        raise ValueError(f"max_steps must be >= 1 and lookahead >= 0 (got {max_steps}, {lookahead})")
    problems = list(problems)
    account = Account()
    t0 = time.perf_counter()
    keep = n // beam_width  # beam: beams kept per round; dvts: number of subtrees
    active: list[list[Beam]] = [[Beam("")] for _ in problems]  # round 0: the empty solution, expanded n times
    done: list[list[Beam]] = [[] for _ in problems]
    last: list[list[Beam]] = [[] for _ in problems]  # each problem's candidates of the latest round
    rounds = 0
    for rounds in range(1, max_steps + 1):
        requests = [(i, b) for i, beams in enumerate(active) for b in beams]
        if not requests:
            break
        widths = [n] * len(requests) if rounds == 1 else _widths(active, n, beam_width, method)
        steps = _expand_widths(stepper, [problems[i] for i, _ in requests], [b.text for _, b in requests], widths,
                               account)
        candidates: list[list[Beam]] = [[] for _ in problems]
        for (i, parent), options in zip(requests, steps):
            for j, step in enumerate(options):
                group = j // beam_width if (method == "dvts" and rounds == 1) else parent.group
                candidates[i].append(Beam(parent.text + step.text, complete=step.terminal, group=group))
        # score every candidate (after k greedy steps ahead for unfinished ones)
        flat = [(i, c) for i, cs in enumerate(candidates) for c in cs]
        texts = [c.text for _, c in flat]
        closed = [c.complete for _, c in flat]
        for _ in range(lookahead):
            open_rows = [r for r in range(len(flat)) if not closed[r]]
            if not open_rows:
                break
            ahead = _expand(stepper, [problems[flat[r][0]] for r in open_rows], [texts[r] for r in open_rows], 1,
                            account, greedy=True)
            for r, (step,) in zip(open_rows, ahead):
                texts[r] += step.text
                closed[r] = step.terminal
        scores = scored_solutions(scorer, [problems[i] for i, _ in flat], texts, aggregation, account)
        for (_, c), s in zip(flat, scores):
            c.score = s
        for i, cs in enumerate(candidates):
            last[i] = cs
            active[i] = _select(cs, done[i], keep, method, n, merge_duplicates)
    for i in range(len(problems)):  # unfinished beams join the pool when too few solutions completed
        if method == "dvts":  # an unfinished subtree: its last round's M candidates
            open_groups = {b.group for b in active[i]}
            done[i] += [c for c in last[i] if c.group in open_groups]
        elif len(done[i]) < n:
            done[i] += active[i]
    chosen = []
    for pool in done:
        if not pool:
            chosen.append("")
            continue
        answers = [task.extract_answer(b.text) if task is not None else extract_answer(b.text) for b in pool]
        chosen.append(pool[choose(answers, [b.score for b in pool], select)].text)
    correct = None if task is None else [task.verify(p, c).correct for p, c in zip(problems, chosen)]
    account.total_s = time.perf_counter() - t0
    account.other_s = max(0.0, account.total_s - account.gen_s - account.score_s)
    return SearchResult(chosen, done, correct, account, rounds)


def _widths(active: list[list[Beam]], n: int, beam_width: int, method: str) -> list[int]:
    """Expansions of each active beam, in request order: DVTS expands each subtree's beam M times; beam
    search spreads N expansions over a problem's kept beams (best first), M each when N/M are kept.

    >>> b = [Beam("a"), Beam("b")]
    >>> _widths([b, b[:1], []], 8, 4, "beam"), _widths([b], 8, 4, "dvts"), _widths([[Beam("a")] * 3], 8, 4, "beam")
    ([4, 4, 8], [4, 4], [3, 3, 2])
    """
    if method == "dvts":
        return [beam_width for beams in active for _ in beams]
    return [n // len(beams) + (j < n % len(beams)) for beams in active for j in range(len(beams))]


def _expand_widths(stepper: Stepper, problems: Sequence[Problem], prefixes: Sequence[str], widths: Sequence[int],
                   account: Account):
    """`_expand` with a width per prefix: one stepper call per distinct width, results in request order."""
    out: list = [None] * len(prefixes)
    for w in sorted(set(widths)):
        idx = [k for k, x in enumerate(widths) if x == w]
        for k, steps in zip(idx, _expand(stepper, [problems[k] for k in idx], [prefixes[k] for k in idx], w, account)):
            out[k] = steps
    return out


def _select(candidates: list[Beam], done: list[Beam], keep: int, method: str, n: int,
            merge_duplicates: bool = False) -> list[Beam]:
    """The beams kept for the next round; completed ones move to `done`. Ties go to the earlier one."""
    order = sorted(range(len(candidates)), key=lambda k: (-candidates[k].score, k))
    if method == "dvts":
        kept = []
        for g in sorted({c.group for c in candidates}):
            best = next(candidates[k] for k in order if candidates[k].group == g)
            if best.complete:  # the subtree ends: its M candidates of this round join the pool, best first
                done += [candidates[k] for k in order if candidates[k].group == g]
            else:
                kept.append(best)
        return kept
    for k in order:
        if candidates[k].complete and len(done) < n:
            done.append(candidates[k])
    if len(done) >= n:
        return []
    kept, seen = [], set()
    for k in order:
        c = candidates[k]
        if c.complete or (merge_duplicates and c.text in seen):
            continue
        seen.add(c.text)
        kept.append(c)
        if len(kept) == keep:
            break
    return kept


def beam_search(problems, stepper, scorer, n: int = 16, beam_width: int = 4, **kw) -> SearchResult:
    """`tree_search` with method beam."""
    return tree_search(problems, stepper, scorer, n, beam_width, method="beam", **kw)


def dvts(problems, stepper, scorer, n: int = 16, beam_width: int = 4, **kw) -> SearchResult:
    """`tree_search` with method dvts (N/M subtrees)."""
    return tree_search(problems, stepper, scorer, n, beam_width, method="dvts", **kw)
