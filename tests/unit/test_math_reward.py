"""Math answer reward: extraction, math-verify equivalence, hedging, strict/lenient, threads."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqrl.rewards.math import MAX_ANSWER_CHARS, extract_final_answer, make_math_reward, math_answer_reward, math_reward
from seqrl.types import Problem

B = "\\boxed"

# (pred, gold, mode, where, score, reason substring) — reason "" means full marks with no reason.
CASES = [
    # integers and negatives
    ("<answer>42</answer>", "42", "lenient", "answer_tag", 1.0, ""),
    ("<answer>-3</answer>", "-3", "strict", "answer_tag", 1.0, ""),
    ("<answer>-3</answer>", "3", "strict", "answer_tag", 0.0, "not equivalent: -3 vs 3"),
    ("<answer>3</answer>", "4", "strict", "answer_tag", 0.0, "not equivalent: 3 vs 4"),
    (f"{B}{{-7}}", "-7", "lenient", "answer_tag", 1.0, ""),
    # decimals and fractions
    ("<answer>0.5</answer>", "1/2", "strict", "answer_tag", 1.0, ""),
    ("<answer>1/2</answer>", "0.5", "strict", "answer_tag", 1.0, ""),
    ("<answer>\\frac{1}{2}</answer>", "0.5", "strict", "answer_tag", 1.0, ""),
    (f"{B}{{\\frac{{1}}{{2}}}}", "1/2", "lenient", "answer_tag", 1.0, ""),
    ("<answer>\\frac{1}{3}</answer>", "0.5", "strict", "answer_tag", 0.0, "not equivalent"),
    ("<answer>3.140</answer>", "3.14", "strict", "answer_tag", 1.0, ""),
    ("<answer>0.333333</answer>", "\\frac{1}{3}", "strict", "answer_tag", 1.0, ""),  # 6-digit float rounding
    # percents: the percent sign is a unit label ("50%" is 50, not 0.5; "5000%" is not 50)
    ("<answer>50%</answer>", "0.5", "strict", "answer_tag", 0.0, "not equivalent"),
    ("<answer>50\\%</answer>", "50", "strict", "answer_tag", 1.0, ""),
    ("<answer>50</answer>", "50\\%", "strict", "answer_tag", 1.0, ""),
    ("<answer>0.5</answer>", "50\\%", "strict", "answer_tag", 0.0, "not equivalent"),
    ("<answer>5000\\%</answer>", "50", "strict", "answer_tag", 0.0, "not equivalent"),
    ("<answer>40%</answer>", "0.5", "strict", "answer_tag", 0.0, "not equivalent: 40% vs 0.5"),
    # sets, tuples, intervals
    ("<answer>\\{2, 1\\}</answer>", "\\{1,2\\}", "strict", "answer_tag", 1.0, ""),
    ("<answer>\\{1, 3\\}</answer>", "\\{1,2\\}", "strict", "answer_tag", 0.0, "not equivalent"),
    ("<answer>(2,1)</answer>", "(1,2)", "strict", "answer_tag", 0.0, "not equivalent"),
    ("<answer>[0,1)</answer>", "[0,1)", "strict", "answer_tag", 1.0, ""),
    ("<answer>[0,1]</answer>", "[0,1)", "strict", "answer_tag", 0.0, "not equivalent: [0,1] vs [0,1)"),
    # latex
    ("<answer>2\\sqrt{2}</answer>", "\\sqrt{8}", "strict", "answer_tag", 1.0, ""),
    ("<answer>\\sqrt{3}</answer>", "\\sqrt{8}", "strict", "answer_tag", 0.0, "not equivalent"),
    ("<answer>2\\pi</answer>", "2\\pi", "strict", "answer_tag", 1.0, ""),
    ("<answer>2</answer>", "2\\pi", "strict", "answer_tag", 0.0, "not equivalent: 2 vs 2\\pi"),  # bare 2\pi would parse as 2
    ("<answer>1000</answer>", "10^{3}", "strict", "answer_tag", 1.0, ""),
    (f"{B}{{\\frac{{a}}{{b}}}}", "a/b", "lenient", "answer_tag", 1.0, ""),  # nested braces in \boxed
    ("\\fbox{12}", "12", "lenient", "answer_tag", 1.0, ""),
    # thousands separators and units
    ("<answer>1,000</answer>", "1000", "strict", "answer_tag", 1.0, ""),
    ("#### 1,000", "1000", "lenient", "answer_tag", 1.0, ""),
    ("<answer>12 apples</answer>", "12", "strict", "answer_tag", 1.0, ""),
    # hedging
    (f"{B}{{5}} so {B}{{ 5 }}", "5", "lenient", "answer_tag", 1.0, ""),
    (f"{B}{{1}} {B}{{2}} {B}{{3}}", "3", "lenient", "answer_tag", 0.0, "hedged: 3 different boxed answers"),
    (f"{B}{{1}} {B}{{2}}", "2", "strict", "boxed", 0.0, "hedged: 2 different boxed answers"),
    ("<answer>4</answer><answer>5</answer>", "5", "strict", "answer_tag", 0.0, "hedged: 2 different <answer> blocks"),
    ("<answer>5</answer><answer>5</answer>", "5", "strict", "answer_tag", 1.0, ""),
    # sources and priority
    ("So the answer is 7.", "7", "lenient", "answer_tag", 1.0, ""),
    ("THE ANSWER IS 8", "7", "lenient", "answer_tag", 0.0, "not equivalent: 8 vs 7"),
    ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "72", "lenient", "answer_tag", 1.0, ""),
    (f"<answer>9</answer> {B}{{8}}", "8", "lenient", "answer_tag", 1.0, ""),  # boxed first in lenient
    (f"<answer>9</answer> {B}{{8}}", "9", "strict", "answer_tag", 1.0, ""),  # strict: only the tag
    (f"<answer>9</answer> {B}{{8}}", "8", "strict", "boxed", 1.0, ""),
    # strict vs lenient on a trailing number
    ("I added them and got 15", "15", "lenient", "answer_tag", 1.0, ""),
    ("I added them and got 15", "15", "strict", "answer_tag", 0.0, "no answer found"),
    ("I added them and got 15", "15", "strict", "boxed", 0.0, "no answer found"),
    # junk
    ("", "1", "lenient", "answer_tag", 0.0, "no answer found"),
    ("<answer></answer>", "1", "strict", "answer_tag", 0.0, "no answer found"),
    ("∑∂ƒ©˙∆˚¬ 🙃 \x00\ufffd", "1", "lenient", "answer_tag", 0.0, "no answer found"),
    ("<answer>🙃</answer>", "1", "strict", "answer_tag", 0.0, "unparseable answer: 🙃"),
    (f"{B}{{\\frac{{1}}{{2}}", "0.5", "strict", "boxed", 0.0, "malformed: unclosed"),  # unbalanced: nothing
    (f"{B}{{\\frac{{1}}{{2}}", "2", "lenient", "answer_tag", 0.0, "malformed: unclosed"),  # ... no last-number fallback
    ("<answer>}}{{(</answer>", "1", "strict", "answer_tag", 0.0, "unparseable answer"),
    ("<answer>" + "1" * (MAX_ANSWER_CHARS + 1) + "</answer>", "1", "strict", "answer_tag", 0.0, "too long"),
    # words as gold (math-verify cannot parse them): compared as text
    ("<answer>Paris</answer>", "Paris", "strict", "answer_tag", 1.0, ""),
    ("<answer>Rome</answer>", "Paris", "strict", "answer_tag", 0.0, "not equivalent: Rome vs Paris (as text)"),
    ("<answer>sirap</answer>", "Paris", "strict", "answer_tag", 0.0, "as text"),  # not the product P·a·r·i·s
]


@pytest.mark.parametrize("pred,gold,mode,where,score,reason", CASES)
def test_math_reward_table(pred, gold, mode, where, score, reason):
    r = math_reward(pred, gold, mode=mode, where=where)
    assert r.score == score, r
    if reason:
        assert reason in r.reason
    else:
        assert r.reason == ""
    assert r.parts["equivalent"] == score
    assert r.parts["extracted"] == (0.0 if "no answer" in r.reason or r.reason.startswith(("hedged", "malformed")) else 1.0)


def test_table_has_at_least_40_cases():
    assert len(CASES) >= 40


@pytest.mark.parametrize("text,mode,where,expected", [
    ("\\boxed{\\frac{a}{b}}", "lenient", "answer_tag", ("\\frac{a}{b}", "boxed")),
    ("\\boxed{\\{1,2\\}}", "lenient", "answer_tag", ("\\{1,2\\}", "boxed")),
    ("\\boxed 5", "lenient", "answer_tag", ("5", "boxed")),
    ("<answer>1</answer> then <answer> 2 </answer>", "lenient", "answer_tag", (None, "hedged: 2 different <answer> blocks")),
    ("work\n#### 72", "lenient", "answer_tag", ("72", "gsm8k")),
    ("The final answer is: $\\frac{1}{2}$. Done.", "lenient", "answer_tag", ("$\\frac{1}{2}$", "answer_is")),
    ("the answer is 3.5.", "lenient", "answer_tag", ("3.5", "answer_is")),
    ("we get 1,234 and then -2.5", "lenient", "answer_tag", ("-2.5", "last_number")),
    ("no digits here", "lenient", "answer_tag", (None, "none")),
    ("#### 72", "strict", "answer_tag", (None, "none")),
    ("the answer is 7", "strict", "boxed", (None, "none")),
])
def test_extract_final_answer(text, mode, where, expected):
    assert extract_final_answer(text, mode, where) == expected


def test_bad_mode_and_where_fail_by_name():
    with pytest.raises(ValueError, match="mode"):
        extract_final_answer("1", mode="loose")
    with pytest.raises(ValueError, match="where"):
        make_math_reward("strict", where="end")


@pytest.mark.parametrize("chunk", ["blah { \\boxed{ ( [ 12 ", "<answer>", "}{\\", "the answer is ", "#### ", "9" * 50 + " "])
def test_huge_input_is_fast_and_safe(chunk):
    text = (chunk * (100_000 // len(chunk) + 1))[:100_000]  # 100k chars of adversarial repetition
    start = time.perf_counter()
    r = math_reward(text, "12")
    assert time.perf_counter() - start < 2.0
    assert 0.0 <= r.score <= 1.0
    assert math_reward("x" * 100_000 + " the answer is 12", "12").score == 1.0


def test_reward_functions_use_problem_answer():
    problems = [Problem("q", "12"), Problem("q", "0.5")]
    assert [r.score for r in math_answer_reward(problems, ["<answer>12</answer>", "half: 0.5"])] == [1.0, 0.0]
    lenient = make_math_reward("lenient")
    assert [r.score for r in lenient(problems, ["<answer>12</answer>", "half: 0.5"])] == [1.0, 1.0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=300), mode=st.sampled_from(["strict", "lenient"]), where=st.sampled_from(["answer_tag", "boxed"]))
def test_arbitrary_text_never_raises(text, mode, where):
    r = math_reward(text, "42", mode=mode, where=where)
    assert 0.0 <= r.score <= 1.0
    assert r.score == 1.0 or r.reason


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inner=st.text(alphabet="0123456789{}\\()[]^_/.,-+ boxedfracanswer<>$%", max_size=60))
def test_answer_shaped_junk_never_raises(inner):
    for text in (f"<answer>{inner}</answer>", f"\\boxed{{{inner}}}", inner):
        r = math_reward(text, "\\frac{1}{2}", mode="lenient")
        assert 0.0 <= r.score <= 1.0


THREAD_CASES = [("<answer>0.5</answer>", "1/2"), ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}"), ("<answer>3</answer>", "4"),
                ("<answer>\\{1,2\\}</answer>", "\\{2,1\\}"), ("<answer>🙃</answer>", "1")]


def test_worker_thread_gives_main_thread_verdicts():
    main = [math_reward(p, g) for p, g in THREAD_CASES]
    out: list = []
    errors: list = []

    def work():
        try:
            out.extend(math_reward(p, g) for p, g in THREAD_CASES)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join(timeout=60)
    assert not errors
    assert [(r.score, r.reason) for r in out] == [(r.score, r.reason) for r in main]
    assert [r.score for r in main] == [1.0, 1.0, 0.0, 1.0, 0.0]


def test_math_verify_in_a_thread_needs_the_timeout_off():
    # The reason the thread handling exists: math-verify's default timeout raises off the main thread.
    from math_verify import parse

    caught: list = []

    def work():
        try:
            parse("$1$")
        except ValueError as e:
            caught.append(str(e))

    t = threading.Thread(target=work)
    t.start()
    t.join(timeout=30)
    assert caught and "thread" in caught[0]


def test_outer_alarm_timer_survives_a_call():
    import signal

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("needs the main thread")
    old = signal.getitimer(signal.ITIMER_REAL)
    old_handler = signal.signal(signal.SIGALRM, lambda *a: None)
    try:
        signal.setitimer(signal.ITIMER_REAL, 100.0)
        assert math_reward("<answer>1</answer>", "1").score == 1.0
        assert 90.0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 100.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, *old)
        signal.signal(signal.SIGALRM, old_handler)
