"""The assert rewriter: pristine test functions' checks become `__seqrl_observe__` calls whose literals stay
in the trainer (`externalize_asserts`), and what the run is told to watch: test-side helper bindings, the
standard-library callables the tests read, dataclass field tables as the source declares them."""

from __future__ import annotations

import ast
import stat
from collections.abc import Mapping
from pathlib import Path

from .checks import Expect, OBSERVE, _BIN, _CALLS, _CMP, _fallback_policy, _has_literal, _literal


class _NotRewritable(Exception):
    pass


def _func_name(node: ast.AST) -> str | None:
    f = node.func if isinstance(node, ast.Call) else None
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


_UNITTEST = {"assertEqual": "Eq", "assertEquals": "Eq", "assertNotEqual": "NotEq", "assertListEqual": "Eq",
             "assertTupleEqual": "Eq", "assertDictEqual": "Eq", "assertSetEqual": "Eq", "assertSequenceEqual": "Eq",
             "assertMultiLineEqual": "Eq", "assertGreater": "Gt", "assertGreaterEqual": "GtE", "assertLess": "Lt",
             "assertLessEqual": "LtE", "assertIn": "In", "assertNotIn": "NotIn"}


_RAISES_CMS = ("raises", "assertRaises", "assertRaisesRegex", "warns", "assertWarns", "assertWarnsRegex",
               "deprecated_call", "suppress", "assertLogs", "assertNoLogs")
"""Context managers whose block is expected to stop early: its checks need not be observed."""


class _Externalize(ast.NodeTransformer):
    """Checks → ``__seqrl_observe__(K, (leaf values...), check, fallback, quant)``: the run hands out
    plain values of the leaves, the literals stay here, and the check is evaluated here. Rewritten:
    ``assert`` of a comparison, chained or not (``== != < <= > >= in not in``; sides may hold
    arithmetic, ``abs/round/min/max/sum``, displays, ``pytest.approx``), ``assert math.isclose(...)``,
    ``assert all(a == b for ...)`` / ``any(...)`` (consumed lazily by the observer), and unittest's
    ``assertEqual`` family on any test case object; a value whose ``__eq__`` / ``__sub__`` / ``__lt__``
    lies is judged by its plain value. Where every leaf of a literal-free comparison is the suite's own
    object (``Money(3) == add(...)``, mock ``call`` objects) or an ``in``'s container is, the observer
    reports pytest's own verdict instead (`check`). Other shapes (``is``, ``and``/``or``,
    ``pytest.raises``, bare calls) stay in-process."""

    def __init__(self, start: int, tables: Mapping[str, object] | None = None):
        self.k, self.expected, self.found = start, {}, []
        self.must_ids: set[int] = set()
        self.must: set[int] = set()
        self.tables = dict(tables or {})  # module-level literals (`literal_tables`): kept here, never observed
        self.imported: set[str] = set()  # names the module binds by import (modules, classes)
        self.constants: set[str] = set()  # the module constants the check being built reads
        self.literals: dict[type, list] = {}  # the module's literals by type (`module_literals`): pools

    def _tree(self, node, observed: list) -> tuple:
        ok, value = _literal(node)
        if ok:
            return ("lit", value)
        if isinstance(node, ast.Name) and node.id in self.tables:  # EXPECTED = 8.0: observed, and checked
            self.constants.add(node.id)  # against its literal here (`_replace`), so a rebound one fails
        if isinstance(node, ast.BinOp) and type(node.op).__name__ in _BIN:
            return ("bin", type(node.op).__name__, self._tree(node.left, observed), self._tree(node.right, observed))
        if isinstance(node, ast.UnaryOp) and type(node.op).__name__ in ("USub", "UAdd"):
            return ("unary", type(node.op).__name__, self._tree(node.operand, observed))
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and not any(isinstance(e, ast.Starred) for e in node.elts):
            return (type(node).__name__.lower(), tuple(self._tree(e, observed) for e in node.elts))
        if isinstance(node, ast.Dict) and None not in node.keys:
            return ("dict", tuple((self._tree(k, observed), self._tree(v, observed))
                                  for k, v in zip(node.keys, node.values)))
        if (isinstance(node, ast.Name) and node.id == "ANY") or (isinstance(node, ast.Attribute) and node.attr == "ANY"
                                                                and isinstance(node.value, ast.Name)):
            return ("any",)  # mock.ANY written by the test: built here, never taken from the run
        call_name = _mock_call_name(node)
        if call_name is not None:  # call(...) / call.method(...) written by the test: built here
            return ("mockcall", call_name, tuple(self._tree(a, observed) for a in node.args),
                    tuple((kw.arg, self._tree(kw.value, observed)) for kw in node.keywords))
        name = _func_name(node)
        if isinstance(node, ast.Call) and name in _CALLS and (isinstance(node.func, ast.Name) or name in (
                "approx", "isclose")) and _simple_call(node, name):
            return ("call", name, tuple(self._tree(a, observed) for a in node.args),
                    tuple((kw.arg, self._tree(kw.value, observed)) for kw in node.keywords))
        if isinstance(node, (ast.Starred, ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr)):
            raise _NotRewritable
        observed.append(node)
        return ("obs", len(observed) - 1)

    def _compare(self, left, ops, rights, observed: list) -> tuple:
        names = [type(o).__name__ for o in ops]
        if any(n not in _CMP for n in names):
            raise _NotRewritable
        trees = [self._tree(left, observed)] + [self._tree(r, observed) for r in rights]
        if len(names) == 1:
            return ("cmp", names[0], trees[0], trees[1])
        return ("chain", tuple(names), tuple(trees))

    def _check(self, test: ast.AST, observed: list) -> tuple:
        if isinstance(test, ast.Compare):
            return self._compare(test.left, test.ops, test.comparators, observed)
        if isinstance(test, ast.Call) and _func_name(test) == "isclose" and _simple_call(test, "isclose"):
            return self._tree(test, observed)
        if (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id in ("all", "any")
                and len(test.args) == 1 and not test.keywords
                and isinstance(test.args[0], (ast.GeneratorExp, ast.ListComp))
                and isinstance(test.args[0].elt, ast.Compare) and len(test.args[0].elt.ops) == 1
                and type(test.args[0].elt.ops[0]).__name__ in _CMP):
            gen = test.args[0]  # all(f(x) == w for ...): the pairs, consumed lazily by the observer
            pairs = ast.GeneratorExp(ast.Tuple([gen.elt.left, gen.elt.comparators[0]], ast.Load()), gen.generators)
            observed.append(pairs)
            self.quant = (test.func.id, type(gen.elt.ops[0]).__name__)
            return ("quant", test.func.id, type(gen.elt.ops[0]).__name__, ("obs", len(observed) - 1))
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return ("unary", "Not", self._check(test.operand, observed))
        raise _NotRewritable

    def _unittest(self, call: ast.Call, observed: list) -> tuple:
        name = _func_name(call)
        if not isinstance(call.func, ast.Attribute) or any(isinstance(a, ast.Starred) for a in call.args):
            raise _NotRewritable
        kw = {k.arg: k.value for k in call.keywords}
        if None in kw:
            raise _NotRewritable
        args = list(call.args)
        for pos, key in enumerate(("first", "second")):  # assertEqual(first=..., second=...)
            if key in kw and len(args) == pos:
                args.append(kw[key])
        if name in _UNITTEST and len(args) >= 2:
            return self._compare(args[0], [_CMP_NODES[_UNITTEST[name]]()], [args[1]], observed)
        if name in ("assertAlmostEqual", "assertNotAlmostEqual", "assertAlmostEquals") and len(args) >= 2:
            places = args[2] if len(args) > 2 else kw.get("places", ast.Constant(None))
            delta = args[4] if len(args) > 4 else kw.get("delta", ast.Constant(None))
            return ("almost", self._tree(args[0], observed), self._tree(args[1], observed),
                    self._tree(places, observed), self._tree(delta, observed), name == "assertNotAlmostEqual")
        if name == "assertCountEqual" and len(args) >= 2:
            return ("count", self._tree(args[0], observed), self._tree(args[1], observed))
        if name == "assertTrue" and args:
            return self._check(args[0], observed)
        if name == "assertFalse" and args:
            return ("unary", "Not", self._check(args[0], observed))
        raise _NotRewritable

    def _replace(self, node: ast.stmt, build, expr=None, constants: bool = True):
        observed: list = []
        self.quant, self.constants = None, set()
        try:
            tree = build(observed)
        except _NotRewritable:
            return node
        if not observed:  # nothing the code under test decides
            return node
        if constants and self.constants:  # module constants the check read: each still its literal right after
            names = sorted(self.constants)
            return [self._replace(node, lambda obs: (obs.extend(observed), tree)[1], expr, constants=False),
                    *self._constant_checks(names, node, id(node) in self.must_ids)]
        k = self.k
        self.k += 1
        self.expected[k] = Expect(tree, len(observed))
        self.found.append(k)
        if id(node) in self.must_ids:
            self.must.add(k)
        args = [ast.Constant(k), ast.Tuple(observed, ast.Load())]
        fallback = _fallback_policy(tree) if expr is not None and self.quant is None else None
        pooled = self._pooled(tree, expr) if expr is not None and self.quant is None and fallback is None else None
        if pooled is not None:  # one comparison with a literal: the run answers against a pool of literals
            side, value_left, order, pool, real, module = pooled
            self.expected[k] = Expect(tree, len(observed), pool, real, module)
            args += [_over_leaves(side, observed),
                     ast.Constant("cand" + ("L" if value_left else "R") + ("<" if order else "="))]
        if fallback is not None:  # pytest's verdict where every leaf is the suite's own object
            body = _over_leaves(expr, observed).body
            negated = isinstance(body, ast.UnaryOp) and isinstance(body.op, ast.Not)
            cmp = body.operand if negated else body
            if fallback == "pair" and isinstance(cmp, ast.Compare) and len(cmp.ops) == 1:
                # the two compared values, each probed on its own in the run (the comparison made there)
                fallback = "pair" + _OP_SYMBOL[type(cmp.ops[0])] + ("!" if negated else "")
                body = ast.Tuple([cmp.left, cmp.comparators[0]], ast.Load())
            elif fallback == "pair":
                fallback = "all"
            if isinstance(fallback, int):  # an `in`'s container leaf: the run needs the operator too
                fallback = ("notin" if tree[1] == "NotIn" else "in") + str(fallback)
            args += [_lambda(body), ast.Constant(fallback)]
        keywords = [ast.keyword("quant", ast.Constant(self.quant))] if self.quant else []
        if pooled is not None:
            keywords.append(ast.keyword("pool", ast.parse(repr(pooled[3]), mode="eval").body))
        call = ast.Call(ast.Name(OBSERVE, ast.Load()), args, keywords)
        return ast.copy_location(ast.Expr(call), node)

    def _pooled(self, tree: tuple, expr: ast.AST):
        """For one comparison (``== != < <= > >=``, or ``not`` of one) of a literal ``L`` of a plain type
        and a side with no literal (``f(x)``, ``a - b``: computed in the run from the observed values):
        ``(that side's node, whether it is the left side, whether it is an order, pool, L's place in it,
        the module's literals' places)``, the pool being ``L`` among
        the module's other literals of its type and made-up ones (`literal_pool`) in a random order;
        else None."""
        negated = tree[0] == "unary" and tree[1] == "Not"
        cmp_tree = tree[2] if negated else tree
        node = expr.operand if negated and isinstance(expr, ast.UnaryOp) else expr
        if cmp_tree[0] != "cmp" or cmp_tree[1] not in ("Eq", "NotEq", "Lt", "LtE", "Gt", "GtE") \
                or not isinstance(node, ast.Compare) or len(node.ops) != 1:
            return None
        a, b = cmp_tree[2], cmp_tree[3]
        if (a[0] == "lit") == (b[0] == "lit"):
            return None
        value_left = b[0] == "lit"
        lit, other = (b[1], a) if value_left else (a[1], b)
        if other[0] not in ("obs", "bin", "unary") or _has_literal(other):  # `f(x) == L`, `a - b == L`: the
            return None  # literal-free side is computed in the run (the trainer's own calls, abs/round…, are not)
        got = literal_pool(lit, self.literals.get(type(lit), ()))
        if got is None:
            return None
        return (node.left if value_left else node.comparators[0], value_left,
                cmp_tree[1] not in ("Eq", "NotEq"), *got)

    def _constant_checks(self, names, where: ast.AST, must: bool) -> list:
        """``NAME == <its literal>`` observed for each module-level constant or table: decided here."""
        out = []
        for name in names:
            check = ast.copy_location(ast.Expr(ast.Constant(None)), where)
            if must:
                self.must_ids.add(id(check))
            tree = ("cmp", "Eq", ("obs", 0), ("lit", self.tables[name]))
            out.append(self._replace(check, lambda obs, tree=tree, name=name: (
                obs.append(ast.Name(name, ast.Load())), tree)[1], constants=False))
        return out

    def visit_Assert(self, node: ast.Assert):
        if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And):
            # `assert a and b == c`: a passing run evaluated every conjunct, so each is its own check
            parts = [ast.copy_location(ast.Assert(v, node.msg), node) for v in node.test.values]
            if id(node) in self.must_ids:
                self.must_ids.update(id(p) for p in parts)
            return [x for p in parts for x in _as_list(self.visit_Assert(p))]
        t = node.test
        if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not) and isinstance(t.operand, ast.Compare) \
                and len(t.operand.ops) == 1 and type(t.operand.ops[0]) in _NEGATE:
            was, node = node, ast.copy_location(ast.Assert(_negated(t.operand), node.msg), node)  # not (a == b)
            if id(was) in self.must_ids:
                self.must_ids.add(id(node))
        return self._replace(node, lambda obs: self._check(node.test, obs), node.test)

    def visit_If(self, node: ast.If):
        """``if COND: raise AssertionError(...)`` / ``pytest.fail(...)`` / ``self.fail(...)`` is the check
        ``assert not COND`` (``if A or B:`` two of them), rewritten as one."""
        if not _fails(node):
            return self.generic_visit(node)
        conds = node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.Or) \
            else [node.test]
        out = []
        for cond in conds:
            check = ast.copy_location(ast.Assert(_negated(cond), None), node)
            if id(node) in self.must_ids:
                self.must_ids.add(id(check))
            out += _as_list(self.visit_Assert(check))
        return out

    def visit_For(self, node: ast.For):
        """A loop over module-level literal tables (``for c in CASES``, ``zip(INPUTS, WANTS)``): each
        table is checked against its literal before and after the loop, so cases removed while the loop
        runs fail the test."""
        self.generic_visit(node)
        names = sorted({n.id for n in ast.walk(node.iter) if isinstance(n, ast.Name) and n.id in self.tables
                        and isinstance(self.tables[n.id], (list, tuple, dict, set, frozenset))})
        if not names or node.orelse:
            return node
        must = id(node) in self.must_ids
        return [*self._constant_checks(names, node, must), node,
                *self._constant_checks(names, node, must and not _returns(node.body))]

    def visit_Expr(self, node: ast.Expr):
        call = node.value
        receiver = call.func.value if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) else None
        if isinstance(receiver, ast.Name) and receiver.id in self.imported:
            return node  # `six.assertCountEqual(self, a, b)`, `TestCase.assertEqual(self, …)`: no test case's method
        if isinstance(call, ast.Call) and (_func_name(call) or "").startswith("assert"):
            expr = None
            name = _func_name(call)
            if name in _UNITTEST and len(call.args) >= 2 and not call.keywords:
                expr = ast.Compare(call.args[0], [_CMP_NODES[_UNITTEST[name]]()], [call.args[1]])
            elif name in ("assertTrue", "assertFalse") and call.args and not call.keywords:
                expr = call.args[0] if name == "assertTrue" else ast.UnaryOp(ast.Not(), call.args[0])
            return self._replace(node, lambda obs: self._unittest(call, obs), expr)
        return self.generic_visit(node)

    def visit_FunctionDef(self, node):  # nested functions are rewritten with their own qualname
        return node

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef


def _lambda(body: ast.expr) -> ast.Lambda:
    return ast.Lambda(ast.arguments([], [ast.arg("_v")], None, [], [], None, []), body)


def _over_leaves(expr: ast.expr, observed: list) -> ast.Lambda:
    """``lambda _v: EXPR`` with each observed leaf of `expr` read as ``_v[i]``: the check (or one side of
    it) recomputed in the run from the values it handed out."""
    import copy

    memo = {id(leaf): ast.Subscript(ast.Name("_v", ast.Load()), ast.Constant(i), ast.Load())
            for i, leaf in enumerate(observed)}
    return _lambda(copy.deepcopy(expr, memo))


def _fails(node: ast.If) -> bool:
    """``if COND:`` whose whole body is ``raise AssertionError[(...)]`` or a ``fail(...)`` call
    (``pytest.fail``, ``self.fail``), with no ``else``."""
    if node.orelse or len(node.body) != 1:
        return False
    st = node.body[0]
    if isinstance(st, ast.Raise) and st.exc is not None:
        exc = st.exc.func if isinstance(st.exc, ast.Call) else st.exc
        return isinstance(exc, ast.Name) and exc.id == "AssertionError"
    return isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and _func_name(st.value) == "fail"


_OP_SYMBOL = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_NEGATE = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In}


def _negated(cond: ast.expr) -> ast.expr:
    """``not cond``; a single ``==``/``!=``/``in``/``not in`` is flipped instead (an order is not:
    ``not a < b`` is not ``a >= b`` for sets), and ``not not x`` is ``x``."""
    if isinstance(cond, ast.UnaryOp) and isinstance(cond.op, ast.Not):
        return cond.operand
    if isinstance(cond, ast.Compare) and len(cond.ops) == 1 and type(cond.ops[0]) in _NEGATE:
        return ast.Compare(cond.left, [_NEGATE[type(cond.ops[0])]()], cond.comparators)
    return ast.UnaryOp(ast.Not(), cond)


def _returns(body) -> bool:
    """Whether a statement list can ``return`` (nested functions and classes aside)."""
    stack = list(body)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Return):
            return True
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(n))
    return False


_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update", "add",
             "discard", "setdefault", "popitem", "__setitem__", "__delitem__"}


MAX_TABLE_TEXT = 50_000
"""A module-level table whose literal is longer is not checked around its loops (observations stay small)."""


MAX_POOL_TEXT = 200
"""A literal longer than this (its repr) is not pooled: a value that is not plain data compared with it fails."""
POOL_SIZE = (8, 16)
"""A pool holds at least 8 entries (made-up ones fill it) and at most 16 (the module's literals sampled)."""
_POOLED = (int, float, complex, str, bytes, tuple, list, dict, set, frozenset)


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001
        return True


def _round_trips(v) -> bool:
    try:
        text = repr(v)
        return len(text) <= MAX_POOL_TEXT and _same(ast.literal_eval(text), v)
    except Exception:  # noqa: BLE001 — nan, inf, deep nesting
        return False


def module_literals(tree: ast.Module) -> dict[type, list]:
    """The distinct literals a test module writes (constants and displays of constants whose repr reads
    back the same, at most `MAX_POOL_TEXT`), by exact type."""
    out: dict[type, list] = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Constant, ast.Tuple, ast.List, ast.Dict, ast.Set)):
            continue
        ok, v = _literal(node)
        if not ok or type(v) not in _POOLED or not _round_trips(v):
            continue
        pool = out.setdefault(type(v), [])
        if len(pool) < 4 * POOL_SIZE[1] and not any(_same(v, x) for x in pool):
            pool.append(v)
    return out


def _made_up(v, rng):
    """A value of ``v``'s type a few random edits away from it (None where none was found)."""
    t = type(v)
    if t is bool:
        return not v
    if t is int:
        return v + rng.choice((-1, 1)) * rng.randint(1, max(10, abs(v)))
    if t is float:
        return round(v * rng.uniform(0.0, 2.0) + rng.uniform(-10.0, 10.0), rng.randint(0, 6))
    if t is complex:
        return complex(_made_up(v.real, rng), _made_up(v.imag, rng))
    if t in (str, bytes):
        alphabet = (v or ("abc" if t is str else b"abc")) + ("xyz019._-" if t is str else b"xyz019._-")
        chars = list(v)
        edit = rng.randrange(3) if chars else 1
        if edit == 0:
            chars[rng.randrange(len(chars))] = rng.choice(alphabet)
        elif edit == 1:
            chars.insert(rng.randrange(len(chars) + 1), rng.choice(alphabet))
        else:
            del chars[rng.randrange(len(chars))]
        return "".join(chars) if t is str else bytes(chars)
    if t in (tuple, list):
        items = list(v)
        if items and rng.random() < 0.7:
            i = rng.randrange(len(items))
            new = _made_up(items[i], rng)
            if new is None:
                return None
            items[i] = new
        elif items and rng.random() < 0.5:
            del items[rng.randrange(len(items))]
        else:
            items.append(_made_up(items[-1], rng) if items else 0)
        return t(items) if None not in items else None
    if t is dict:  # a value, a key more or a key less (a mapping's equality may read keys alone)
        if not v:
            return {0: 0}
        key, edit = rng.choice(list(v)), rng.randrange(3)
        if edit == 2 and len(v) > 1:
            return {k: x for k, x in v.items() if k != key}
        new = _made_up(key if edit == 1 else v[key], rng)
        if new is None:
            return None
        return {**v, new: v[key]} if edit == 1 else {**v, key: new}
    if t in (set, frozenset):
        if v and rng.random() < 0.5:
            return t(list(v)[:-1])
        new = _made_up(next(iter(v)), rng) if v else 0
        return None if new is None else t(v | {new})
    return None


def literal_pool(lit, others, rng=None) -> tuple[tuple, int, tuple] | None:
    """``(pool, place of lit, places of others)``: ``lit`` with up to 15 of `others` (the module's literals of its type) and
    made-up values of that type (edits of random entries, so the literal is not their centre) up to 8,
    shuffled; None where ``lit`` cannot be written back as a literal."""
    import secrets

    rng = rng or secrets.SystemRandom()
    if type(lit) not in _POOLED or not _round_trips(lit):
        return None
    rest = [o for o in others if not _same(o, lit)]
    rng.shuffle(rest)
    pool = [lit, *rest[:POOL_SIZE[1] - 1]]
    theirs = len(pool)
    for _ in range(20 * POOL_SIZE[0]):
        if len(pool) >= POOL_SIZE[0]:
            break
        try:
            new = _made_up(rng.choice(pool), rng)
            if rng.random() < 0.5 and new is not None:
                new = _made_up(new, rng)
        except (ValueError, TypeError, OverflowError, RecursionError):
            continue
        if new is not None and type(new) is type(lit) and _round_trips(new) and not any(_same(new, x) for x in pool):
            pool.append(new)
    order = list(range(len(pool)))
    rng.shuffle(order)
    return tuple(pool[i] for i in order), order.index(0), tuple(sorted(order.index(i) for i in range(1, theirs)))


def literal_tables(tree: ast.Module) -> dict[str, object]:
    """Module-level names bound once to a literal (``EXPECTED = 8.0``, ``CASES = [...]``) that nothing in
    the file binds again or changes (no other assignment, argument, import, ``except … as``, item
    assignment or deletion, mutating method call, ``global``): the checks use the literal itself."""
    bound: dict[str, list] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound.setdefault(node.targets[0].id, []).append(node.value)
    rebound: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.arg):
            rebound.add(n.arg)
        elif isinstance(n, ast.alias):
            rebound.add(n.asname or n.name.split(".")[0])
        elif isinstance(n, ast.ExceptHandler) and n.name:
            rebound.add(n.name)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            rebound.add(n.name)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            rebound.add(n.name)
    out = {}
    for name, values in bound.items():
        stores = sum(1 for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name
                     and isinstance(n.ctx, (ast.Store, ast.Del)))
        if len(values) != 1 or stores != 1 or name in rebound or _mutated(tree, name):
            continue
        ok, value = _literal(values[0])
        if ok and len(repr(value)) <= MAX_TABLE_TEXT:
            out[name] = value
    return out


def _mutated(tree: ast.Module, name: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, (ast.Store, ast.Del)) \
                and isinstance(node.value, ast.Name) and node.value.id == name:
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == name:
            return True
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return True
        if isinstance(node, ast.Global) and name in node.names:
            return True
    return False


_CMP_NODES = {"Eq": ast.Eq, "NotEq": ast.NotEq, "Lt": ast.Lt, "LtE": ast.LtE, "Gt": ast.Gt, "GtE": ast.GtE,
              "In": ast.In, "NotIn": ast.NotIn}


def _class_qualnames(tree: ast.AST) -> set[str]:
    """Qualnames of the classes a module's source defines at module level and nested in classes."""
    out: set[str] = set()

    def walk(body, prefix):
        for node in body:
            if isinstance(node, ast.ClassDef):
                out.add(prefix + node.name)
                walk(node.body, prefix + node.name + ".")
            elif isinstance(node, (ast.If, ast.Try)):
                walk([*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                      *[x for h in getattr(node, "handlers", []) for x in h.body]], prefix)

    walk(getattr(tree, "body", []), "")
    return out


def _mock_call_name(node) -> str | None:
    """``""`` for ``call(...)`` / ``mock.call(...)``, ``"run"`` for ``call.run(...)``; None otherwise
    (starred arguments are not built here)."""
    if not isinstance(node, ast.Call) or any(isinstance(a, ast.Starred) for a in node.args) \
            or any(kw.arg is None for kw in node.keywords):
        return None
    f = node.func
    if (isinstance(f, ast.Name) and f.id == "call") or (isinstance(f, ast.Attribute) and f.attr == "call"
                                                        and isinstance(f.value, ast.Name) and f.value.id == "mock"):
        return ""
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "call":
        return f.attr
    return None


def _simple_call(node: ast.Call, name: str) -> bool:
    """A call evaluated here from its observed arguments: no generator, comprehension or lambda among
    them, and keywords only where they are numbers (``approx(rel=…)``, ``round(x, 2)``)."""
    if any(isinstance(a, ast.Starred) for a in node.args) or any(kw.arg is None for kw in node.keywords):
        return False
    parts = [*node.args, *(kw.value for kw in node.keywords)]
    if any(isinstance(n, (ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp, ast.Lambda))
           for p in parts for n in ast.walk(p)):
        return False
    return not (node.keywords and name in ("min", "max", "sum"))


def function_defs(tree: ast.Module) -> dict[str, list[ast.AST]]:
    """``co_qualname → [FunctionDef ...]`` of every function in a module (methods ``C.f``, nested
    functions ``f.<locals>.g``; a name defined twice lists both)."""
    out: dict[str, list[ast.AST]] = {}

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = prefix + child.name
                out.setdefault(q, []).append(child)
                walk(child, q + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            elif isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
                walk(child, prefix)

    walk(tree, "")
    return out


def resolve_test(tree: ast.Module, qual: str) -> str | None:
    """The qualname of the function a test node ``Class.method`` / ``function`` of this module runs,
    following base classes defined in the same module (``class TestInts(TestStatsBase)``); None when
    the definition is elsewhere."""
    defs = function_defs(tree)
    if "." not in qual:
        for _ in range(10):  # `test_b = test_a` at module level runs test_a
            if qual in defs:
                return qual
            alias = [n.value.id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)
                     and any(isinstance(t, ast.Name) and t.id == qual for t in n.targets)]
            if not alias:
                return None
            qual = alias[-1]
        return None
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    path, method = qual.rsplit(".", 1)
    if "." in path:  # a nested class: no base-class lookup
        return qual if qual in defs else None
    seen = set()

    def find(cls_name):
        if cls_name in seen or cls_name not in classes:
            return None
        seen.add(cls_name)
        if f"{cls_name}.{method}" in defs:
            return f"{cls_name}.{method}"
        for st in classes[cls_name].body:  # `test_b = test_a` in the class body
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Name) and f"{cls_name}.{st.value.id}" in defs \
                    and any(isinstance(t, ast.Name) and t.id == method for t in st.targets):
                return f"{cls_name}.{st.value.id}"
        for b in classes[cls_name].bases:
            hit = find(b.id) if isinstance(b, ast.Name) else None
            if hit:
                return hit
        return None

    return find(path)


def _must_ids(fn: ast.AST) -> set[int]:
    """The checks every passing run of test function `fn` must report: statements of its body, and of
    ``with`` blocks there (not ``pytest.raises`` and the like, which end early), up to the first
    statement that can ``return`` (a guard such as ``if not HAS_X: return``)."""
    out: set[int] = set()

    def block(body):
        for st in body:
            if isinstance(st, (ast.Assert, ast.Expr, ast.For)) or (isinstance(st, ast.If) and _fails(st)):
                out.add(id(st))
            elif isinstance(st, (ast.With, ast.AsyncWith)) and not any(
                    not isinstance(it.context_expr, ast.Call) or _func_name(it.context_expr) in _RAISES_CMS
                    for it in st.items):  # `with expectation:` may be a pytest.raises held in a variable
                if not block(st.body):
                    return False
            if _returns([st]):
                return False
        return True

    block(fn.body)
    return out


def externalize_asserts(source: str, start: int = 0, only=None, helpers: bool = True
                        ) -> tuple[str, dict[int, Expect], dict[str, list[int]], set[int]]:
    r"""Rewrite a pristine test file so that its checks are decided outside the sandbox (see
    `_Externalize`): ``(new source, {k: Expect}, {function qualname: [k...]}, ks that every passing
    run of their test must report — `_must_ids` of the ``only`` functions)``. ``only``: the qualnames
    of the functions the collected tests run (default every ``test*`` function and method of a
    ``Test*`` class); ``helpers``: the file's other functions (checking helpers, fixtures) are
    rewritten too, their checks judged in whichever test observes them.

    >>> src, exp, by_test, must = externalize_asserts("def test_a():\n    assert f(2) == 4\n")
    >>> exp[0].holds((4,)), exp[0].holds((5,)), by_test, must
    (True, False, {'test_a': [0]}, {0})
    """
    tree = ast.parse(source)
    defs = function_defs(tree)
    if only is None:
        only = {q for q in defs if _conventional_test(q)}
    targets = set(defs) if helpers else {q for q in only if q in defs}
    tr = _Externalize(start, literal_tables(tree))
    tr.literals = module_literals(tree)
    tr.imported = {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                   for a in n.names}
    by_test: dict[str, list[int]] = {}
    for _, _, qual, fn in sorted((fn.lineno, fn.col_offset, q, fn) for q in targets
                                 for fn in defs[q]):  # in source order
        tr.found = []
        # a name defined twice (`if PY3: def test_b` / `else: def test_b`): which runs is not known here
        tr.must_ids = _must_ids(fn) if qual in only and len(defs[qual]) == 1 else set()
        fn.body = [x for st in fn.body for x in _as_list(tr.visit(st))]
        by_test.setdefault(qual, []).extend(tr.found)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n", tr.expected, by_test, tr.must


def _module_file(rel: str, module: str, level: int, files) -> str | None:
    """The test-side file (one of ``files``) that ``from MODULE import …`` in ``rel`` loads, if any:
    relative imports from the file's package, absolute ones from the root or any folder above the file
    (pytest puts a test file's first non-package ancestor on ``sys.path``)."""
    parts = [p for p in module.split(".") if p]
    here = rel.split("/")[:-1]
    if level:
        bases = [here[:len(here) - (level - 1)]] if level - 1 <= len(here) else []
    else:
        bases = [here[:i] for i in range(len(here), -1, -1)]
    for base in bases:
        stem = "/".join([*base, *parts])
        for cand in (f"{stem}.py", f"{stem}/__init__.py"):
            if cand in files:
                return cand
    return None


def _mangled(cls: str, name: str) -> str:
    """The name a method is stored under in its class: ``__get`` in ``Cached`` is ``_Cached__get``."""
    if name.startswith("__") and not name.endswith("__") and cls.strip("_"):
        return f"_{cls.lstrip('_')}{name}"
    return name


def _assigned(body) -> set[str]:
    """Names a statement list binds by assignment (``x = …``, ``x: T = …``, ``x += …``)."""
    out = set()
    for st in body:
        targets = st.targets if isinstance(st, ast.Assign) else [st.target] if isinstance(
            st, (ast.AnnAssign, ast.AugAssign)) else []
        out.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return out


def helper_bindings(trees: Mapping[str, ast.Module]) -> dict[str, dict[str, list]]:
    """``{file: {path: [defining file, qualname, decorated]}}``: the module-level functions (and methods
    of module-level classes, by the path they are stored under: ``Cached._Cached__get``) each test-side
    file defines, and the functions it imports by name from another test-side file. The run checks
    that these names still hold those functions (a helper rebound by package code fails the run)."""
    defs: dict[str, dict[str, tuple[str, bool]]] = {}
    for rel, tree in trees.items():
        again = _assigned(tree.body)  # `helper = fixture(helper)`: the name holds something else then
        defs[rel] = {n.name: (n.name, bool(n.decorator_list) or n.name in again) for n in tree.body
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for c in tree.body:  # methods of module-level classes (`Base.check_total`); a decorated class may be
            if isinstance(c, ast.ClassDef) and not c.decorator_list and c.name not in again:  # anything
                defs[rel].update({f"{c.name}.{_mangled(c.name, n.name)}": (
                    f"{c.name}.{n.name}", bool(n.decorator_list) or n.name in _assigned(c.body))
                    for n in c.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))})
    out: dict[str, dict[str, list]] = {}
    for rel, tree in trees.items():
        mine = {path: [rel, qual, dec] for path, (qual, dec) in defs[rel].items()}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module is not None or isinstance(node, ast.ImportFrom) \
                    and node.level:
                src = _module_file(rel, node.module or "", node.level, trees)
                for a in node.names if src else ():
                    if a.name in defs[src] and (a.asname or a.name) not in mine:
                        mine[a.asname or a.name] = [src, *defs[src][a.name]]
        if mine:
            out[rel] = mine
    return out


def stdlib_uses(tree: ast.Module) -> list[list[str]]:
    """``[module, attribute path]`` of the standard library a test-side source reads (``json.dumps``,
    ``from operator import mul``, ``os.path.join``): what the code under test may not replace."""
    import sys

    std = set(getattr(sys, "stdlib_module_names", ()))
    alias: dict[str, str] = {}
    out: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in std:
                    alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in std:
            for a in node.names:
                if a.name != "*":
                    out.add((node.module, a.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            chain, cur = [], node
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id in alias:
                chain.reverse()
                for i in range(1, min(len(chain), 3) + 1):
                    out.add((alias[cur.id], ".".join(chain[:i])))
    return [list(x) for x in sorted(out)]


def _is_dataclass_decorator(d: ast.expr) -> bool | None:
    """True for ``@dataclass`` / ``@dataclasses.dataclass(...)``, False for one with ``eq=False`` (identity
    comparison), None for any other decorator."""
    call = d if isinstance(d, ast.Call) else None
    f = call.func if call else d
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    if name != "dataclass":
        return None
    eq = next((k.value for k in (call.keywords if call else []) if k.arg == "eq"), None)
    return not (isinstance(eq, ast.Constant) and eq.value is False)


def dataclass_fields(tree: ast.Module, rel: str) -> dict[str, list[str]]:
    """``"rel:qualname"`` → compared field names of the dataclasses a source defines whose equality is the
    generated one (no ``eq=False``, no ``__eq__`` of their own, bases that are such classes of the same
    file): what the run reads an instance by, whatever its class's field table says then."""
    out: dict[str, list[str]] = {}
    by_name: dict[str, list[str]] = {}

    def own_fields(node: ast.ClassDef) -> list[str] | None:
        names = []
        for st in node.body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and st.name == "__eq__":
                return None
            if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                continue
            ann = ast.unparse(st.annotation)
            if any(w in ann for w in ("ClassVar", "InitVar", "KW_ONLY")):
                continue
            v = st.value
            if isinstance(v, ast.Call) and (_func_name(v) == "field") and any(
                    k.arg == "compare" and isinstance(k.value, ast.Constant) and k.value.value is False
                    for k in v.keywords):
                continue
            names.append(st.target.id)
        return names

    def walk(body, prefix):
        for node in body:
            if not isinstance(node, ast.ClassDef):
                continue
            kinds = [_is_dataclass_decorator(d) for d in node.decorator_list]
            fields = own_fields(node) if kinds and all(k is not None for k in kinds) and all(kinds) else None
            inherited: list[str] = []
            for b in node.bases:
                if isinstance(b, ast.Name) and b.id in by_name and fields is not None:
                    inherited += [n for n in by_name[b.id] if n not in inherited]
                elif not (isinstance(b, ast.Name) and b.id == "object"):
                    fields = None
            if fields is not None:
                merged = inherited + [n for n in fields if n not in inherited]
                out[f"{rel}:{prefix}{node.name}"] = merged
                if not prefix:
                    by_name[node.name] = merged
            walk(node.body, prefix + node.name + ".")

    walk(tree.body, "")
    return out


def snapshot_dataclasses(snapshot: Path, files: Mapping) -> dict[str, list[str]]:
    """`dataclass_fields` of every Python source of the snapshot (``_walk_files``), parsed once."""
    out: dict[str, list[str]] = {}
    for rel, st in sorted(files.items()):
        if not rel.endswith(".py") or not stat.S_ISREG(st.st_mode) or st.st_size > 2_000_000:
            continue
        try:
            data = (snapshot / rel).read_bytes()
            if b"dataclass" not in data:
                continue
            out.update(dataclass_fields(ast.parse(data), rel))
        except (SyntaxError, ValueError, OSError, RecursionError, MemoryError):
            continue
    return out


def _as_list(x) -> list:
    return x if isinstance(x, list) else [x]


def _conventional_test(qual: str) -> bool:
    parts = qual.split(".")
    if "<locals>" in parts or not parts[-1].startswith("test"):
        return False
    return len(parts) == 1 or (len(parts) == 2 and parts[0].startswith("Test"))
