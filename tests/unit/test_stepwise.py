"""Stepwise data: splitting completions into steps, the TRL stepwise file format, exact arithmetic truth."""

from __future__ import annotations

import json

import pytest

from seqrl.data import ArithmeticTask
from seqrl.data.stepwise import (
    StepExample,
    StepwiseFormatError,
    arith_step_truth,
    corrupted_arith_examples,
    cumulative_truth,
    policy_arith_examples,
    prefix_text,
    read_stepwise,
    split_steps,
    write_stepwise,
)
from seqrl.types import Problem


def test_split_steps_round_trips_the_house_format():
    for p in ArithmeticTask(ops=("add", "sub", "mul"), digits=2).problems("train", 30, seed=3):
        steps = split_steps(p.target)
        assert steps == [*p.steps, f"<answer>{p.answer}</answer>"]
        assert prefix_text(steps) == p.target  # the full prefix is the completion itself


def test_prefix_text_continues_with_a_new_step():
    assert prefix_text([]) == "<think>"
    assert prefix_text(["a", "b"]) == "<think>a\n\nb\n\n"


def test_read_write_round_trip_hard_and_soft(tmp_path):
    rows = [StepExample("1+2=", ("1+2=3", "<answer>3</answer>"), (1.0, 1.0)),
            StepExample("1+3=", ("1+3=5", "<answer>5</answer>"), (0.25, 0.0))]
    path = write_stepwise(tmp_path / "d.jsonl", rows)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines[0]["labels"] == [True, True] and lines[1]["labels"] == [0.25, 0.0]
    assert read_stepwise(path) == rows


@pytest.mark.parametrize("row, message", [
    ({"completions": ["a"], "labels": [True]}, "line 2: missing field 'prompt'"),
    ({"prompt": "q", "completions": [], "labels": []}, "line 2: field 'completions' must be a non-empty list"),
    ({"prompt": "q", "completions": ["a", 3], "labels": [1, 1]}, "line 2: field 'completions'[1]"),
    ({"prompt": "q", "completions": ["a", "b"], "labels": [True]}, "line 2: field 'labels' must be a list with one label per step (2 steps, got 1)"),
    ({"prompt": "q", "completions": ["a"], "labels": [1.5]}, "line 2: field 'labels'[0] must be a bool or a number in [0, 1]"),
    ({"prompt": 7, "completions": ["a"], "labels": [True]}, "line 2: field 'prompt' must be a string"),
])
def test_malformed_rows_name_file_line_and_field(tmp_path, row, message):
    path = tmp_path / "bad.jsonl"
    good = {"prompt": "q", "completions": ["a"], "labels": [True]}
    path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(StepwiseFormatError) as e:
        read_stepwise(path)
    assert str(path) in str(e.value) and message in str(e.value)


def test_invalid_json_line_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "q", "completions": ["a"], "labels": [true]}\n\n{oops\n')
    with pytest.raises(StepwiseFormatError, match=r"bad.jsonl line 3: invalid JSON"):
        read_stepwise(path)


def test_parquet_through_datasets(tmp_path):
    import datasets

    datasets.Dataset.from_list([{"prompt": "q", "completions": ["a", "b"], "labels": [True, False]}]).to_parquet(
        str(tmp_path / "d.parquet"))
    assert read_stepwise(tmp_path / "d.parquet") == [StepExample("q", ("a", "b"), (1.0, 0.0))]


def test_arith_step_truth_per_position():
    p = Problem("47*85=", "3995", steps=("47*5=235", "47*8=376", "235+3760=3995"))
    got = arith_step_truth(p, ["47*5=235", "47*8=375", "235+3760=3995", "<answer>3994</answer>"])
    assert got == [True, False, True, False]
    assert arith_step_truth(p, ["<answer>3995</answer>"]) == [True]


def test_corrupted_examples_label_exactly_the_moved_step():
    problems = ArithmeticTask(digits=2).problems("train", 200, seed=0)
    examples = corrupted_arith_examples(problems, seed=0)
    n_wrong = [ex.labels.count(0.0) for ex in examples]
    assert set(n_wrong) == {0, 1}
    assert 0.5 < sum(n_wrong) / len(examples) < 0.8  # about 2/3 have one wrong step
    for p, ex in zip(problems, examples):
        assert list(ex.labels) == [float(t) for t in arith_step_truth(p, ex.completions)]


def test_policy_solutions_get_cumulative_step_labels():
    """Math-Shepherd under a perfect verifier: after the first wrong step every step is bad, even one that
    is right on its own (here the copied-digit error of a real policy, then a right tens column)."""
    p = Problem("18+90=", "108", steps=("8+0=8", "1+9+0=10"))
    assert cumulative_truth([True, True, True]) == [True, True, True]
    assert cumulative_truth([False, True, True]) == [False, False, False]
    assert cumulative_truth([True, False, True]) == [True, False, False]
    assert cumulative_truth([]) == []
    solutions = [
        "<think>8+0=8\n\n1+9+0=10</think><answer>108</answer>",  # all right
        "<think>9+0=9\n\n1+9+0=10</think><answer>109</answer>",  # wrong first step; the 2nd is right alone
        "<think>8+0=8\n\n1+9+0=11</think><answer>118</answer>",  # wrong 2nd step; the answer follows it
        "<think>8+0=8\n\n1+9+0=10</think><answer>107</answer>",  # only the answer wrong
        "<think>8+0=8\n\n",  # truncated: no answer step
        "no steps",  # dropped
    ]
    rows = policy_arith_examples([p], [solutions])
    assert [r.labels for r in rows] == [(1.0, 1.0, 1.0), (0.0, 0.0, 0.0), (1.0, 0.0, 0.0), (1.0, 1.0, 0.0), (1.0,)]
    assert [arith_step_truth(p, r.completions) for r in rows][1] == [False, True, False]  # position-wise differs
    assert rows[1].completions == ("9+0=9", "1+9+0=10", "<answer>109</answer>") and {r.prompt for r in rows} == {p.prompt}
    with pytest.raises(ValueError):
        policy_arith_examples([p], [])  # one list of solutions per problem
