"""The LaTeX-fraction shortcuts of `compare_answers` give math-verify's verdict without importing it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from seqrl.answers import _math_verify, _parse, compare_answers, latex_fraction

PAIRS = [  # (gold, pred)
    ("0.5", "\\frac{1}{2}"), ("0.5", "\\dfrac{2}{4}"), ("-0.75", "-\\frac{3}{4}"), ("2", "\\frac{4}{2}"),
    ("0.5", "\\frac12"), ("\\frac{1}{2}", "0.5"), ("\\frac{3}{4}", "0.75"), ("1/2", "\\tfrac{1}{2}"),
    ("0.5", "\\frac{1}{3}"), ("3", "\\frac{1}{3}"), ("\\frac{1}{2}", "0.4"), ("-0.5", "\\frac{1}{2}"),
    ("0.333333", "\\frac{1}{3}"), ("\\frac{1}{3}", "0.333333"),  # within math-verify's 6-decimal rounding
    ("0.33", "\\frac{1}{3}"), ("123456789.5", "\\frac{246913579}{2}"),
]


def _math_verify_verdict(gold: str, pred: str) -> bool:
    _, verify = _math_verify()
    return bool(verify(_parse(gold), _parse(pred), timeout_seconds=None, raise_on_error=True))


@pytest.mark.parametrize("gold,pred", PAIRS)
def test_shortcut_verdicts_match_math_verify(gold, pred):
    assert compare_answers(gold, pred)[0] == _math_verify_verdict(gold, pred)


def test_latex_fraction_reads_only_integer_fractions():
    assert latex_fraction("\\frac{-6}{4}") == latex_fraction("-\\frac{3}{2}")
    assert latex_fraction("\\frac{1}{0}") is None and latex_fraction("\\frac{1.5}{2}") is None
    assert latex_fraction("2\\frac{1}{2}") is None  # a mixed number is math-verify's to read


def test_a_fraction_against_a_number_does_not_import_math_verify():
    code = ("import sys\nfrom seqrl.answers import compare_answers\n"
            "assert compare_answers('0.5', '\\\\frac{1}{2}') == (True, '')\n"
            "assert compare_answers('0.5', '\\\\frac{1}{3}') == (False, 'not equivalent')\n"
            "print('math_verify' in sys.modules, 'sympy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
