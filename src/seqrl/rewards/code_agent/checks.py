"""The checks decided in the trainer: `Expect` trees evaluated on plain values, observation lines parsed as
untrusted data and tagged values rebuilt (`_untag`: `seqrl.sandbox.value_codec`, whose encoding half the
sandbox's `_plain` in `seqrl/sandbox/_pytest_entry.py` uses)."""

from __future__ import annotations

import ast
import datetime
import decimal
import fractions
import math
import operator
import pathlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from seqrl.sandbox import value_codec


OBSERVE = "__seqrl_observe__"


def _literal(node: ast.AST) -> tuple[bool, object]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


@dataclass(frozen=True)
class Expect:
    """One externalized check: an expression tree evaluated here on plain values. Leaves are
    ``("lit", value)`` (kept here, never in the sandbox) or ``("obs", i)`` (the i-th value the run
    observes); inner nodes are comparisons, arithmetic on numbers, ``abs/round/min/max/sum``,
    ``pytest.approx``, ``math.isclose``, displays, and unittest's almost-equal."""

    tree: tuple
    n_obs: int
    pool: tuple = ()
    """A comparison with a literal (``v == (1, 0, 0)``): the literal among the module's other literals of
    its type, shuffled — what the run compares a value that is not plain data with (`Candidates`)."""
    real: int = -1
    """The literal's place in `pool` (never in the run)."""
    module: tuple = ()
    """The places in `pool` of the module's other literals (the rest are made up)."""

    def holds(self, observed) -> bool:
        """Whether the observation (a tuple of plain values, as parsed) satisfies the check; a `Verdict`
        is pytest's own (only where the rewrite allowed it: the suite's own objects); `Candidates`, the
        run's answers against the pool, are read here with the literal's place."""
        if isinstance(observed, Verdict):
            return observed.passed and _fallback_policy(self.tree) is not None
        if isinstance(observed, Candidates):
            return self.real >= 0 and observed.verdict(self.tree, self.pool, self.real, self.module)
        if not isinstance(observed, tuple) or len(observed) != self.n_obs:
            return False
        try:
            result = _evaluate(self.tree, observed)
        except Exception:  # noqa: BLE001 — a type error, an unorderable mix …: not satisfied
            return False
        return result is True or (type(result) is bool and result)


_CMP = {"Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt,
        "GtE": operator.ge, "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b}


_BIN = {"Add": operator.add, "Sub": operator.sub, "Mult": operator.mul, "Div": operator.truediv,
        "FloorDiv": operator.floordiv, "Mod": operator.mod, "Pow": operator.pow}


_UNARY = {"USub": operator.neg, "UAdd": operator.pos, "Not": operator.not_}


_CALLS = ("abs", "round", "min", "max", "sum", "approx", "isclose")


_NUMBER = (bool, int, float, complex)


_MAX_BITS = 1 << 16  # integer arithmetic on observed values stays this small (no memory bombs here)


def _evaluate(node: tuple, observed: tuple):
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "obs":
        return observed[node[1]]
    if kind == "cmp":
        return bool(_CMP[node[1]](_evaluate(node[2], observed), _evaluate(node[3], observed)))
    if kind == "bin":
        return _binop(node[1], _evaluate(node[2], observed), _evaluate(node[3], observed))
    if kind == "chain":  # a == b == c: pairwise, stopping at the first false link
        values = [_evaluate(t, observed) for t in node[2]]
        return all(bool(_CMP[op](values[i], values[i + 1])) for i, op in enumerate(node[1]))
    if kind == "count":  # assertCountEqual: the same elements, each as often (== , not hashing)
        a, b = _evaluate(node[1], observed), _evaluate(node[2], observed)
        if not all(isinstance(x, (list, tuple, str, bytes, frozenset, set, dict, range)) for x in (a, b)) \
                or len(a) != len(b) or len(a) > 2000:
            return False
        a, b = list(a), list(b)
        return all(sum(1 for y in a if y == x) == sum(1 for y in b if y == x) for x in a)
    if kind == "unary":
        return _UNARY[node[1]](_evaluate(node[2], observed))
    if kind in ("list", "tuple", "set"):
        items = [_evaluate(x, observed) for x in node[1]]
        return {"list": list, "tuple": tuple, "set": set}[kind](items)
    if kind == "dict":
        return {_evaluate(k, observed): _evaluate(v, observed) for k, v in node[1]}
    if kind == "call":
        args = [_evaluate(a, observed) for a in node[2]]
        kwargs = {k: _evaluate(v, observed) for k, v in node[3]}
        if node[1] == "approx":
            from pytest import approx

            return approx(*args, **kwargs)
        if node[1] == "isclose":
            return math.isclose(*args, **kwargs)
        if node[1] == "round" and len(args) > 1 and isinstance(args[1], int) and abs(args[1]) > 400:
            raise OverflowError("round digits")
        if node[1] == "sum" and len(args) > 1 and isinstance(args[1], _SEQ):  # sum(lists, []): quadratic
            if not isinstance(args[0], (list, tuple)) or sum(len(x) for x in args[0] if isinstance(x, _SEQ)) \
                    + len(args[0]) > 10_000:
                raise OverflowError("sum of sequences too large")
        return {"abs": abs, "round": round, "min": min, "max": max, "sum": sum}[node[1]](*args, **kwargs)
    if kind == "any":
        from unittest import mock

        return mock.ANY
    if kind == "mockcall":
        args = tuple(_evaluate(a, observed) for a in node[2])
        kwargs = {k: _evaluate(v, observed) for k, v in node[3]}
        return value_codec.mock_call(node[1], args, kwargs)
    if kind == "quant":  # all()/any() of a comparison: the pairs the observer consumed, and whether it ran out
        pairs, done = _evaluate(node[3], observed)
        if not isinstance(pairs, list) or not all(isinstance(x, tuple) and len(x) == 2 for x in pairs):
            raise TypeError("pairs")
        results = [bool(_CMP[node[2]](a, b)) for a, b in pairs]
        return (done is True and all(results)) if node[1] == "all" else any(results)
    if kind == "almost":  # unittest's assertAlmostEqual / assertNotAlmostEqual
        a, b = _evaluate(node[1], observed), _evaluate(node[2], observed)
        places, delta = _evaluate(node[3], observed), _evaluate(node[4], observed)
        if a == b:
            close = True
        elif delta is not None:
            close = abs(a - b) <= delta
        else:
            close = round(abs(a - b), 7 if places is None else places) == 0
        return close != node[5]
    raise ValueError(f"unknown check node {kind!r}")


_ARITH = (bool, int, float, complex, decimal.Decimal, fractions.Fraction, datetime.date, datetime.time,
          datetime.timedelta)


_SEQ = (str, bytes, list, tuple)


_MAX_ITEMS = 1_000_000


def _binop(op: str, a, b):
    """Arithmetic here on observed values: numbers, Decimals, Fractions and dates as Python does it;
    sequences concatenated or repeated, and paths joined, within size limits (no memory bombs)."""
    if isinstance(a, _ARITH) and isinstance(b, _ARITH):
        if op == "Pow" and (abs(b) > 4096 if isinstance(b, (int, float, decimal.Decimal, fractions.Fraction))
                            else True):
            raise OverflowError("exponent too large")
        out = _BIN[op](a, b)
        if isinstance(out, int) and out.bit_length() > _MAX_BITS:
            raise OverflowError("integer too large")
        return out
    if op == "Add" and type(a) is type(b) and isinstance(a, _SEQ) and len(a) + len(b) <= _MAX_ITEMS:
        return a + b
    if op == "Mod" and type(a) is str and isinstance(b, (*_ARITH, str, tuple)) and len(a) <= 10_000 \
            and not re.search(r"%[^a-zA-Z%]*(\d{4,}|\*)", a):  # "0x%x" % n; no huge or starred widths
        return a % b
    if op == "Mult":
        seq, n = (a, b) if isinstance(a, _SEQ) else (b, a)
        if isinstance(seq, _SEQ) and type(n) is int and len(seq) * max(n, 0) <= _MAX_ITEMS:
            return seq * n
    if op == "Div" and isinstance(a, pathlib.PurePath) and isinstance(b, (str, pathlib.PurePath)):
        return a / b
    raise TypeError(f"{op} of {type(a).__name__} and {type(b).__name__} is not evaluated here")


@dataclass(frozen=True)
class Verdict:
    """pytest's own verdict on a check whose leaves are all the suite's own objects (``~True``)."""

    passed: bool


@dataclass(frozen=True)
class Candidates:
    """The run's answers for a value that is not plain data compared with a literal: per pool entry
    ``(equal, order, near)`` — ``value == entry`` (None: it raised), ``(<, ==, >)`` of the test's left
    side against its right (orders only; None where a comparison raised), and ``value == x`` for each
    value next to the entry. The run does not know which entry is the literal."""

    answers: tuple

    def verdict(self, tree: tuple, pool: tuple, real: int, module: tuple = ()) -> bool:
        """The check holds where the literal's own answer says so and, where that answer is "equal", the
        probes a lying comparison fails say yes: ``value`` equals no value next to the literal, not every made-up entry, and not more than
        half of the module's other literals when it equals two or more (an object equal to whatever the
        tests hold; equal spellings such as ``"1.0"`` and ``"1.0.0"`` stay possible); for an
        order, exactly one of ``<``, ``==``, ``>`` holds against the literal (the order of a package's
        objects need not be the literal type's own: ``Version("1.10") > "1.9"``)."""
        negated = tree[0] == "unary"
        cmp = tree[2] if negated else tree
        if len(self.answers) != len(pool) or not 0 <= real < len(pool) or cmp[0] != "cmp":
            return False
        equal, sign, near = self.answers[real]  # sign: the (<, ==, >) answers
        if equal is True:  # a claim of equality stands on the probes (one of inequality needs none)
            if any(x is True for x in near):  # raising counts as not equal
                return False
            made = [a[0] is True for i, a in enumerate(self.answers) if i != real and i not in module]
            if made and all(made):
                return False
            theirs = [self.answers[i][0] is True for i in module if i != real and 0 <= i < len(pool)]
            if sum(theirs) >= 2 and 2 * sum(theirs) > len(theirs):
                return False
        op = cmp[1]
        if op in ("Eq", "NotEq"):
            result = (equal is True) == (op == "Eq")
        else:  # an order that says it holds says exactly one of <, ==, > (one saying yes to all fails)
            if sign is None or op not in ("Lt", "LtE", "Gt", "GtE"):
                return False
            lt, eq, gt = sign
            result = {"Lt": lt, "LtE": lt or eq, "Gt": gt, "GtE": gt or eq}[op]
            if result and sum(sign) != 1:
                return False
        return result != negated


def _read_candidates(value) -> Candidates | None:
    """`Candidates` from the parsed ``~C`` text, or None where it is not shaped like one."""
    if not isinstance(value, list):
        return None
    for a in value:
        if not (isinstance(a, tuple) and len(a) == 3 and a[0] in (True, False, None)
                and (a[1] is None or (isinstance(a[1], tuple) and len(a[1]) == 3
                                      and all(type(x) is bool for x in a[1])))
                and isinstance(a[2], tuple) and all(x in (True, False, None) and type(x) in (bool, type(None))
                                                    for x in a[2])
                and type(a[0]) in (bool, type(None))):
            return None
    return Candidates(tuple(value))


def _fallback_policy(tree: tuple):
    """Where the observer may report pytest's own verdict: ``"pair"`` for one comparison (``==`` ``!=``
    ``<`` ``<=`` ``>`` ``>=``, or ``not`` of one) with no literal — its two sides probed in the run:
    objects of the tests' classes, or passing the probes, one of them possibly plain — ``"all"`` for a
    chain with no literal whose leaves all turn out not to be plain data, the leaf index of an ``in``'s
    container, else None."""
    if tree[0] == "cmp" and tree[1] in ("In", "NotIn") and tree[3][0] == "obs":
        return tree[3][1]
    inner = tree[2] if tree[0] == "unary" and tree[1] == "Not" else tree
    if inner[0] == "cmp" and inner[1] in ("Eq", "NotEq", "Lt", "LtE", "Gt", "GtE") and not _has_literal(inner):
        return "pair"
    if tree[0] in ("cmp", "chain") and not _has_literal(tree):
        return "all"
    return None


def _has_literal(tree) -> bool:
    if isinstance(tree, tuple) and tree and tree[0] == "lit":
        return True
    return isinstance(tree, tuple) and any(_has_literal(x) for x in tree if isinstance(x, tuple))


def _parse_value(text: str):
    """A Python literal as ``repr`` writes plain data, ``inf`` and ``nan`` included; raises ValueError."""
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.Name) and value.id in ("inf", "nan"):
                setattr(node, name, ast.Constant(float(value.id)))
            elif isinstance(value, list):
                value[:] = [ast.Constant(float(v.id)) if isinstance(v, ast.Name) and v.id in ("inf", "nan") else v
                            for v in value]
    if isinstance(tree.body, ast.Name) and tree.body.id in ("inf", "nan"):
        return float(tree.body.id)
    return _untag(ast.literal_eval(tree.body))


def _approx(expected, rel, abs_, nan_ok):
    """``pytest.approx`` rebuilt from an observation — only of approx objects test-side code made (the
    observer refuses others: one the code under test returns would equal its own wrong answer) — with a
    finite tolerance."""
    from pytest import approx

    for name, tol in (("rel", rel), ("abs", abs_)):
        if tol is not None and not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol >= 0):
            raise ValueError(f"approx {name}={tol!r}")
    return approx(expected, rel=rel, abs=abs_, nan_ok=nan_ok)


_EXTRA = {"<approx>": (5, _approx)}  # the tag only the trainer (with pytest) rebuilds


def _untag(v):
    """The observer's tagged values back as Python values (`seqrl.sandbox.value_codec.decode`, with
    ``pytest.approx`` rebuilt here)."""
    return value_codec.decode(v, _EXTRA)


MAX_VALUE_TEXT = 4_000_000
"""An observed value whose text is longer is not parsed (it satisfies no check): an `all()` over 2,000 sets
of primes is 3 MB."""


MAX_PARSED = 16_000_000
"""Characters of observed values parsed per run at most (literal_eval in the trainer: memory, time)."""


class CorruptObservations(ValueError):
    """An observation line that is not ``K<TAB>NODE<TAB>LEN<TAB>TEXT`` with LEN = len(TEXT): lines were
    cut or merged (something else wrote to the file), so no observation of the run can be trusted."""


def parse_observations(data: bytes, expected: Mapping[int, object], nonce: str | None = None
                       ) -> dict[int, list[tuple[str, object]]]:
    """``k → [(node id, observed value)...]`` from the untrusted observation file; a value that is not a
    Python literal is a sentinel that satisfies no check; ``~True``/``~False``/``~R`` is a `Verdict`, ``~C…``
    `Candidates`.
    `CorruptObservations` when any line is malformed (a merged or truncated line could hide one), or —
    given the run's ``nonce`` — when the guard's end record ``end<TAB>NONCE<TAB>N`` is not the last line
    or N is not the number of lines before it (the channel was cut, replaced or written around)."""
    out: dict[int, list[tuple[str, object]]] = {}
    parsed = 0
    lines = data.decode("utf-8", "replace").split("\n")[:-1] if data else []
    if nonce is not None:
        if not lines or lines[-1] != f"end\t{nonce}\t{len(lines) - 1}":
            raise CorruptObservations("the observation channel has no end record for this run (cut, replaced "
                                      "or written around)")
        lines = lines[:-1]
    for line in lines:
        fields = line.split("\t", 3)
        if len(fields) != 4 or not fields[0].isdigit() or not fields[2].isdigit() or int(fields[2]) != len(fields[3]):
            raise CorruptObservations(f"malformed observation line {line[:80]!r}")
        k, node, text = int(fields[0]), fields[1], fields[3]
        if k not in expected:
            continue
        if text in ("~True", "~False", "~R"):  # ~R: the comparison raised into the test, whose outcome decides
            out.setdefault(k, []).append((node, Verdict(text != "~False")))
            continue
        if text.startswith("~C"):  # answers against a literal's pool
            parsed += len(text)
            try:
                got = _read_candidates(_parse_value(text[2:])) if len(text) <= MAX_VALUE_TEXT else None
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                got = None
            if parsed > MAX_PARSED:
                raise CorruptObservations(f"more than {MAX_PARSED} characters of observed values")
            out.setdefault(k, []).append((node, got if got is not None else _UNEQUAL))
            continue
        ok, value = False, None
        parsed += len(text)
        if parsed > MAX_PARSED:
            raise CorruptObservations(f"more than {MAX_PARSED} characters of observed values")
        if len(text) <= MAX_VALUE_TEXT:
            try:
                ok, value = True, _parse_value(text)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                ok = False
        out.setdefault(k, []).append((node, value if ok else _UNEQUAL))
    if data and not data.endswith(b"\n"):
        raise CorruptObservations("the observation file ends in the middle of a line")
    return out


class _Unequal:
    def __eq__(self, other):
        return False

    __hash__ = object.__hash__


_UNEQUAL = _Unequal()
