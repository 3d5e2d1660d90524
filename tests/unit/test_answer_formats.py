"""`task.kwargs.answer_format`: where a text task's verifier (and its vote) reads the final answer, so an
instruct model that answers ``\\boxed{26}``, ``#### 26`` or "The answer is: 26" is scored on it."""

from __future__ import annotations

import pytest

from seqrl.answers import ANSWER_FORMATS, find_answer
from seqrl.data import get_task
from seqrl.types import Problem

B = "\\boxed"
COMPLETIONS = {  # what an instruct model writes → what each format reads (None: no answer there)
    "<think>2*13</think><answer>26</answer>": {"answer_tag": "26", "boxed": None, "gsm8k": None, "lenient": "26"},
    f"So the total is {B}{{26}}.": {"answer_tag": None, "boxed": "26", "gsm8k": None, "lenient": "26"},
    "13 * 2 = 26\n#### 26": {"answer_tag": None, "boxed": None, "gsm8k": "26", "lenient": "26"},
    "The answer is: 26.": {"answer_tag": None, "boxed": None, "gsm8k": None, "lenient": "26"},
    "She has 13 and buys 13 more, 26 in all": {"answer_tag": None, "boxed": None, "gsm8k": None, "lenient": "26"},
    f"It is {B}{{25}} or rather {B}{{26}}": {"answer_tag": None, "boxed": None, "gsm8k": None, "lenient": None},
    "#### 25\nwait, recount\n#### 26": {"answer_tag": None, "boxed": None, "gsm8k": "26", "lenient": "26"},
}


@pytest.mark.parametrize("text", list(COMPLETIONS))
@pytest.mark.parametrize("fmt", ANSWER_FORMATS)
def test_each_format_reads_what_it_names(text, fmt):
    answer, why = find_answer(text, fmt)
    assert answer == COMPLETIONS[text][fmt], why
    assert (why == "") == (answer is not None)


@pytest.mark.parametrize("task_name,kwargs,gold", [("gsm", {}, "26"), ("arith", {"digits": 2}, "26"),
                                                   ("countdown", {}, "(25-3)*7")])
def test_text_tasks_score_an_instruct_models_answer_in_the_format_they_are_told(task_name, kwargs, gold):
    meta = {"numbers": [3, 7, 25], "target": 154} if task_name == "countdown" else {}
    problem = Problem("q", gold, metadata=meta)
    boxed = f"Let me compute. {B}{{{gold}}}"
    tag = get_task(task_name, **kwargs)
    assert tag.verify(problem, boxed).score == 0.0 and tag.verify(problem, boxed).reason == "no answer found"
    box = get_task(task_name, answer_format="boxed", **kwargs)
    assert box.verify(problem, boxed).score == 1.0 and box.extract_answer(boxed) == gold
    assert box.verify(problem, f"<answer>{gold}</answer>").reason == "no answer found (boxed: \\boxed{…})"
    lenient = get_task(task_name, answer_format="lenient", **kwargs)
    assert lenient.verify(problem, boxed).score == 1.0
    assert lenient.verify(problem, f"<answer>{gold}</answer>").score == 1.0


def test_a_jsonl_task_takes_the_format_too(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"question": "13*2?", "answer": "26"}\n{"question": "1+1?", "answer": "2"}\n')
    task = get_task(f"jsonl:{path}", answer_format="gsm8k")
    assert task.verify(Problem("13*2?", "26"), "13 * 2 = 26\n#### 26").score == 1.0


def test_a_bad_format_is_named():
    with pytest.raises(ValueError, match="task.kwargs.answer_format must be one of answer_tag, boxed, gsm8k, lenient"):
        get_task("gsm", answer_format="box")
