"""Verdicts under adversarial answers: hedges, equations, percent, normalisation, linear extraction."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqrl.data.arithmetic import ArithmeticTask
from seqrl.types import Problem
from seqrl.data.gsm import GSMTask
from seqrl.data.jsonl import answers_match
from seqrl.rewards.code import extract_code
from seqrl.answers import answer_key, compare_answers, guard
from seqrl.rewards.format import think_answer_format, think_answer_partial
from seqrl.rewards.math import extract_final_answer, find_boxed, math_reward

B = "\\boxed"

# (answer, gold, equal): every row a verdict that the shared comparison must give.
VERDICTS = [
    # hedges never score
    ("3 \\lor 4 \\lor 5", "5", False), ("3 or 4", "4", False), ("4 \\vee 3", "4", False),
    ("not 4", "4", False), ("\\neg 4", "4", False), ("\\pm 4", "4", False), ("±4", "4", False),
    ("\\{4\\}", "4", False), ("x \\neq 3", "4", False), ("x=3, x=4", "4", False), ("3, 4", "4", False),
    ("3; 4", "4", False), ("3 and 4", "4", False),
    # ... unless the gold has the same form
    ("\\pm 2", "\\pm 2", True), ("\\{2,1\\}", "\\{1,2\\}", True),
    # equations
    ("3=5", "5", False), ("5=5", "5", False), ("x=5", "5", True), ("x_1 = 3", "3", True),
    ("\\theta = \\pi", "\\pi", True), ("x = 2 = 5", "5", False),
    # percent: the sign is a unit label
    ("50\\%", "50", True), ("50%", "50", True), ("5000\\%", "50", False), ("50", "50\\%", True),
    ("50\\%", "0.5", False),
    # Unicode minus, full-width digits, thousands groups
    ("\u22125", "-5", True), ("-5", "\u22125", True), ("\uff15\uff10", "50", True),
    ("3,4", "34", False), ("1,234", "1234", True), ("1{,}234", "1234", True), ("12,345,678", "12345678", True),
    ("1,2345", "12345", False), ("1234,567", "1234567", False),
    # equal values in other forms
    ("\\sqrt{25}", "5", True), ("10^{3}", "1000", True), ("\\text{5}", "5", True), ("\\frac{1}{2}", "0.5", True),
    ("0.5", "1/2", True), ("\\sqrt{24}", "5", False),
]


@pytest.mark.parametrize("answer,gold,equal", VERDICTS)
def test_shared_comparison(answer, gold, equal):
    got, reason = compare_answers(gold, answer)
    assert got == equal, reason
    assert (reason == "") == equal


@pytest.mark.parametrize("answer,gold,equal", VERDICTS)
def test_math_reward_and_jsonl_verifier_agree(answer, gold, equal):
    assert math_reward(f"<answer>{answer}</answer>", gold, mode="strict").score == float(equal)
    assert answers_match(gold, answer) == equal


@pytest.mark.parametrize("answer,equal", [("\u22125", True), ("-5", True), ("\uff0d\uff15", True), ("-5.0", True),
                                          ("3 or -5", False), ("x=-5", True), ("5", False)])
def test_arithmetic_verifier_shares_the_comparison(answer, equal):
    result = ArithmeticTask().verify(Problem("3-8=", "-5"), f"<answer>{answer}</answer>")
    assert result.score == float(equal), result.reason


@pytest.mark.parametrize("answer,gold,equal", [("3,4", "34", False), ("\u22125", "-5", True), ("1,234", "1234", True),
                                               ("$1,000", "1000", True), ("3 or 4", "4", False)])
def test_gsm_verifier_shares_the_comparison(answer, gold, equal):
    result = GSMTask().verify(Problem("...", gold), f"<answer>{answer}</answer>")
    assert result.score == float(equal), result.reason


@pytest.mark.parametrize("answer,why", [
    ("9^{9^{9^{9}}}", "exponent tower"), ("9^9^9", "exponent tower"), ("2**2**100", "exponent tower"),
    ("(1+x)^{100000}", "exponent too large"), ("\\binom{10^{7}}{5000000}", "too large"),
    ("100000!", "too large"), ("{" * 40 + "1" + "}" * 40, "nested too deep"), ("1" * 600, "too long"),
    ("\\frac{1}{2", "unbalanced"), ("(10^{999})^{999}", "too large together"), ("(100!)!", "factorial of an expression"),
    ("(1+x)^{1000}", "bracketed"), ("(a+b+c)^{30}", "bracketed"), ("(a+b)^{6}\\cdot(a+b)^{6}", "bracketed"),
    ("\\sum_{k=1}^{100000} k", "too large"), ("\\sum_{k=1}^{5} 5000k", "bound too large"), ("\\binom{5000}{2}", "too large"),
    # Γ(n) = (n−1)!: 6 s for Γ(999999) on a warm worker
    ("\\Gamma(999999)", "Gamma too large"), ("\\operatorname{Gamma}(99999)", "Gamma too large"),
    ("\\Gamma(\\Gamma(10))", "Gamma of a computed"), ("\\Gamma(10^{6})", "Gamma of a computed"),
    ("\\Gamma(999 \\cdot 999)", "Gamma of a computed"),
    # eleven nested fractions / roots, within the bracket-nesting limit
    ("1+\\frac{1}{" * 11 + "2" + "}" * 11, "nested too deep"), ("\\sqrt{2+" * 11 + "2" + "}" * 11, "nested too deep"),
    # wide brackets multiplied out: (10 terms)^6 is 5005 monomials, 13 s
    ("(a+b+c+d+e+f+g+h+i+j)^{6}", "too many terms"), ("((a+b+c+d)(e+f+g+h)(i+j+k+l))^{6}", "too many terms"),
    ("(a+b+c+d+e+f)" * 6, "too many terms"),
    # a sum over a free bound with a large power: Faulhaber's formula to degree 200 takes 2.6 s
    ("\\sum_{k=1}^{n} k^{200}", "symbolic bound"), ("\\prod_{k=1}^{n} k^{101}", "symbolic bound"),
    # the same classes written around the first guards' patterns
    ("(a+b+c+d+e+f+g+h+i+j) ^{6}", "too many terms"), ("(a+b+c+d+e+f+g+h+i+j) **6", "too many terms"),
    ("\\sum\\limits_{k=1}^{n} k^{200}", "symbolic bound"), ("\\sum_{k=1}^{{n}} k^{200}", "symbolic bound"),
    ("\\Gamma(999\\cdot999\\cdot999+x-x)", "Gamma of a computed"),
    ("\\frac{\\sqrt{2}}{" * 11 + "2" + "}" * 11, "nested too deep"),
])
def test_guards_refuse_costly_answers_before_parsing(answer, why):
    assert why in guard(answer)
    r = math_reward(f"<answer>{answer}</answer>", "1", mode="strict")
    assert r.score == 0.0 and why in r.reason


def test_same_verdicts_in_a_worker_thread():
    cases = [(a, g) for a, g, _ in VERDICTS]
    main = [compare_answers(g, a) for a, g in cases]
    out: list = []
    thread = threading.Thread(target=lambda: out.extend(compare_answers(g, a) for a, g in cases))
    thread.start()
    thread.join()
    assert out == main


def test_math_verify_writes_nothing_to_stderr(capfd):
    math_reward("<answer>\\frac{1}{2}</answer>", "0.5")
    math_reward("<answer>\\sqrt{</answer>", "0.5")
    assert capfd.readouterr().err == ""


# --- boxes, corrections, malformed answers (issue: a box in a box, unclosed boxes, corrections) ---

def test_box_inside_a_box_is_one_answer():
    assert find_boxed(f"{B}{{{B}{{7}}}}") == ["7"]
    assert math_reward(f"so {B}{{ {B}{{{B}{{7}}}} }}", "7").score == 1.0
    assert math_reward(f"{B}{{{B}{{7}}}} and again {B}{{7}}", "7", mode="strict", where="boxed").score == 1.0


@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_unclosed_box_earns_nothing(mode):
    for text in (f"the sum is 12 so {B}{{12", f"{B}{{12}} then {B}{{12", f"{B}{{{B}{{12}}"):
        r = math_reward(text, "12", mode=mode, where="boxed")
        assert r.score == 0.0 and r.reason.startswith("malformed"), (text, r)


def test_a_correction_is_scored_on_the_last_statement():
    text = "The answer is 3, so ... wait, recount: the final answer is 5."
    assert extract_final_answer(text) == ("5", "answer_is")
    assert math_reward(text, "5").score == 1.0 and math_reward(text, "3").score == 0.0
    assert extract_final_answer(f"{B}{{3}} hmm, no. The answer is 5") == ("5", "answer_is")
    assert extract_final_answer(f"The answer is 3.\nActually {B}{{5}}") == ("5", "boxed")
    assert extract_final_answer("The answer is 3.\n#### 5") == ("5", "gsm8k")


_pieces = st.sampled_from([f"{B}{{", "}", "{", "7", "8", " ", "\\{", "\\}", "x", f"{B}{{7}}", "the answer is ", "\n"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_pieces, max_size=30))
def test_box_extraction_properties(pieces):
    text = "".join(pieces)
    answer, source = extract_final_answer(text, "strict", "boxed")
    if source.startswith("malformed"):
        assert answer is None
        assert math_reward(text, "7", mode="lenient").score == 0.0  # never a fallback
    for box in find_boxed(text):  # every box found is balanced and is not itself a single wrapped box
        depth = 0
        for i, ch in enumerate(box):
            if ch == "\\":
                continue
            if ch == "{" and (i == 0 or box[i - 1] != "\\"):
                depth += 1
            elif ch == "}" and (i == 0 or box[i - 1] != "\\"):
                depth -= 1
                assert depth >= 0
        assert not (box.startswith(f"{B}{{") and box.endswith("}") and find_boxed(box) == [box[7:-1].strip()]
                    and f"{B}{{" not in box[7:-1])


@settings(max_examples=80, deadline=None)
@given(st.integers(min_value=1, max_value=6), st.sampled_from(["7", "\\frac{14}{2}", "7.0"]))
def test_nested_and_repeated_same_answer_scores(depth, value):
    text = f"{B}{{" * depth + value + "}" * depth
    assert math_reward(f"{text} and so {text}", "7", mode="strict", where="boxed").score == 1.0


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(["3", "5", "x"]), min_size=2, max_size=4, unique=True))
def test_different_boxes_are_a_hedge(values):
    text = " ".join(f"{B}{{{v}}}" for v in values)
    assert math_reward(text, values[-1], mode="strict", where="boxed").score == 0.0


# --- linear extraction on large adversarial inputs (quadratic before: 4-13 s and 1.5 GB) ---

@pytest.mark.timeout(10)
def test_nested_boxes_are_linear():
    text = f"{B}{{" * 20_000 + "1" + "}" * 20_000
    assert find_boxed(text) == ["1"]
    assert math_reward(text, "1").score == 1.0
    assert math_reward(f"{B}{{" * 20_000, "1").score == 0.0  # all unclosed


@pytest.mark.timeout(10)
def test_format_reward_is_linear_on_repeated_tags():
    for text in ("<think>" * 40_000, "<think>a</think>" * 20_000, "<think></think>\n<answer>" * 20_000 + "x",
                 "<think>" + "</think> " * 30_000 + "<answer>1</answer>"):
        assert think_answer_format(text).score == 0.0
        think_answer_partial(text)
    assert think_answer_format("<think>a</think><answer>1</answer>" * 2).reason == "each tag must appear exactly once"


@pytest.mark.timeout(10)
def test_extract_code_is_linear_on_fences():
    assert extract_code("```python\n" * 20_000)[1] == "fence"
    assert extract_code("```python\nx = 1\n" + "y\n" * 50_000) == ("x = 1\n" + "y\n" * 50_000, "fence")
    assert extract_code("```" * 50_000)[1] == "text"
    text = "```\nx\n```" + "```py" * 30_000
    assert extract_code(text) == ("x\n", "fence")
    assert extract_code("``` " * 30_000 + "\nprint(1)")[1] == "fence"


@pytest.mark.timeout(10)
def test_large_answers_are_refused_cheaply():
    for answer in ("9^" * 50_000 + "9", "(" * 50_000 + "1" + ")" * 50_000, "1,2" * 50_000, "or " * 50_000):
        assert math_reward(f"<answer>{answer}</answer>", "1", mode="strict").score == 0.0


@pytest.mark.parametrize("answer", ["\\Gamma(5)", "\\Gamma(\\frac{1}{2})", "\\Gamma(x+1)", "(a+b+c+d)^{6}", "(x+1)(x-2)",
                                    "\\frac{1}{\\frac{1}{\\frac{1}{2}}}", "\\sqrt[3]{\\sqrt{2}}", "\\sum_{k=1}^{10} k",
                                    "3x^{2}+2x+1", "1.5e-3", "\\Gamma\\left(\\frac{1}{2}\\right)", "\\Gamma(0.5)",
                                    "\\Gamma(x)^2", "\\Gamma(x)\\Gamma(3)", "(x-1)(x-2)(x-3)(x-4)(x-5)(x-6)(x-7)",
                                    "\\sum_{k=1}^{\\infty} \\frac{1}{k^2}", "\\frac{\\sqrt{2}}{2}"])
def test_guards_let_ordinary_answers_through(answer):
    assert guard(answer) == ""


@pytest.mark.parametrize("answer,gold,equal", [("2³", "8", True), ("2³", "23", False), ("10³", "1000", True),
                                               ("10³", "103", False), ("x₁₀", "x_{10}", True), ("\\Gamma(5)", "24", True)])
def test_superscript_digits_are_powers_not_digits(answer, gold, equal):
    assert compare_answers(gold, answer)[0] is equal


# (gold, answer, equal): a sum or product is its index, both bounds and its body, not "\\sum_{k" = answer
SUMS = [
    ("\\sum_{k=1}^{n} k", "\\sum_{i=1}^{n} i", True), ("\\sum_{k=1}^{n} \\sin(k)", "\\sum_{j=1}^{n} \\sin(j)", True),
    ("\\sum_{k=1}^{n} k", "\\sum_{k=2}^{n} k", False), ("\\sum_{k=1}^{n} k", "\\sum_{k=1}^{n-1} k", False),
    ("\\sum_{k=1}^{n} k", "\\sum_{k=1}^{n} k^{2}", False), ("\\sum_{k=1}^{n} k", "\\sum_{i=1}^{n} k", False),
    ("\\sum_{k=1}^{10} k", "\\sum_{i=1}^{10} i", True), ("\\sum_{k=1}^{10} k", "\\sum_{k=2}^{10} k", False),
    ("\\sum_{k=1}^{10} k", "\\sum_{k=1}^{9} k", False), ("\\sum_{k=1}^{10} k", "\\sum_{k=1}^{10} 2k", False),
    ("55", "\\sum_{k=1}^{10} k", True), ("\\sum_{k=1}^{10} k", "55", True), ("55", "S = \\sum_{k=1}^{10} k", True),
    ("1", "\\sum_{k=1}^{10} k", False), ("10", "\\sum_{k=1}^{10} k", False), ("k", "\\sum_{k=1}^{10} k", False),
    ("55", "\\sum\\limits_{k=1}^{10} k", True), ("1", "\\sum\\limits_{k=1}^{10} k", False),
    ("\\frac{n(n+1)}{2}", "\\sum_{k=1}^{n} k", True), ("7n", "\\sum_{k=1}^{n} 7", True), ("7", "\\sum_{k=1}^{n} 7", False),
    ("\\prod_{k=1}^{n} 2k", "\\prod_{i=1}^{n} 2i", True), ("\\prod_{k=1}^{n} 2k", "\\prod_{k=2}^{n} 2k", False),
    ("\\prod_{k=1}^{n} 2k", "\\prod_{k=1}^{n+1} 2k", False), ("\\prod_{k=1}^{n} 2k", "\\prod_{k=1}^{n} 3k", False),
    ("120", "\\prod_{k=1}^{5} k", True), ("1", "\\prod_{k=1}^{5} k", False), ("5", "\\prod_{k=1}^{5} k", False),
]


@pytest.mark.parametrize("gold,answer,equal", SUMS)
def test_sums_and_products_compare_index_bounds_and_body(gold, answer, equal):
    got, reason = compare_answers(gold, answer)
    assert got is equal, reason
    assert (reason == "") == equal


@pytest.mark.parametrize("answer", ["\\sum_{k=1}^{n}", "\\sum_{k=1}^{10}", "\\sum_k k", "\\sum_{k=1} k", "\\prod^{5} k",
                                    "2 + \\left(\\prod_{k=1}^{5}\\right)"])
def test_a_sum_without_index_bounds_and_body_earns_nothing_with_a_reason(answer):
    for gold in ("1", "55", "120", "k"):
        got, reason = compare_answers(gold, answer)
        assert not got and "sum/product" in reason, (gold, reason)


def test_sums_with_different_indices_get_different_vote_keys():
    assert answer_key("\\sum_{k=1}^{10} j") != answer_key("\\sum_{j=1}^{10} j")  # 10j and 55
