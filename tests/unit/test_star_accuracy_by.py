"""STaR's held-out accuracy by a problem attribute (arithmetic: the operand digit count)."""

from __future__ import annotations

import pytest

from seqrl.algos import star
from seqrl.algos.star import STaRConfig, accuracy_by, by_group, held_out
from seqrl.evaluation import EvalResult
from seqrl.types import Problem


def _problems(values):
    return [Problem(f"{i}+1=", str(i + 1), metadata={} if v is None else {"digits": v}) for i, v in enumerate(values)]


def test_accuracy_is_the_fraction_correct_within_each_group():
    # digits 3: 2 of 3 right; digits 2: 1 of 2 (a score of 0.5 is not correct); digits 12: 0 of 1
    problems = _problems([3, 2, 3, 12, 2, 3])
    records = [{"score": s} for s in (1.0, 1.0, 0.0, 0.0, 0.5, 1.0)]
    assert accuracy_by(problems, records, "digits") == {
        "eval/acc_digits_2": 0.5, "eval/acc_digits_3": pytest.approx(2 / 3, abs=1e-15), "eval/acc_digits_12": 0.0}
    assert list(accuracy_by(problems, records, "digits")) == ["eval/acc_digits_2", "eval/acc_digits_3",
                                                              "eval/acc_digits_12"]  # numeric order, not 12 < 2


def test_problems_without_the_key_or_a_greedy_score_are_left_out():
    problems = _problems([2, None, 2, 3])
    records = [{"score": 1.0}, {"score": 1.0}, {"score": 0.0}, {"sample_scores": [1.0]}]
    assert accuracy_by(problems, records, "digits") == {"eval/acc_digits_2": 0.5}
    assert accuracy_by(problems, records, "op") == {}
    with pytest.raises(ValueError, match="3 problems but 4 records"):
        accuracy_by(problems[:3], records, "digits")


def test_string_values_group_and_sort_by_name():
    problems = [Problem("x", "1", metadata={"op": op}) for op in ("sub", "add", "add")]
    assert accuracy_by(problems, [{"score": 1.0}, {"score": 0.0}, {"score": 1.0}], "op") == {
        "eval/acc_op_add": 0.5, "eval/acc_op_sub": 1.0}


@pytest.mark.parametrize("key, expected", [("digits", {"eval/acc_digits_2": 1.0, "eval/acc_digits_3": 0.0}), ("", {})])
def test_held_out_adds_the_split_to_the_evaluation_metrics(monkeypatch, key, expected):
    problems = _problems([2, 3, 2])

    def fake_evaluate(policy, task, ps, **kw):
        assert ps == problems
        return EvalResult({"eval/accuracy": 2 / 3}, [{"score": 1.0}, {"score": 0.0}, {"score": 1.0}])

    monkeypatch.setattr(star, "evaluate", fake_evaluate)
    metrics = held_out(None, None, problems, STaRConfig(accuracy_by=key))
    assert metrics == {"eval/accuracy": 2 / 3, **expected}


def test_by_group_formats_the_split_for_the_console():
    assert by_group({"eval/accuracy": 0.5, "eval/acc_digits_2": 0.75, "eval/acc_digits_3": 0.25}, "digits") \
        == " (digits 2: 0.750, 3: 0.250)"
    assert by_group({"eval/accuracy": 0.5}, "digits") == "" and by_group({"eval/acc_digits_2": 1.0}, "") == ""
