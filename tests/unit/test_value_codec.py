"""The code-agent verdict's value codec: what the sandboxed run's `_plain` writes, the trainer's `decode`
reads back as an equal value — one module holds both halves' tag vocabulary."""

from __future__ import annotations

import ast
import collections
import datetime
import decimal
import fractions
import importlib.util
import pathlib
import types
import uuid
from pathlib import Path
from unittest import mock

import pytest

from seqrl.sandbox import value_codec

ENTRY = Path(value_codec.__file__).with_name("_pytest_entry.py")


@pytest.fixture(scope="module")
def plain():
    """The sandbox half: the pytest entry's `_plain`, loaded by path as the run loads it."""
    spec = importlib.util.spec_from_file_location("_entry_under_test", ENTRY)
    entry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entry)
    return entry._plain


VALUES = [
    {1, 2, 3}, frozenset({"a"}), collections.OrderedDict([("b", 1), ("a", 2)]), collections.Counter("abca"),
    collections.deque([1, 2]), datetime.datetime(2026, 12, 7, 20, 30, 1, 5), datetime.date(1999, 1, 2),
    datetime.time(23, 59, 1), datetime.timedelta(days=-3, seconds=7, microseconds=9), decimal.Decimal("1.10"),
    fractions.Fraction(-7, 3), range(2, 40, 3), types.SimpleNamespace(a=1, b=[2]), pathlib.PurePosixPath("a/b.py"),
    uuid.UUID("12345678-1234-5678-1234-567812345678"), 7 ** 5000, ("<set>", "a value's own tuple"),
    [{"k": (1, 2.5, "x", b"y", None)}], mock.call.f(1, x=2),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_what_the_run_encodes_the_trainer_decodes_to_an_equal_value(plain, value):
    text = repr(plain(value))  # what crosses: the repr of plain data
    back = value_codec.decode(ast.literal_eval(text))
    assert back == value and type(back) is not tuple or type(value) is tuple, (text, back)
    if isinstance(value, (collections.OrderedDict, collections.deque, decimal.Decimal)):
        assert type(back) is type(value)


def test_a_malformed_or_unknown_tag_is_no_value():
    with pytest.raises(ValueError, match="bad <decimal>"):
        value_codec.decode(("<decimal>", 3))
    with pytest.raises(ValueError, match="bad <range>"):
        value_codec.decode(("<range>", 0, 10**9, 1))  # too long to evaluate in the trainer
    assert value_codec.decode(("<nosuch>", 1)) == ("<nosuch>", 1)
    assert value_codec.decode(("<date>", "2026-12-07", "extra")) == ("<date>", "2026-12-07", "extra")
