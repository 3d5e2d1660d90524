"""The code-agent rewriter and the checks decided in the trainer, without a sandbox: what each check
shape becomes, and what the trainer evaluates itself."""

from __future__ import annotations

import ast
import textwrap

import pytest

from seqrl.rewards.code_agent import externalize_asserts, helper_bindings, literal_tables
from seqrl.rewards.code_agent.checks import Candidates, Verdict, _binop, _fallback_policy


def rewrite(src: str):
    return externalize_asserts(textwrap.dedent(src))


def test_checks_that_are_not_a_bare_assert_become_observations():
    out, exp, by_test, must = rewrite("""
        import pytest
        def test_a(self=None):
            got = f(1)
            if got != 8.0:
                raise AssertionError(got)
            if not got == 8.0 or got < 0:
                pytest.fail("x")
            assert got > 0 and got == 8.0
            assert not (g() == h())
    """)
    assert "raise AssertionError" not in out and "pytest.fail" not in out
    trees = [exp[k].tree for k in by_test["test_a"]]
    assert trees[:3] == [("cmp", "Eq", ("obs", 0), ("lit", 8.0))] * 2 + [
        ("unary", "Not", ("cmp", "Lt", ("obs", 0), ("lit", 0)))]
    assert trees[-1] == ("cmp", "NotEq", ("obs", 0), ("obs", 1))  # not (a == b) is a != b
    assert set(by_test["test_a"]) == must  # every one of them in the test's body: each must be observed
    assert exp[by_test["test_a"][0]].holds((8.0,)) and not exp[by_test["test_a"][0]].holds((7.5,))


def test_module_constants_are_checked_right_after_the_check_that_reads_them():
    out, exp, by_test, must = rewrite("""
        EXPECTED = 8.0
        CASES = [(1, 2), (3, 4)]
        def test_a():
            assert f(1) == EXPECTED
            for a, b in CASES:
                assert f(a) == b
    """)
    body = out.split("def test_a():")[1]
    assert body.index("(f(1), EXPECTED)") < body.index("(EXPECTED,)")  # after: a rebinding during f(1) shows
    lits = [exp[k].tree[3][1] for k in by_test["test_a"] if exp[k].tree[3][0] == "lit"]
    assert lits.count([(1, 2), (3, 4)]) == 2 and 8.0 in lits  # the table before and after its loop
    assert literal_tables(ast.parse("A = 1\nB = [1]\nB.append(2)\nC = 2\ndef f(C): pass\n")) == {"A": 1}


def test_pair_policies_and_receivers_that_are_not_test_cases():
    out, exp, _, _ = rewrite("""
        import six
        def test_a():
            assert v1 < v2
            assert not (v1 <= t)
            six.assertCountEqual(self, (1, 2), [2, 1])
            self.assertEqual(f(), g())
    """)
    assert "'pair<'" in out and "'pair<=!'" in out and "'pair=='" in out
    assert "six.assertCountEqual(self, (1, 2), [2, 1])" in out  # a module's function: left as it is
    assert _fallback_policy(("cmp", "Eq", ("obs", 0), ("lit", 1))) is None  # a literal: pooled instead


def test_a_literal_compared_with_a_value_is_hidden_in_a_pool_of_its_type():
    out, exp, by_test, _ = rewrite("""
        def test_a():
            assert v == (1, 0, 0)
            assert "1.0" != w
            assert not v > (0, 9)
            self.assertEqual(f(x), [1, 2])
            assert u == None
            assert g(x) + 1 == 3
        def test_b():
            assert parse("2.0.0") == (2, 0, 0)
    """)
    calls = [ast.parse(ln.strip()).body[0].value for ln in out.split("\n") if "__seqrl_observe__" in ln]
    pools = [{kw.arg: ast.literal_eval(kw.value) for kw in c.keywords}.get("pool") for c in calls]
    ks = by_test["test_a"] + by_test["test_b"]
    for k, pool, lit, module in zip(ks, pools, [(1, 0, 0), "1.0", (0, 9), [1, 2]], [{(2, 0, 0), (0, 9)}, {"2.0.0"},
                                                                                     {(1, 0, 0), (2, 0, 0)}, set()]):
        e = exp[k]
        assert e.pool == pool and pool[e.real] == lit and 8 <= len(pool) <= 16  # the place is kept here
        assert len(set(map(repr, pool))) == len(pool) and all(type(x) is type(lit) for x in pool)
        assert {pool[i] for i in e.module} == module  # the module's other literals of that type; the rest made up
    assert pools[4] is None and pools[5] is None  # None is not pooled; an expression holding a literal neither
    assert calls[0].args[3].value == "candL=" and calls[1].args[3].value == "candR=" and calls[2].args[3].value == "candL<"
    # answers from the run: the literal's own entry decides, behind its neighbours and the other entries
    e = exp[ks[0]]
    n = len(e.pool)

    def answers(equal_to=(), near=False):
        return Candidates(tuple((i in equal_to, None, (near, False)) for i in range(n)))

    assert e.holds(answers({e.real})) and not e.holds(answers(set()))
    assert not e.holds(answers({e.real}, near=True))  # equal to a neighbour of the literal
    assert not e.holds(answers(set(range(n))))  # equal to every entry
    assert not e.holds(Verdict(True)) and not e.holds((Candidates(()),))
    assert e.holds(((1, 0, 0),)) and not e.holds(((1, 0, 1),))  # a plain value: compared with the literal here
    order = exp[ks[2]]  # not v > (0, 9): (<, ==, >) of v against each entry
    below = tuple((False, (True, False, False) if i == order.real else (False, False, True), (False,))
                  for i in range(len(order.pool)))
    assert order.holds(Candidates(below))
    assert not order.holds(Candidates(tuple((False, None, (False,)) for _ in order.pool)))  # a comparison raised
    assert not order.holds(Candidates(tuple((False, (False, False, True), (False,)) for _ in order.pool)))
    yes_to_all = Candidates(tuple((False, (True, True, True), (False,)) for _ in order.pool))
    assert not exp[ks[2]].holds(yes_to_all)  # v > (0, 9) claimed without exactly one of <, ==, >: no verdict


def test_helper_bindings_follow_name_mangling_and_leave_decorated_classes():
    tree = ast.parse("class Cached:\n    def __get(self): pass\n    def ok(self): pass\n"
                     "@wrap\nclass W:\n    def m(self): pass\ndef f(): pass\nf = fixture(f)\n")
    got = helper_bindings({"tests/h.py": tree})["tests/h.py"]
    assert got["Cached._Cached__get"] == ["tests/h.py", "Cached.__get", False]
    assert "W.m" not in got and got["f"] == ["tests/h.py", "f", True]  # reassigned: presence only


def test_string_formatting_is_evaluated_here_within_limits():
    assert _binop("Mod", "0x%x", 18) == "0x12" and _binop("Mod", "%s-%s", ("a", 2)) == "a-2"
    for fmt in ("%99999d", "%*d"):
        with pytest.raises(TypeError):
            _binop("Mod", fmt, 1)
