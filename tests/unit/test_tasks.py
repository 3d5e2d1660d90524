"""Procedural tasks, the reasoning-gym adapter and `get_task`: determinism, disjoint splits,
correct worked solutions and verifiers that explain every zero and never raise."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqrl.data.arithmetic import addition_steps, multiplication_steps, subtraction_steps
from seqrl.data import (
    TASKS,
    ArithmeticTask,
    CountdownTask,
    GSMTask,
    JsonlTask,
    Problem,
    ReasoningGymTask,
    get_task,
    parse_expression,
)

PROCEDURAL = ["arith", "arith_sub", "arith_mul", "arith_mixed", "countdown", "gsm"]


def canonical_key(problem: Problem) -> tuple:
    """What makes two problems the same problem, read from the public fields."""
    facts = problem.metadata
    if "op" in facts:
        return (facts["op"], facts["a"], facts["b"])
    if "target" in facts:
        return (tuple(sorted(facts["numbers"])), facts["target"])
    return (facts["template"], facts["numbers"])


def is_true_equation(step: str) -> bool:
    """``lhs=rhs`` where lhs is an expression over non-negative integers and rhs an integer."""
    lhs, rhs = step.split("=")
    value, _ = parse_expression(lhs)
    return value == Fraction(int(rhs))


def summary(problems: list[Problem]) -> list[tuple]:
    return [(p.prompt, p.answer, p.steps, p.uid) for p in problems]


# --- determinism ---------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", PROCEDURAL)
def test_same_arguments_give_the_same_problems(spec):
    first = get_task(spec).problems("train", 50, seed=3)
    again = get_task(spec).problems("train", 50, seed=3)
    assert summary(first) == summary(again)
    assert summary(first) != summary(get_task(spec).problems("train", 50, seed=4))


def test_problems_do_not_depend_on_python_hash_seed():
    code = (
        "from seqrl.data import get_task;"
        "print([p.uid for p in get_task('countdown').problems('test', 5, seed=1)])"
    )
    src = str(Path(__file__).parents[2] / "src")
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": src}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    here = [p.uid for p in get_task("countdown").problems("test", 5, seed=1)]
    assert out.stdout.strip() == str(here)


# --- disjoint splits -----------------------------------------------------------------------------


@pytest.mark.parametrize("spec", PROCEDURAL)
def test_train_and_test_share_no_problem(spec):
    task = get_task(spec)
    train = {canonical_key(p) for p in task.problems("train", 2000, seed=0)}
    test = [canonical_key(p) for p in task.problems("test", 300, seed=0)]
    assert len(set(test)) == 300  # test problems are distinct
    assert train.isdisjoint(test)


def test_about_a_tenth_of_all_problems_are_test_problems():
    # asking for more test problems than exist returns every one of them (then repeats)
    test = {canonical_key(p) for p in ArithmeticTask(digits=2).problems("test", 2000, seed=0)}
    assert 0.07 < len(test) / (90 * 90) < 0.13


def test_tiny_split_repeats_problems_with_unique_uids():
    problems = ArithmeticTask(digits=1).problems("test", 40, seed=0)
    distinct = {canonical_key(p) for p in problems}
    assert len(distinct) < 40  # one-digit addition has ~10 test problems
    assert len({p.uid for p in problems}) == 40
    assert all(0 <= p.metadata["a"] <= 9 and 0 <= p.metadata["b"] <= 9 for p in problems)


# --- worked solutions ----------------------------------------------------------------------------


@pytest.mark.parametrize("spec", PROCEDURAL)
def test_every_worked_solution_is_correct(spec):
    task = get_task(spec)
    for problem in task.problems("train", 100, seed=1) + task.problems("test", 100, seed=1):
        result = task.verify(problem, problem.target)
        assert result.score == 1.0, (problem, result)
        assert all(is_true_equation(step) for step in problem.steps), problem.steps
        assert problem.prompt.isascii() and problem.target.isascii()


@pytest.mark.parametrize(
    "steps, expected",
    [
        (addition_steps(47, 85), ["7+5=12", "4+8+1=13"]),
        (addition_steps(12, 34), ["2+4=6", "1+3=4"]),
        (addition_steps(5, 9), ["5+9=14"]),
        (subtraction_steps(85, 47), ["15-7=8", "8-1-4=3"]),
        (subtraction_steps(47, 85), ["15-7=8", "8-1-4=3", "47-85=-38"]),
        (subtraction_steps(50, 50), ["0-0=0", "5-5=0"]),
        (subtraction_steps(100, 1), ["10-1=9", "10-1-0=9", "1-1-0=0"]),
        (multiplication_steps(47, 85), ["47*5=235", "47*8=376", "235+3760=3995"]),
        (multiplication_steps(12, 10), ["12*0=0", "12*1=12", "0+120=120"]),
    ],
)
def test_arithmetic_worked_solutions(steps, expected):
    assert steps == expected


@pytest.mark.parametrize("op, digits", [("add", 3), ("sub", 3), ("mul", 3), ("add", 1)])
def test_arithmetic_prompts_and_one_step_per_digit(op, digits):
    symbol = {"add": "+", "sub": "-", "mul": "*"}[op]
    for p in ArithmeticTask((op,), digits).problems("train", 100, seed=0):
        a, b = p.metadata["a"], p.metadata["b"]
        extra = {"add": 0, "sub": int(a < b), "mul": int(digits > 1)}[op]
        assert len(p.steps) == digits + extra
        assert p.prompt == f"{a}{symbol}{b}="
        assert p.answer == str({"add": a + b, "sub": a - b, "mul": a * b}[op])


def test_arithmetic_metadata_carries_the_digit_count_and_a_list_mixes_counts():
    fixed = ArithmeticTask(digits=2).problems("test", 4, seed=0)
    assert [p.prompt for p in fixed] == ["54+39=", "68+61=", "71+21=", "38+21="]  # a fixed count draws as before
    assert {p.metadata["digits"] for p in fixed} == {2}
    assert [p.prompt for p in ArithmeticTask(digits=[2]).problems("test", 4, seed=0)] == [p.prompt for p in fixed]
    mixed = ArithmeticTask(digits=[2, 3]).problems("train", 200, seed=0)
    for p in mixed:
        d = p.metadata["digits"]
        assert len(str(p.metadata["a"])) == len(str(p.metadata["b"])) == d
    counts = [sum(p.metadata["digits"] == d for p in mixed) for d in (2, 3)]
    assert min(counts) > 60  # drawn uniformly: ~100 each


def test_countdown_generation_is_fast():
    start = time.perf_counter()
    CountdownTask().problems("train", 1000, seed=0)
    assert time.perf_counter() - start < 1.0  # < 1 ms a problem


def test_countdown_problems_use_3_to_4_numbers_and_positive_integer_targets():
    for p in CountdownTask().problems("train", 300, seed=0):
        assert len(p.metadata["numbers"]) in (3, 4)
        assert isinstance(p.metadata["target"], int) and 0 < p.metadata["target"] <= 1000
        numbers = " ".join(map(str, p.metadata["numbers"]))
        assert p.prompt == f"Use {numbers} to make {p.metadata['target']}."


# --- verifiers -----------------------------------------------------------------------------------

ARITH = Problem("47+85=", "132", metadata={"op": "add", "a": 47, "b": 85})
COUNTDOWN = Problem(
    "Use 3 7 25 to make 154.", "(25-3)*7", metadata={"numbers": [3, 7, 25], "target": 154}
)
GSM = Problem("Ann buys 3 pens at $4 each and pays $20. How much change?", "8")


@pytest.mark.parametrize(
    "completion, score, reason",
    [
        ("<answer>132</answer>", 1.0, ""),
        ("<think>7+5=12\n\n4+8+1=13</think><answer> +132 </answer>", 1.0, ""),
        ("<answer>131</answer>", 0.0, "not equal: 131 vs 132"),
        ("<answer>-132</answer>", 0.0, "not equal: -132 vs 132"),
        ("132", 0.0, "no answer found"),
        ("<answer>132.0</answer>", 1.0, ""),  # the value, as the math reward reads it
        ("<answer>13 2</answer>", 0.0, "not equal: 13 2 vs 132"),
        ("<answer>\uff11\uff13\uff12</answer>", 1.0, ""),  # full-width digits are normalised
        ("<answer>131 or 132</answer>", 0.0, "hedged: or"),
        ("<answer>" + "9" * 60 + "</answer>", 0.0, "answer too long"),
    ],
)
def test_arithmetic_verifier(completion, score, reason):
    result = ArithmeticTask().verify(ARITH, completion)
    assert (result.score, result.reason) == (score, reason)


@pytest.mark.parametrize(
    "completion, score, reason",
    [
        ("<answer>(25-3)*7</answer>", 1.0, ""),
        ("<answer> 7 * (25 - 3) </answer>", 1.0, ""),
        ("<answer>7*25-3</answer>", 0.0, "not equal: 172 vs 154"),
        ("<answer>(25-3)*7*7</answer>", 0.0, "uses 7 twice"),
        ("<answer>(25-3)*8</answer>", 0.0, "uses 8, which is not given"),
        ("<answer>25*7</answer>", 0.0, "does not use 3"),
        ("<answer>25/(7-7)+3</answer>", 0.0, "division by zero"),
        ("<answer>__import__('os')</answer>", 0.0, "unexpected character '_' at position 0"),
        ("(25-3)*7", 0.0, "no answer found"),
    ],
)
def test_countdown_verifier(completion, score, reason):
    result = CountdownTask().verify(COUNTDOWN, completion)
    assert (result.score, result.reason) == (score, reason)


def test_countdown_at_most_once_option():
    facts = {"numbers": [1, 3, 7, 25], "target": 154}
    problem = Problem("Use 1 3 7 25 to make 154.", "", metadata=facts)
    answer = "<answer>(25-3)*7</answer>"
    at_most_once = CountdownTask(require_all=False)
    assert CountdownTask().verify(problem, answer).reason == "does not use 1"
    assert at_most_once.verify(problem, answer).score == 1.0
    assert at_most_once.verify(problem, "<answer>(25-3)*7*1*1</answer>").reason == "uses 1 twice"


@pytest.mark.parametrize(
    "completion, score, reason",
    [
        ("<answer>8</answer>", 1.0, ""),
        ("<answer>$8</answer>", 1.0, ""),
        ("<answer>8.0</answer>", 1.0, ""),
        ("<answer>9</answer>", 0.0, "not equal: 9 vs 8"),
        ("<answer>eight</answer>", 0.0, "unparseable answer: eight"),
        ("<answer>" + "8" * 60 + "</answer>", 0.0, "answer too long"),
        ("8", 0.0, "no answer found"),
    ],
)
def test_gsm_verifier(completion, score, reason):
    result = GSMTask().verify(GSM, completion)
    assert (result.score, result.reason) == (score, reason)


def test_gsm_verifier_reads_thousands_separators():
    assert GSMTask().verify(Problem("q", "1000"), "<answer>1,000</answer>").score == 1.0


def test_gsm_has_at_least_six_templates_in_use():
    templates = {p.metadata["template"] for p in GSMTask().problems("train", 300, seed=0)}
    assert len(templates) >= 6


GARBAGE = [
    "",
    "<answer></answer>",
    "<answer>" + "9" * 100_000 + "</answer>",
    "<answer>" + "(" * 5000 + "</answer>",
    "<answer>1e999</answer>",
    "<answer>nan</answer>",
    "<answer>inf</answer>",
    "<answer>-0</answer>",
    "<answer>\u0663\u0664</answer>",  # Arabic-Indic digits
    "<answer>\x00\ud7ff\U0001f600</answer>",
    "<answer>2**999999</answer>",
    "<answer><answer>1</answer>",
    "</answer><answer>",
    "<think>" * 1000,
]


@pytest.mark.parametrize("spec", PROCEDURAL)
def test_verifiers_survive_garbage(spec):
    task = get_task(spec)
    problem = task.problems("train", 1, seed=0)[0]
    for completion in GARBAGE:
        result = task.verify(problem, completion)
        assert result.score in (0.0, 1.0)
        assert result.score == 1.0 or result.reason


@settings(max_examples=150, deadline=None)
@given(text=st.text(), wrap=st.booleans())
def test_verifiers_never_raise_on_random_text(text, wrap):
    completion = f"<answer>{text}</answer>" if wrap else text
    tasks = ((ArithmeticTask(), ARITH), (CountdownTask(), COUNTDOWN), (GSMTask(), GSM))
    for task, problem in tasks:
        result = task.verify(problem, completion)
        assert result.score == 1.0 or result.reason


# --- reasoning-gym adapter -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def rg_task():
    return ReasoningGymTask("basic_arithmetic", size=100)


def test_reasoning_gym_problems_are_deterministic_and_split_by_question(rg_task):
    train = rg_task.problems("train", 60, seed=0)
    test = rg_task.problems("test", 8, seed=0)
    assert summary(train) == summary(rg_task.problems("train", 60, seed=0))
    assert summary(train) != summary(rg_task.problems("train", 60, seed=1))
    assert {p.prompt for p in train}.isdisjoint(p.prompt for p in test)
    assert len({p.prompt for p in test}) == 8


def test_reasoning_gym_thresholds_partial_credit(rg_task):
    problem = rg_task.problems("train", 1, seed=0)[0]
    partial = f"<answer>about {problem.answer}</answer>"  # contains the answer: partial credit
    credit = len(problem.answer) / len(f"about {problem.answer}")
    assert 0 < credit < 1
    binary = rg_task.verify(problem, partial)
    assert (binary.score, binary.reason) == (0.0, f"partial credit {credit:.3g} treated as wrong")
    raw = ReasoningGymTask("basic_arithmetic", binary=False).verify(problem, partial)
    assert raw.score == pytest.approx(credit) and raw.reason == f"partial credit {credit:.3g}"
    assert rg_task.verify(problem, f"<answer>{problem.answer}</answer>").score == 1.0
    assert rg_task.verify(problem, problem.answer).reason == "no answer found"
    wrong = rg_task.verify(problem, "<answer>zzz</answer>")
    assert (wrong.score, wrong.reason) == (0.0, "wrong answer (score_answer gave 0)")


def test_reasoning_gym_scorer_errors_do_not_escape(rg_task):
    # The scorer runs in a worker process: an entry it cannot read makes it raise there.
    problem = rg_task.problems("train", 1, seed=0)[0]
    broken = Problem(problem.prompt, problem.answer, metadata={"entry": {"question": problem.prompt}})
    result = rg_task.verify(broken, "<answer>1</answer>")
    assert result.score == 0.0 and result.reason.startswith("score_answer raised KeyError")


def test_unknown_reasoning_gym_dataset_lists_names():
    with pytest.raises(ValueError, match="did you mean basic_arithmetic") as err:
        ReasoningGymTask("basic_arithmetc")
    assert "valid names" in str(err.value)


# --- get_task ------------------------------------------------------------------------------------


def test_get_task_builds_each_task(tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text('{"question": "1+1?", "answer": "2"}\n')
    assert TASKS == (
        "arith", "arith_add", "arith_sub", "arith_mul", "arith_mixed", "countdown", "gsm", "code_repair"
    )
    assert get_task("arith").ops == ("add",) and get_task("arith").digits == 2
    assert get_task("arith_mixed").ops == ("add", "sub", "mul")
    assert get_task("arith_mul", digits=3).digits == 3
    assert isinstance(get_task("countdown"), CountdownTask)
    assert isinstance(get_task("gsm"), GSMTask)
    assert isinstance(get_task("rg:basic_arithmetic"), ReasoningGymTask)
    assert isinstance(get_task(f"jsonl:{data}"), JsonlTask)
    with pytest.raises(FileNotFoundError, match="build the task set with `seqrl data code-repair"):
        get_task("code_repair", tasks_dir=str(tmp_path / "none"))


@pytest.mark.parametrize("spec", ["arith_div", "rg:", "jsonl:", ""])
def test_get_task_rejects_unknown_names(spec):
    with pytest.raises(ValueError, match="valid: arith, arith_add.*rg:<reasoning_gym_dataset>"):
        get_task(spec)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ArithmeticTask(ops=("div",)), "arith.ops"),
        (lambda: ArithmeticTask(digits=0), "arith.digits"),
        (lambda: ArithmeticTask(digits=[]), "arith.digits"),
        (lambda: ArithmeticTask(digits=[2, 19]), "arith.digits"),
        (lambda: ArithmeticTask(digits="2"), "arith.digits"),
        (lambda: CountdownTask(num_numbers=(1,)), "countdown.num_numbers"),
        (lambda: CountdownTask(max_number=99, max_target=50), "countdown.max_target"),
        (lambda: ArithmeticTask().problems("dev", 1), "split must be one of"),
        (lambda: ArithmeticTask().problems("train", -1), "n must be >= 0"),
    ],
)
def test_bad_arguments_fail_by_name(make, message):
    with pytest.raises(ValueError, match=message):
        make()
