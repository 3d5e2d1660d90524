"""The value codec of the code-agent verdict: how an observed value crosses from the sandboxed test run
to the trainer and back. Plain data travels as its ``repr`` (read with ``ast.literal_eval``); what that
cannot rebuild travels as a *tagged tuple* ``("<tag>", fields...)``. Both halves live here, standard
library only: the pytest entry loads this file by path inside the sandbox and encodes with `encode_stdlib`,
`bigint` and `escape_tuple`; the trainer decodes with `decode`.

Encoding reads each value through its base type's own accessors (``datetime.isoformat``,
``set.__iter__`` …) on the class, never the value's overridable methods.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import fractions
import pathlib
import types
import uuid

MAX_RANGE = 1_000_000
"""A decoded ``range`` longer than this is refused (the trainer evaluates checks on it)."""

BIGINT_BITS = 12_000
"""Integers longer than this travel as hex (``repr`` has a digit limit; hex parses in linear time)."""


def tagged(v) -> bool:
    """Whether `v` is shaped like a tagged tuple (only the encoder writes one; a value's own tuple that
    looks like one travels escaped, `escape_tuple`)."""
    return isinstance(v, tuple) and bool(v) and isinstance(v[0], str) and v[0].startswith("<")


def escape_tuple(items: list) -> tuple:
    """A value's own tuple of encoded items: escaped as ``("<tuple>", items)`` where it starts like a tag."""
    items = tuple(items)
    return ("<tuple>", items) if items and isinstance(items[0], str) and items[0].startswith("<") else items


def bigint(x: int) -> tuple | None:
    """``("<bigint>", hex)`` for an integer longer than `BIGINT_BITS`, else None."""
    return ("<bigint>", hex(int.__index__(x))) if int.bit_length(x) > BIGINT_BITS else None


def encode_stdlib(x, t: type, sub):
    """The tagged form of `x` (of type `t`) for the standard-library value types the codec knows — sets,
    ordered and counting dicts, dict views, deques, dates and times, decimals, fractions, ranges,
    namespaces, paths, UUIDs — with `sub` encoding each contained value; None for any other type."""
    if issubclass(t, (set, frozenset)):  # the trainer rebuilds a frozenset (hashable, == a set)
        return ("<set>", tuple(sub(v) for v in (set.__iter__(x) if issubclass(t, set) else frozenset.__iter__(x))))
    if issubclass(t, collections.OrderedDict):  # equality sees the order
        return ("<odict>", [(sub(k), sub(v)) for k, v in dict.items(x)])
    if issubclass(t, collections.Counter):  # a zero count equals a missing key
        return ("<counter>", {sub(k): sub(v) for k, v in dict.items(x) if v})
    if t in (type({}.keys()), type({}.items())):  # set-like views (`d.keys() == {"a"}`)
        return ("<set>", tuple(sub(v) for v in x))
    if t is collections.deque:  # equals only a deque
        return ("<deque>", [sub(v) for v in list(x)])
    if issubclass(t, datetime.datetime):
        return ("<datetime>", datetime.datetime.isoformat(x))
    if issubclass(t, datetime.date):
        return ("<date>", datetime.date.isoformat(x))
    if issubclass(t, datetime.time):
        return ("<time>", datetime.time.isoformat(x))
    if issubclass(t, datetime.timedelta):
        get = datetime.timedelta.__getattribute__
        return ("<timedelta>", int(get(x, "days")), int(get(x, "seconds")), int(get(x, "microseconds")))
    if issubclass(t, decimal.Decimal):  # exact, as == and < would be in the run
        return ("<decimal>", decimal.Decimal.__str__(x))
    if issubclass(t, fractions.Fraction):
        return ("<fraction>", int(x.numerator), int(x.denominator))
    if issubclass(t, range):
        return ("<range>", range.start.__get__(x), range.stop.__get__(x), range.step.__get__(x))
    if t is types.SimpleNamespace:
        return ("<namespace>", {str(k): sub(v) for k, v in vars(x).items()})
    if issubclass(t, pathlib.PurePath):
        return ("<path>", str(pathlib.PurePath.__str__(x)))
    if issubclass(t, uuid.UUID):
        return ("<uuid>", str(uuid.UUID.__str__(x)))
    return None


def _checked(kind, value):
    if not isinstance(value, kind):
        raise TypeError(kind.__name__)
    return value


def _range(a, b, c):
    r = range(_checked(int, a), _checked(int, b), _checked(int, c))
    if len(r) > MAX_RANGE:
        raise ValueError("range too long to evaluate here")
    return r


def mock_call(name, args, kwargs):
    """A ``unittest.mock.call`` rebuilt from its decoded name, arguments and keywords."""
    from unittest import mock

    return mock._Call((_checked(str, name), tuple(_checked(tuple, args)), dict(_checked(dict, kwargs))))


def _call_list(calls):
    from unittest import mock

    return mock._CallList(_checked(list, calls))


REBUILD = {  # tag → (tuple length, constructor from the tag's decoded fields)
    "<decimal>": (2, lambda t: decimal.Decimal(_checked(str, t))),
    "<fraction>": (3, lambda n, d: fractions.Fraction(_checked(int, n), _checked(int, d))),
    "<range>": (4, _range),
    "<call>": (4, mock_call),
    "<calllist>": (2, _call_list),
    "<timedelta>": (4, lambda d, sec, us: datetime.timedelta(days=d, seconds=sec, microseconds=us)),
    "<datetime>": (2, lambda t: datetime.datetime.fromisoformat(_checked(str, t))),
    "<date>": (2, lambda t: datetime.date.fromisoformat(_checked(str, t))),
    "<time>": (2, lambda t: datetime.time.fromisoformat(_checked(str, t))),
    "<path>": (2, lambda t: pathlib.PurePosixPath(_checked(str, t))),
    "<uuid>": (2, lambda t: uuid.UUID(_checked(str, t))),
    "<namespace>": (2, lambda d: types.SimpleNamespace(**_checked(dict, d))),
    "<odict>": (2, lambda pairs: collections.OrderedDict(_checked(list, pairs))),
    "<counter>": (2, lambda d: collections.Counter(_checked(dict, d))),
    "<deque>": (2, lambda items: collections.deque(_checked(list, items))),
}


def decode(v, extra: dict | None = None, depth: int = 0):
    """Decoded plain data back as Python values: ``("<set>", items)`` → a frozenset (equal to the set it
    was), ``("<bigint>", hex)`` → the integer, the `REBUILD` tags (and `extra`'s: the trainer adds
    ``<approx>``) → their values; a tag not known, or with the wrong number of fields, stays a tuple
    (it equals no value it could stand for). Raises ValueError on a malformed field."""
    if depth > 200:
        raise ValueError("too deep")
    if isinstance(v, tuple):
        tag = v[0] if tagged(v) else None
        if tag == "<tuple>" and len(v) == 2 and isinstance(v[1], tuple):  # a value's own tuple, not a tag
            return tuple(decode(x, extra, depth + 1) for x in v[1])
        if tag == "<set>" and len(v) == 2 and isinstance(v[1], tuple):
            return frozenset(decode(x, extra, depth + 1) for x in v[1])
        if tag == "<bigint>" and len(v) == 2 and isinstance(v[1], str) and len(v[1]) < 1_000_000:
            return int(v[1], 16)
        rebuilt = (extra or {}).get(tag) or REBUILD.get(tag)
        if rebuilt is not None and len(v) == rebuilt[0]:
            try:
                return rebuilt[1](*[decode(x, extra, depth + 1) for x in v[1:]])
            except Exception as e:  # noqa: BLE001 — a malformed tag is no value
                raise ValueError(f"bad {tag}") from e
        return tuple(decode(x, extra, depth + 1) for x in v)
    if isinstance(v, list):
        return [decode(x, extra, depth + 1) for x in v]
    if isinstance(v, dict):
        return {decode(k, extra, depth + 1): decode(x, extra, depth + 1) for k, x in v.items()}
    if isinstance(v, (set, frozenset)):
        return type(v)(decode(x, extra, depth + 1) for x in v)
    return v
