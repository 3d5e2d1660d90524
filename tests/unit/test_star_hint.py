"""STaR's pure pieces: the hint (its words, quoting, adding it), the step schedule, the method name."""

from __future__ import annotations

import pytest

from seqrl.algos.star import STaRConfig, fine_tune_steps, hint_words, quotes_hint, with_hint
from seqrl.config import ConfigError, from_dict
from seqrl.types import Problem

T = "{question} hint: {answer}"


def test_hint_words_are_the_template_text_outside_its_fields():
    assert hint_words(T) == {"hint"}
    assert hint_words("Q: {question}\nThe Answer is {answer}.") == {"q", "the", "answer", "is"}


@pytest.mark.parametrize("template, message", [
    ("{question} hint", "exactly the fields"),
    ("{question} hint {answer} {unit}", "exactly the fields"),
    ("{question} = {answer}", "needs a word"),
    ("{question} hint {answer", "hint_template"),
])
def test_bad_hint_templates_are_errors_naming_the_field(template, message):
    with pytest.raises(ValueError, match=message):
        hint_words(template)
    with pytest.raises((ValueError, ConfigError), match="hint_template"):
        from_dict(STaRConfig, {"hint_template": template})


@pytest.mark.parametrize("completion, quoted", [
    ("<think>7+5=12\n\n4+8+1=13</think><answer>132</answer>", False),  # the answer itself is not quoting
    ("<think>132</think><answer>132</answer>", False),                 # nor is stating it in the reasoning
    ("<think>hint: 132</think><answer>132</answer>", True),
    ("<think>as the HINT says</think><answer>132</answer>", True),     # case-insensitive
    ("<think>hinting</think><answer>132</answer>", False),             # a whole word only
    ("<think>7+5=12</think><answer>132 hint</answer>", True),          # inside the answer block too
])
def test_quotes_hint(completion, quoted):
    assert quotes_hint(completion, T) is quoted


def test_a_marker_word_of_the_template_is_not_matched_through_the_house_markers():
    template = "{question} (answer: {answer})"
    assert not quotes_hint("<think>1+2=3</think><answer>3</answer>", template)
    assert quotes_hint("<think>the answer is 3</think><answer>3</answer>", template)


def test_with_hint_puts_the_gold_answer_in_the_question_and_keeps_the_answer():
    p = Problem("47+85=", "132", uid="arith/47+85")
    h = with_hint(p, T)
    assert h.prompt == "47+85= hint: 132" and h.answer == "132" and h.uid == p.uid
    assert p.prompt == "47+85="  # the original is untouched (frozen)
    chat = Problem("b", "7", messages=({"role": "user", "content": "a"}, {"role": "assistant", "content": "x"},
                                       {"role": "user", "content": "b"}))
    hc = with_hint(chat, T)
    assert [m["content"] for m in hc.messages] == ["a", "x", "b hint: 7"]
    assert chat.messages[2]["content"] == "b"


def test_fine_tune_steps_grow_twenty_percent_per_iteration_from_the_start_value():
    got = [fine_tune_steps(40, 1.2, i) for i in range(1, 9)]
    assert got == [40, 48, 58, 69, 83, 100, 119, 143]  # round(40 · 1.2^(i−1)): 57.6→58, 69.12→69, 82.94→83
    for i, s in enumerate(got, start=1):
        assert abs(s - 40 * 1.2 ** (i - 1)) <= 0.5
    assert [fine_tune_steps(10, 1.0, i) for i in (1, 5)] == [10, 10]
    with pytest.raises(ValueError, match="iteration"):
        fine_tune_steps(40, 1.2, 0)


def test_method_names_star_rft_and_the_ablation():
    assert STaRConfig().method == "star"
    assert STaRConfig(rationalize=False, samples_per_problem=4).method == "rft"
    assert STaRConfig(rationalize=False).method == "star-no-rationalization"


@pytest.mark.parametrize("overrides, message", [
    ({"samples_per_problem": 0}, "samples_per_problem"),
    ({"iterations": 0}, "iterations"),
    ({"step_growth": 0.9}, "step_growth"),
    ({"temperature": -1.0}, "temperature"),
    ({"base": {"examples": 0}}, "base.examples"),
    ({"stop": [""]}, "stop"),
])
def test_config_errors_name_the_field(overrides, message):
    with pytest.raises((ValueError, ConfigError), match=message):
        from_dict(STaRConfig, overrides)
