"""The Countdown answer parser: exact values, precedence, and a clear refusal of everything else."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqrl.types import Problem
from seqrl.data.countdown import (
    MAX_DEPTH,
    MAX_EXPRESSION_CHARS,
    CountdownParseError,
    CountdownTask,
    check_numbers,
    parse_expression,
)


@pytest.mark.parametrize(
    "text, value, numbers",
    [
        ("(2+3)*4", Fraction(20), [2, 3, 4]),
        ("2+3*4", Fraction(14), [2, 3, 4]),
        ("8/3", Fraction(8, 3), [8, 3]),
        ("10-4-3", Fraction(3), [10, 4, 3]),  # left to right
        ("24/4/2", Fraction(3), [24, 4, 2]),
        ("2*3-4/8", Fraction(11, 2), [2, 3, 4, 8]),
        (" 2 * ( 3 + 4 ) ", Fraction(14), [2, 3, 4]),
        ("((7))", Fraction(7), [7]),
        ("3-7", Fraction(-4), [3, 7]),
    ],
)
def test_values_follow_precedence_and_parentheses(text, value, numbers):
    assert parse_expression(text) == (value, numbers)


@pytest.mark.parametrize(
    "text, message",
    [
        ("__import__('os')", "unexpected character '_' at position 0"),
        ("2**999999", "'**' is not allowed"),
        ("2* *3", "'**' is not allowed"),
        ("1e9", "unexpected character 'e' at position 1"),
        ("a+b", "unexpected character 'a' at position 0"),
        ("1.5+2", "unexpected character '.' at position 1"),
        ("()", "expected a number or '(' at position 1, got ')'"),
        ("-3+5", "expected a number or '(' at position 0, got '-'"),
        ("1+", "unexpected end of expression"),
        ("(1+2", "missing ')' at position 4"),
        ("1 2", "unexpected '2' at position 2"),
        ("1+2)", "unexpected ')' at position 3"),
        ("", "empty expression"),
        ("   ", "empty expression"),
        ("4/(2-2)", "division by zero"),
        ("(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH}"),
        ("1+" * 150 + "1", f"expression too long (301 > {MAX_EXPRESSION_CHARS} chars)"),
    ],
)
def test_rejects_with_a_reason(text, message):
    with pytest.raises(CountdownParseError, match=re.escape(message)):
        parse_expression(text)


def test_nesting_up_to_the_cap_is_fine():
    text = "(" * MAX_DEPTH + "1" + ")" * MAX_DEPTH
    assert parse_expression(text) == (Fraction(1), [1])


def test_parse_error_is_a_value_error():
    assert issubclass(CountdownParseError, ValueError)


@pytest.mark.parametrize(
    "used, given, require_all, reason",
    [
        ([3, 7, 25], [3, 7, 25], True, ""),
        ([25, 7, 3], [3, 7, 25], True, ""),
        ([7, 7], [3, 7, 25], True, "uses 7 twice"),
        ([7, 7, 7], [3, 7, 7], True, "uses 7 3 times (given 2)"),
        ([7, 7], [7, 7], True, ""),
        ([8, 3], [3, 7, 25], True, "uses 8, which is not given"),
        ([25, 3], [3, 7, 25], True, "does not use 7"),
        ([25], [3, 7, 25, 3], True, "does not use 3, 3, 7"),
        ([25, 3], [3, 7, 25], False, ""),
        ([3, 3], [3, 7, 25], False, "uses 3 twice"),
    ],
)
def test_number_rules(used, given, require_all, reason):
    assert check_numbers(used, given, require_all) == reason


FACTS = {"numbers": [3, 7, 25], "target": 154}
PROBLEM = Problem("Use 3 7 25 to make 154.", "(25-3)*7", metadata=FACTS)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_random_strings_never_make_verify_raise(text):
    for completion in (text, f"<answer>{text}</answer>"):
        result = CountdownTask().verify(PROBLEM, completion)
        assert result.score == 0.0 and result.reason


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789+-*/() ", max_size=250))
def test_expression_like_strings_parse_or_fail_cleanly(text):
    try:
        value, numbers = parse_expression(text)
    except CountdownParseError as err:
        assert str(err)
    else:
        assert isinstance(value, Fraction) and all(isinstance(n, int) for n in numbers)
