"""Best-of-N selection and alignment with fakes: problem-specific answers must stay with their problem."""

from __future__ import annotations

import pytest

from seqrl.data import ArithmeticTask
from seqrl.search import VerifierScorer, best_of_n, best_of_n_with_prm, choose
from seqrl.types import Problem, extract_answer


class FakeSampler:
    """Problem i's samples give answers that belong to problem i only: gold, gold+1000, gold+2000 …
    (one gold among n, at position (i mod n)); counts 5 tokens a sample."""

    def __init__(self):
        self.calls = 0

    def sample(self, problems, n):
        self.calls += 1
        out = []
        for i, p in enumerate(problems):
            gold = int(p.answer)
            out.append([f"<think>{p.prompt}{gold}</think><answer>{gold if j == i % n else gold + 1000 * (j + 1)}</answer>"
                        for j in range(n)])
        return out, 5 * n * len(problems)


class GoldScorer:
    """Scores a solution 0.9 when its answer is its own problem's gold, else 0.2 (one score a step)."""

    def __init__(self):
        self.tokens_scored = 0

    def score(self, problems, solutions):
        self.tokens_scored += 7 * len(solutions)
        return [[0.5, 0.9 if extract_answer(s) == p.answer else 0.2] for p, s in zip(problems, solutions)]


@pytest.fixture
def problems():
    return ArithmeticTask(digits=3).problems("test", 7, seed=0)


@pytest.mark.parametrize("select", ["max", "weighted"])
def test_selection_stays_aligned_with_its_problem(problems, select):
    task = ArithmeticTask(digits=3)
    out = best_of_n(problems, FakeSampler(), 4, GoldScorer(), select=select, aggregation="last", task=task)
    assert out.correct == [True] * 7 and out.accuracy == 1.0
    for i, p in enumerate(problems):
        assert out.chosen_index[i] == i % 4
        assert out.chosen[i].startswith(f"<think>{p.prompt}")  # problem i's own sample
    assert out.account.generated_tokens == 5 * 4 * 7 and out.account.scorer_tokens == 7 * 4 * 7
    acc = out.account
    assert acc.total_s >= acc.gen_s + acc.score_s and acc.other_s >= 0


def test_first_and_majority_need_no_scorer(problems):
    out = best_of_n(problems, FakeSampler(), 3, select="first")
    assert out.chosen_index == [0] * 7 and out.scores is None and out.correct is None
    with pytest.raises(ValueError, match="select='weighted' needs a scorer"):
        best_of_n(problems, FakeSampler(), 3, select="weighted")


def test_aggregation_changes_the_choice():
    answers = ["1", "2"]
    # per-step [0.9, 0.1] vs [0.5, 0.5]: min prefers the second (0.5 > 0.1), mean ties → first, last second
    class S:
        tokens_scored = 0

        def score(self, problems, solutions):
            return [[0.9, 0.1], [0.5, 0.5]]

    prob = [Problem("q", "1")]

    class Two:
        def sample(self, problems, n):
            return [[f"<answer>{a}</answer>" for a in answers]], 2

    assert best_of_n(prob, Two(), 2, S(), select="max", aggregation="min").chosen_index == [1]
    assert best_of_n(prob, Two(), 2, S(), select="max", aggregation="mean").chosen_index == [0]  # 0.5 = 0.5: first
    assert best_of_n(prob, Two(), 2, S(), select="max", aggregation="prod").chosen_index == [1]  # 0.09 < 0.25


def test_choose_ties_are_deterministic():
    # weighted: "7" sums 0.25 + 0.25, "8" sums 0.5: equal → the answer seen first, then its best sample
    assert choose(["8", "7", "7"], [0.5, 0.25, 0.25], "weighted") == 0
    assert choose(["7", "8", "7"], [0.25, 0.5, 0.25], "weighted") == 0
    assert choose(["7", "7", "8"], [0.2, 0.3, 0.5], "weighted") == 1  # "7" wins, its better sample
    assert choose([None, None], [0.1, 0.9], "weighted") == 0  # no answers: first
    assert choose(["1", "2", "2", "1"], None, "majority") == 0  # 2–2: first seen
    assert choose(["1", "2"], [0.4, 0.4], "max") == 0


def test_verifier_scorer_is_an_oracle(problems):
    task = ArithmeticTask(digits=3)
    out = best_of_n(problems, FakeSampler(), 4, VerifierScorer(task), select="max", task=task)
    assert out.accuracy == 1.0


def test_best_of_n_with_prm_wrapper():
    class StepCount:  # a step's score is 1/(its position + 1): min = 1/T, so fewer steps win
        tokens_scored = 0

        def score(self, problems, solutions):
            assert problems == ["q"] * len(solutions)
            from seqrl.data.stepwise import split_steps

            return [[1 / (t + 1) for t in range(len(split_steps(s)))] for s in solutions]

    cands = ["<think>a\n\nb</think><answer>1</answer>", "<answer>2</answer>", "<answer>3</answer>"]
    best, scores = best_of_n_with_prm("q", cands, "min", prm=StepCount())
    assert scores == [pytest.approx(1 / 3), 1.0, 1.0] and best == "<answer>2</answer>"  # tie 1.0 = 1.0: the earliest


def test_bon_curves_rules_and_costs(tmp_path):
    from seqrl.search.curves import bon_curves, write_outputs
    from seqrl.search.simulated import NoisyArithmeticPolicy

    task = ArithmeticTask(digits=2)
    problems = task.problems("test", 30, seed=0)

    class Seeded:
        def __init__(self, seed):
            self.seed = seed

        def sample(self, problems, n):
            return NoisyArithmeticPolicy(step_error=0.3).sample(problems, n, seed=self.seed)

    res = bon_curves(problems, Seeded, {"oracle": VerifierScorer(task), "gold": GoldScorer()}, task, [1, 4, 8], [0, 1])
    acc = res["accuracy"]
    for rule in ("first", "majority", "oracle", "oracle_max", "oracle_weighted", "gold_max", "gold_weighted"):
        assert acc[rule][0] == acc["first"][0]  # N = 1: every rule takes the only sample
    assert acc["oracle"] == acc["oracle_max"]  # a perfect verifier reaches pass@N
    assert acc["oracle"][-1] >= acc["majority"][-1] and acc["oracle"][-1] > acc["first"][-1]
    assert all(a <= b for a, b in zip(acc["oracle"], acc["oracle"][1:]))  # nested samples: pass@N grows
    assert res["cost_at_n"]["gold_tokens"] == [7 * 30 * n for n in (1, 4, 8)]  # GoldScorer: 7 a solution
    write_outputs(res, tmp_path, "t")
    assert (tmp_path / "bon.png").stat().st_size > 0 and "| oracle_weighted |" in (tmp_path / "bon.md").read_text()
