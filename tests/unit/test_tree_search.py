"""Beam search, DVTS and MCTS on fake trees: a fake stepper with known children, a fake scorer with
known values, so what each search keeps and finds can be checked exactly."""

from __future__ import annotations

import pytest

from seqrl.search.best_of_n import choose
from seqrl.search.mcts import mcts
from seqrl.search.steps import Step
from seqrl.search.tree import beam_search, dvts, tree_search
from seqrl.types import Problem, RewardResult, Task, extract_answer

SEP = "\n\n"


class FakeStepper:
    """Children of each prefix from a table; the k-th sample of a prefix is its (k mod #children)-th
    child. Tokens = characters."""

    def __init__(self, tree: dict[str, list[str]], logprobs: dict[str, float] | None = None):
        self.tree, self.logprobs = tree, logprobs or {}
        self.generated_tokens = 0
        self.emitted = 0
        self.calls: list[tuple[list[str], int]] = []

    def next_steps(self, problems, prefixes, n, greedy=False):
        self.calls.append((list(prefixes), n))
        out = []
        for prefix in prefixes:
            kids = self.tree[prefix]
            row = []
            for k in range(1 if greedy else n):
                text = kids[0 if greedy else k % len(kids)]
                self.generated_tokens += len(text)
                self.emitted += len(text)
                row.append(Step(text, "</answer>" in text, "eos" if "</answer>" in text else "stop_string",
                                len(text), self.logprobs.get(prefix + text, -1.0)))
            out.append(row)
        return out

    def finish(self, problems, prefixes):
        raise AssertionError("not used")


class FakeScorer:
    def __init__(self, values: dict[str, float]):
        self.values, self.tokens_scored, self.seen = values, 0, []

    def score(self, problems, solutions):
        self.seen += list(solutions)
        self.tokens_scored += sum(len(s) for s in solutions)
        return [[self.values[s]] for s in solutions]


class SpyTask(Task):
    name = "spy"

    def __init__(self):
        self.calls = 0

    def problems(self, split, n, seed=0):
        return [Problem("q", "9")] * n

    def verify(self, problem, completion):
        self.calls += 1
        ok = extract_answer(completion) == problem.answer
        return RewardResult(float(ok), "" if ok else "wrong")


# root → A (0.6) → answers 1 (0.1), 2 (0.2); root → B (0.5) → answers 9 (0.95), 8 (0.3)
TRAP = {"": ["A" + SEP, "B" + SEP],
        "A" + SEP: ["<answer>1</answer>", "<answer>2</answer>"],
        "B" + SEP: ["<answer>9</answer>", "<answer>8</answer>"]}
TRAP_VALUES = {"A" + SEP: 0.6, "B" + SEP: 0.5, "A\n\n<answer>1</answer>": 0.1, "A\n\n<answer>2</answer>": 0.2,
               "B\n\n<answer>9</answer>": 0.95, "B\n\n<answer>8</answer>": 0.3}


def test_mcts_finds_the_best_leaf_behind_a_worse_first_step_that_greedy_search_misses():
    problem = [Problem("q", "9")]
    greedy = beam_search(problem, FakeStepper(TRAP), FakeScorer(TRAP_VALUES), n=2, beam_width=2, select="max")
    assert extract_answer(greedy.chosen[0]) == "2"  # kept A (0.6 > 0.5), never saw B's leaves
    for rule in ("puct", "uct"):
        found = mcts(problem, FakeStepper(TRAP), FakeScorer(TRAP_VALUES), simulations=3, width=2, rule=rule, select="max")
        assert extract_answer(found.chosen[0]) == "9", rule  # within 3 simulations
        assert {b.text for b in found.pools[0]} == {"A\n\n<answer>1</answer>", "A\n\n<answer>2</answer>",
                                                    "B\n\n<answer>9</answer>", "B\n\n<answer>8</answer>"}


def test_mcts_backs_up_the_mean_of_evaluated_values():
    stepper, scorer = FakeStepper(TRAP), FakeScorer(TRAP_VALUES)
    result = mcts([Problem("q", "9")], stepper, scorer, simulations=2, width=2, rule="puct", select="visits")
    # sim 1 expands the root (A 0.6, B 0.5); sim 2 picks A (equal priors, higher Q) and expands it:
    # A's visits 1 + 2, total 0.6 + 0.1 + 0.2 → Q 0.3; its most visited path ends at a terminal leaf
    assert stepper.calls == [([""], 2), (["A" + SEP], 2)]
    assert result.account.generated_tokens == stepper.emitted
    assert result.account.scorer_tokens == scorer.tokens_scored
    assert result.chosen[0] in ("A\n\n<answer>1</answer>", "A\n\n<answer>2</answer>")


def _wide_tree():
    # root has 4 children with distinct scores; each has 2 terminal children
    kids = ["c0" + SEP, "c1" + SEP, "c2" + SEP, "c3" + SEP]
    tree = {"": kids}
    values = {k: v for k, v in zip(kids, [0.1, 0.9, 0.5, 0.7])}
    for j, k in enumerate(kids):
        tree[k] = [f"<answer>{j}{m}</answer>" for m in range(2)]
        for m in range(2):
            values[k + f"<answer>{j}{m}</answer>"] = 0.3 + 0.1 * m + 0.01 * j
    return tree, values


def test_beam_search_keeps_exactly_the_n_over_m_best_per_round():
    tree, values = _wide_tree()
    stepper, scorer = FakeStepper(tree), FakeScorer(values)
    result = beam_search([Problem("q", "1")], stepper, scorer, n=4, beam_width=2)
    # round 1: 4 samples of the root; the best 2 (c1 0.9, c3 0.7) are kept and each expanded 2 times
    assert stepper.calls == [([""], 4), (["c1" + SEP, "c3" + SEP], 2)]
    assert sorted(b.text for b in result.pools[0]) == sorted(
        ["c1\n\n<answer>10</answer>", "c1\n\n<answer>11</answer>", "c3\n\n<answer>30</answer>", "c3\n\n<answer>31</answer>"])
    assert all(b.complete for b in result.pools[0])
    assert result.account.generated_tokens == stepper.emitted and result.account.scorer_tokens == scorer.tokens_scored
    answers = [extract_answer(b.text) for b in result.pools[0]]
    assert result.chosen[0] == result.pools[0][choose(answers, [b.score for b in result.pools[0]], "weighted")].text


def test_dvts_keeps_the_best_of_each_subtree():
    tree, values = _wide_tree()
    stepper = FakeStepper(tree)
    result = dvts([Problem("q", "1")], stepper, FakeScorer(values), n=4, beam_width=2)
    # subtrees {c0, c1} and {c2, c3}: their bests c1 and c3 go on, one expansion of 2 each; each subtree's
    # 2 candidates of that last round join the pool: N = 4 solutions, as search-and-learn returns
    assert stepper.calls[1] == (["c1" + SEP, "c3" + SEP], 2)
    assert sorted(b.text for b in result.pools[0]) == ["c1\n\n<answer>10</answer>", "c1\n\n<answer>11</answer>",
                                                       "c3\n\n<answer>30</answer>", "c3\n\n<answer>31</answer>"]
    assert result.chosen[0] == "c3\n\n<answer>31</answer>"  # the highest score: 0.3 + 0.1 + 0.03


def test_lookahead_scores_the_rolled_out_path_and_counts_its_tokens():
    tree, values = _wide_tree()
    stepper, scorer = FakeStepper(tree), FakeScorer(values)
    result = tree_search([Problem("q", "1")], stepper, scorer, 4, 2, lookahead=1)
    # round 1 candidates are scored after one greedy step (their first child), not as they are
    assert "c0\n\n<answer>00</answer>" in scorer.seen and "c0" + SEP not in scorer.seen
    assert result.account.generated_tokens == stepper.emitted


def test_duplicates_are_merged_and_ties_go_to_the_earlier_candidate():
    tree = {"": ["x" + SEP, "x" + SEP, "y" + SEP, "z" + SEP],
            **{k + SEP: [f"<answer>{k}</answer>"] for k in "xyz"}}
    values = {"x" + SEP: 0.5, "y" + SEP: 0.5, "z" + SEP: 0.1,
              **{f"{k}{SEP}<answer>{k}</answer>": 0.5 for k in "xyz"}}
    stepper = FakeStepper(tree)
    beam_search([Problem("q", "1")], stepper, FakeScorer(values), n=4, beam_width=2, merge_duplicates=True)
    assert stepper.calls[1] == (["x" + SEP, "y" + SEP], 2)  # x once (merged), then y (tie with x: earlier first)


def test_identical_candidates_stay_separate_beams_by_default():
    """search-and-learn's default (filter_duplicates off): a step sampled 3 times out of 4 fills both kept
    places, where merging hands one of them to the step sampled once."""
    tree = {"": ["x" + SEP, "x" + SEP, "x" + SEP, "y" + SEP],
            **{k + SEP: [f"<answer>{k}</answer>"] for k in "xy"}}
    values = {"x" + SEP: 0.9, "y" + SEP: 0.5, **{f"{k}{SEP}<answer>{k}</answer>": 0.5 for k in "xy"}}
    stepper = FakeStepper(tree)
    beam_search([Problem("q", "1")], stepper, FakeScorer(values), n=4, beam_width=2)
    assert stepper.calls[1] == (["x" + SEP, "x" + SEP], 2)
    stepper = FakeStepper(tree)
    beam_search([Problem("q", "1")], stepper, FakeScorer(values), n=4, beam_width=2, merge_duplicates=True)
    assert stepper.calls[1] == (["x" + SEP, "y" + SEP], 2)


def test_fewer_distinct_beams_than_n_over_m_share_the_n_expansions():
    """When merging (or completions) leave fewer than N/M beams, the kept ones share N expansions (the best-scored
    first), so every round generates N candidates and the pool holds N solutions, as search-and-learn
    repeats its active beams up to N."""
    answers = {k + SEP: [f"<answer>{k}{j}</answer>" for j in range(2)] for k in "xyz"}
    values = {**{k + SEP: v for k, v in zip("xyz", (0.9, 0.5, 0.1))},
              **{f"{k}{SEP}<answer>{k}{j}</answer>": 0.5 for k in "xyz" for j in range(2)}}
    stepper = FakeStepper({"": ["x" + SEP] * 2, **answers})  # one distinct first step where N/M = 2 are due
    result = beam_search([Problem("q", "1")], stepper, FakeScorer(values), n=4, beam_width=2, merge_duplicates=True)
    assert stepper.calls[1] == (["x" + SEP], 4) and len(result.pools[0]) == 4
    stepper = FakeStepper({"": ["y" + SEP, "x" + SEP, "z" + SEP, "x" + SEP], **answers})
    result = beam_search([Problem("q", "1")], stepper, FakeScorer(values), n=8, beam_width=2, merge_duplicates=True)
    # N/M = 4 due, 3 distinct kept (x 0.9, y 0.5, z 0.1): 8 expansions as 3, 3, 2 — one call per width
    assert stepper.calls[1:] == [(["z" + SEP], 2), (["x" + SEP, "y" + SEP], 3)]
    assert len(result.pools[0]) == 8


def test_search_calls_the_verifier_only_to_grade_its_pick_unless_oracle():
    task = SpyTask()
    mcts([Problem("q", "9")], FakeStepper(TRAP), FakeScorer(TRAP_VALUES), simulations=3, width=2, task=task)
    beam_search([Problem("q", "9")], FakeStepper(TRAP), FakeScorer(TRAP_VALUES), n=2, beam_width=1, task=task)
    assert task.calls == 2  # one grading per search
    oracle = mcts([Problem("q", "9")], FakeStepper(TRAP), FakeScorer(TRAP_VALUES), simulations=3, width=2,
                  task=task, oracle=True)
    assert oracle.oracle and task.calls > 3
    with pytest.raises(ValueError, match="oracle=True needs the task"):
        mcts([Problem("q", "9")], FakeStepper(TRAP), FakeScorer(TRAP_VALUES), oracle=True)


def test_bad_search_settings_are_named():
    with pytest.raises(ValueError, match="multiple of beam_width"):
        beam_search([Problem("q", "1")], FakeStepper(TRAP), FakeScorer(TRAP_VALUES), n=3, beam_width=2)
    with pytest.raises(ValueError, match="rule must be puct or uct"):
        mcts([Problem("q", "1")], FakeStepper(TRAP), FakeScorer(TRAP_VALUES), rule="ucb")


class ShortContextScorer(FakeScorer):
    """A PRM whose context holds at most 24 characters: longer solutions raise as the real one does."""

    def score(self, problems, solutions):
        from seqrl.models.prm import StepsTooLongError

        if any(len(s) > 24 for s in solutions):
            raise StepsTooLongError("solution too long for the context")
        return super().score(problems, solutions)


@pytest.mark.parametrize("search", ["beam", "dvts", "mcts"])
def test_a_candidate_too_long_for_the_scorer_scores_zero_and_the_search_goes_on(search):
    """The B branch's answers (30 characters) do not fit the scorer: they score 0 and are counted, the
    short ones keep their scores, and the search ends with a pick, as best-of-N does."""
    long9, long8 = "so it is <answer>9</answer>", "so it is <answer>8</answer>"
    tree = {"": ["A" + SEP, "B" + SEP], "A" + SEP: ["<answer>1</answer>"], "B" + SEP: [long9, long8]}
    values = {"A" + SEP: 0.6, "B" + SEP: 0.7, "A\n\n<answer>1</answer>": 0.4}
    stepper, scorer = FakeStepper(tree), ShortContextScorer(values)
    if search == "mcts":
        result = mcts([Problem("q", "9")], stepper, scorer, simulations=6, width=2)
    else:
        result = (beam_search if search == "beam" else dvts)([Problem("q", "9")], stepper, scorer, n=4, beam_width=2)
    assert result.account.too_long > 0 and len(result.chosen) == 1
    long_ones = [b for b in result.pools[0] if len(b.text) > 24]
    assert long_ones and all(b.score == 0.0 for b in long_ones)
    assert all(b.score == 0.4 for b in result.pools[0] if b.text.endswith("<answer>1</answer>"))


def test_mcts_never_reselects_a_finished_solution():
    """A finished answer with a high value beside an open step: selection used to walk back to the
    finished leaf every simulation (no growth); now it skips it and expands the open branch."""
    tree = {"": ["<answer>5</answer>", "B" + SEP], "B" + SEP: ["C" + SEP, "D" + SEP],
            "B\n\nC\n\n": ["<answer>9</answer>"], "B\n\nD\n\n": ["<answer>8</answer>"]}
    values = {"<answer>5</answer>": 0.9, "B" + SEP: 0.5, "B\n\nC\n\n": 0.4, "B\n\nD\n\n": 0.3,
              "B\n\nC\n\n<answer>9</answer>": 0.6, "B\n\nD\n\n<answer>8</answer>": 0.2}
    stepper = FakeStepper(tree)
    result = mcts([Problem("q", "9")], stepper, FakeScorer(values), simulations=4, width=2)
    prefixes = [p for call, _ in stepper.calls for p in call]
    assert prefixes[:2] == ["", "B" + SEP] and len(set(prefixes)) == len(prefixes)
    assert "B\n\nC\n\n<answer>9</answer>" in [b.text for b in result.pools[0]]
