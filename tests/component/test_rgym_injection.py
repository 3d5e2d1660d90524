"""Injection answers against every reasoning-gym dataset seqrl can name: nothing executes, no call hangs."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("reasoning_gym")

from seqrl.data.rgym import EVALUATING, ReasoningGymTask, _dataset, dataset_names, precheck  # noqa: E402
from seqrl.types import Problem  # noqa: E402



def _problem(name: str) -> Problem:
    entry = _dataset(name, "{}", 0, 1)[0]
    return Problem(prompt=entry["question"], answer=str(entry["answer"]), metadata={"entry": entry}, uid=name)


# composite is configured with reasoning-gym DatasetSpec objects, which a JSON config cannot express:
# seqrl cannot create it, and its items are scored by the datasets tested here.
CREATABLE = [n for n in dataset_names() if n != "composite"]
# reasoning-gym scorers that give full marks to any non-empty answer (docs/datasets.md).
PAYS_ANY_ANSWER = {"game_of_life_halting"}


@pytest.mark.parametrize("name", CREATABLE)
def test_injection_answers_execute_nothing_and_return(name, tmp_path):
    task = ReasoningGymTask(name, size=1)
    problem = _problem(name)
    target = tmp_path / "F"
    answers = [f"__import__('os').system('touch {target}')", f"[__import__('pathlib').Path('{target}').touch()]",
               "9**9**9"]
    for answer in answers:
        t0 = time.monotonic()
        r = task.verify(problem, f"<answer>{answer}</answer>")
        assert time.monotonic() - t0 < task.timeout_s + 3.0, f"{name}: {answer!r} did not return"
        assert r.score < 1.0 or name in PAYS_ANY_ANSWER, (name, answer, r)
    assert not target.exists(), f"{name}: an answer created a file"


@pytest.mark.parametrize("name", sorted(EVALUATING))
def test_evaluating_datasets_still_score_their_gold_answer(name):
    task = ReasoningGymTask(name, size=1)
    problem = _problem(name)
    assert precheck(name, problem.answer) == ""
    r = task.verify(problem, f"<answer>{problem.answer}</answer>")
    assert r.score == 1.0, r.reason


@pytest.mark.parametrize("answer", ["x.__class__", "sin(x)(1)", "exp(x, y=1)", "lambda: 1", "(2**100)**200",
                                     "x if 1 else 2", "'a'", "9^9^9", "E**E**E"])
def test_the_sympy_grammar_rejects_what_it_cannot_bound(answer):
    assert precheck("countdown", answer) != ""


@pytest.mark.parametrize("answer", ["x**2/2 + C", "sin(x) + exp(-x)", "3*x^4 - 2", "(1 + 2) * (3 - 4) / 5", "x**(1/2)"])
def test_the_sympy_grammar_admits_ordinary_answers(answer):
    assert precheck("simple_integration", answer) == ""
