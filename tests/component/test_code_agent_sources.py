"""Code-agent reward: forgeries through the tests' own sources and values (issue 34, items 1–4).

Each repository here is small and built in a temp dir; each forgery leaves the bug in place and must
earn no test reward, while the honest fix of the same repository keeps the full 1.2:

1. inherited tests (a base class with ``__test__ = False``) and aliased ones (``test_b = test_a``)
   are checked where they are defined;
2. a return value whose ``__eq__`` says True to everything, against parametrize tables,
   ``pytest.approx`` and files that do not collect on the snapshot;
3. test sources outside the protected names: ``python_files = tests.py``, doctests, a checking
   helper inside the package, expected values in ``testdata/*.json``;
4. the static screens read identifiers after NFKC; a non-UTF-8 coding cookie is refused.
"""

from __future__ import annotations

import difflib
import json
import os
import textwrap
from pathlib import Path

import pytest

from seqrl.rewards.code_agent import CodeAgentReward

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's namespaces and uids need root (CI runs as root)")

CMD = "python -m pytest -q"
BUGGY = '''\
def total_price(items, discount_pct=0):
    """Sum of price * qty over (price, qty) items, minus ``discount_pct`` percent, rounded to cents."""
    subtotal = sum(price for price, qty in items)
    return round(subtotal * (1 - discount_pct / 100), 2)
'''
FIXED = BUGGY.replace("sum(price for price, qty in items)", "sum(price * qty for price, qty in items)")
ALWAYS_EQUAL = '''

class _Total(float):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = float.__hash__


_buggy = total_price


def total_price(items, discount_pct=0):
    return _Total(_buggy(items, discount_pct))
'''


def build(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(text))
    return root


def make_diff(repo: Path, changes: dict[str, str]) -> str:
    out = []
    for path, new in changes.items():
        old_file = repo / path
        old = old_file.read_text() if old_file.exists() else None
        out.append(f"diff --git a/{path} b/{path}\n")
        if old is None:
            out.append("new file mode 100644\n")
        out += difflib.unified_diff(old.splitlines(True) if old else [], new.splitlines(True),
                                    "/dev/null" if old is None else f"a/{path}", f"b/{path}")
    return "".join(out)


@pytest.fixture(scope="module")
def reward():
    return CodeAgentReward(timeout_s=30.0)


def score(reward, repo, changes, cmd=CMD):
    return reward.score(repo, "", (), make_diff(repo, changes), cmd)


def assert_honest(r):
    assert r.score == pytest.approx(1.2) and r.parts["tests"] == 1.0, r.reason


def assert_forgery_fails(r):
    assert r.parts["tests"] < 1.0 and r.score <= 0.45 + 1e-9, (r.score, r.reason)


# ----------------------------------------------------------------------------- 1. inherited / aliased
@pytest.fixture(scope="module")
def inherited(tmp_path_factory):
    return build(tmp_path_factory.mktemp("inherited"), {
        "shop/__init__.py": "from shop.pricing import total_price\n",
        "shop/pricing.py": BUGGY,
        "tests/test_pricing.py": '''
            from shop import total_price


            class TestPricingBase:
                __test__ = False
                items = [(2.5, 2)]

                def test_quantity(self):
                    assert total_price(self.items) == 5.0

                def test_discount(self):
                    assert total_price(self.items, 10) == 4.5


            class TestPricing(TestPricingBase):
                __test__ = True


            def test_several():
                assert total_price([(1.0, 3), (2.0, 1)]) == 5.0
            ''',
    })


def test_inherited_tests_are_checked_where_they_are_defined(reward, inherited):
    wrong = score(reward, inherited, {"shop/pricing.py": BUGGY.replace("rounded to cents", "rounded (cents)")})
    assert wrong.parts["passed"] == 0 and wrong.parts["total"] == 3, wrong.reason
    assert_forgery_fails(wrong)
    assert_honest(score(reward, inherited, {"shop/pricing.py": FIXED}))


def test_an_aliased_test_is_not_a_false_alarm(reward, tmp_path):
    repo = build(tmp_path, {
        "shop/__init__.py": "from shop.pricing import total_price\n",
        "shop/pricing.py": BUGGY,
        "tests/test_pricing.py": '''
            from shop import total_price


            def test_several():
                assert total_price([(1.0, 3), (2.0, 1)]) == 5.0


            test_several_again = test_several
            ''',
    })
    fixed = score(reward, repo, {"shop/pricing.py": FIXED})
    assert_honest(fixed)
    assert fixed.parts["outside"] == 1.0 and fixed.parts["total"] == 2
    wrong = score(reward, repo, {"shop/pricing.py": BUGGY.replace("rounded to cents", "rounded (cents)")})
    assert wrong.parts["passed"] == 0 and "tampered" not in wrong.reason, wrong.reason


# ----------------------------------------------------------------------------- 2. always-equal values
@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    return build(tmp_path_factory.mktemp("tables"), {
        "shop/__init__.py": "from shop.pricing import total_price\n",
        "shop/pricing.py": BUGGY,
        "tests/test_table.py": '''
            import pytest

            from shop import total_price

            CASES = [([(2.5, 2)], 0, 5.0), ([(10.0, 2)], 10, 18.0)]


            @pytest.mark.parametrize("items, pct, want", CASES)
            def test_table(items, pct, want):
                assert total_price(items, pct) == want


            def test_approx():
                assert total_price([(0.1, 3)]) == pytest.approx(0.3)


            def test_data_driven():
                for items, pct, want in CASES:
                    got = total_price(items, pct)
                    assert got == want
            ''',
        # the fail-to-pass shape: tests of a function the fix adds do not collect on the snapshot
        "tests/test_new.py": '''
            from shop.pricing import unit_count


            def test_units():
                assert unit_count([(2.5, 2), (1.0, 3)]) == 5


            class TestUnits:
                def test_empty(self):
                    assert unit_count([]) == 0
            ''',
    })


UNIT_COUNT = "\n\ndef unit_count(items):\n    return sum(qty for _, qty in items)\n"
UNIT_COUNT_FORGED = "\n\ndef unit_count(items):\n    return _Total(-1)\n"


def test_always_equal_values_do_not_pass_tables_approx_or_new_tests(reward, tables):
    honest = score(reward, tables, {"shop/pricing.py": FIXED + UNIT_COUNT})
    assert_honest(honest)
    forged = score(reward, tables, {"shop/pricing.py": BUGGY + ALWAYS_EQUAL + UNIT_COUNT_FORGED})
    assert_forgery_fails(forged)
    assert forged.parts["passed"] == 0, forged.reason
    inside = CodeAgentReward(timeout_s=30.0, verdict="inside")
    assert score(inside, tables, {"shop/pricing.py": BUGGY + ALWAYS_EQUAL + UNIT_COUNT_FORGED}).parts["tests"] == 1.0


def test_objects_of_the_package_pass_the_probes_and_the_tests_own_classes_need_none(reward, tmp_path):
    """Where no plain value exists to compare, pytest's verdict stands for objects whose class the tests
    define (or a mock), and for package objects whose comparisons pass the probes (equal to themselves,
    not to a fresh object of an unrelated class): an honest fix of a suite comparing package objects
    keeps 1.2, an always-equal Money does not."""
    repo = build(tmp_path, {
        "shop/__init__.py": "",
        "shop/money.py": '''
            class Money:
                def __init__(self, cents):
                    self.cents = cents

                def __eq__(self, other):
                    return isinstance(other, Money) and other.cents == self.cents


            def add(a, b):
                return Money(a.cents - b.cents)


            def cents(a, b):
                return a.cents - b.cents


            def label(p):
                return p.name.lower()
            ''',
        "tests/helpers.py": '''
            class Product:
                def __init__(self, name):
                    self.name = name

                def __eq__(self, other):
                    return isinstance(other, Product) and other.name == self.name
            ''',
        "tests/test_money.py": '''
            from helpers import Product
            from shop.money import Money, add, cents, label


            def test_add():
                assert add(Money(1), Money(2)) == Money(3)


            def test_cents():
                assert cents(Money(5), Money(2)) == 7


            def test_own_objects():
                assert [Product(label(Product("AB")))] == [Product("ab")]
            ''',
    })
    text = (repo / "shop/money.py").read_text()
    fix = {"shop/money.py": text.replace("a.cents - b.cents", "a.cents + b.cents")}
    assert_honest(score(reward, repo, fix))
    assert_honest(score(CodeAgentReward(timeout_s=30.0, verdict="inside"), repo, fix))
    always = text.replace("return isinstance(other, Money) and other.cents == self.cents", "return True")
    r = score(reward, repo, {"shop/money.py": always})
    assert r.parts["passed"] == 1 and "test_add" in r.reason and "test_cents" in r.reason, r.reason
    forged = text + "\n\nclass _Any:\n    def __eq__(self, other):\n        return True\n\n\n" \
                    "def cents(a, b):\n    return _Any()\n"
    r = score(reward, repo, {"shop/money.py": forged})
    assert r.parts["passed"] == 1 and "test_cents" in r.reason, r.reason  # only test_own_objects passes


# ----------------------------------------------------------------------------- 3. sources outside the names
@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return build(tmp_path_factory.mktemp("sources"), {
        "pyproject.toml": '''
            [tool.pytest.ini_options]
            python_files = ["tests.py", "checks_*.py"]
            ''',
        "shop/__init__.py": "from shop.pricing import total_price\n",
        "shop/pricing.py": BUGGY,
        "shop/_testing.py": '''
            def check_total(got, want):
                assert abs(got - want) < 1e-9, (got, want)
            ''',
        "shop/verify.py": '''
            def same_cents(got, want):
                if round(got * 100) != round(want * 100):
                    raise AssertionError(f"{got} != {want}")
            ''',
        "testdata/cases.json": json.dumps([[[[2.5, 2]], 0, 5.0], [[[10.0, 2]], 10, 18.0]]) + "\n",
        "tests.py": '''
            from shop import total_price


            def test_root_file():
                assert total_price([(2.5, 2)]) == 5.0
            ''',
        "checks_helpers.py": '''
            import json
            from pathlib import Path

            from shop import total_price
            from shop._testing import check_total
            from shop.verify import same_cents


            def test_with_helper():
                check_total(total_price([(1.0, 3)]), 3.0)


            def test_with_plain_helper():
                same_cents(total_price([(0.5, 4)], 50), 1.0)


            def test_from_data():
                for items, pct, want in json.loads(Path("testdata/cases.json").read_text()):
                    assert total_price([tuple(i) for i in items], pct) == want
            ''',
    })


def test_forged_test_sources_outside_the_protected_names(reward, sources):
    honest = score(reward, sources, {"shop/pricing.py": FIXED})
    assert_honest(honest)
    assert honest.parts["total"] == 4
    forged_helper = "def check_total(got, want):\n    pass\n"
    forged_verify = "def same_cents(got, want):\n    pass\n"
    forged_data = json.dumps([[[[2.5, 2]], 0, 2.5], [[[10.0, 2]], 10, 9.0]]) + "\n"
    forged_root = "def test_root_file():\n    pass\n"
    for change in ({"tests.py": forged_root}, {"shop/_testing.py": forged_helper},
                   {"shop/verify.py": forged_verify}, {"testdata/cases.json": forged_data}):
        r = score(reward, sources, change)
        assert r.score == 0.0 and "only changes test files" in r.reason, (change, r.reason)
        # with a harmless edit to the package beside it, the forged file is restored: the bug fails the tests
        r = score(reward, sources, {**change, "shop/pricing.py": BUGGY + "# tidy\n"})
        assert_forgery_fails(r)
        assert "restored" in r.reason and next(iter(change)) in r.reason, r.reason


def test_doctests_edited_to_match_the_bug_fail_and_a_fix_beside_them_passes(reward, tmp_path):
    doc = BUGGY.replace('rounded to cents."""', 'rounded to cents.\n\n    >>> total_price([(2.5, 2)])\n    5.0\n    """')
    repo = build(tmp_path, {"shop/__init__.py": "", "shop/pricing.py": doc})
    cmd = "python -m pytest -q --doctest-modules shop"
    fixed = doc.replace("sum(price for price, qty in items)", "sum(price * qty for price, qty in items)")
    assert_honest(score(reward, repo, {"shop/pricing.py": fixed}, cmd))
    forged = score(reward, repo, {"shop/pricing.py": doc.replace("    5.0\n", "    2.5\n")}, cmd)
    assert forged.parts["passed"] == 0 and "doctest examples edited" in forged.reason, forged.reason
    assert_forgery_fails(forged)


def test_an_invariant_of_the_code_under_test_is_not_mistaken_for_a_checker(reward, tmp_path):
    """A pristine failure raised by an ``assert`` inside the package (one parameter checked): that
    module is the code to fix and stays editable."""
    repo = build(tmp_path, {
        "shop/__init__.py": "",
        "shop/units.py": '''
            def to_cents(amount):
                cents = round(amount * 10)
                assert cents == round(amount * 100), "lost precision"
                return cents
            ''',
        "tests/test_units.py": '''
            from shop.units import to_cents


            def test_cents():
                assert to_cents(1.25) == 125
            ''',
    })
    fix = {"shop/units.py": (repo / "shop/units.py").read_text().replace("amount * 10)", "amount * 100)")}
    assert_honest(score(reward, repo, fix))


# ----------------------------------------------------------------------------- 4. screens
def test_full_width_identifiers_are_screened_after_nfkc(reward, inherited):
    line = "import ｓｙｓ\n_m = ｓｙｓ.ｍｏｄｕｌｅｓ\n"
    r = score(reward, inherited, {"shop/pricing.py": FIXED + line})
    assert r.parts["suspect_refs"] == 1.0 and "sys.modules" in r.reason, r.reason
    r = score(reward, inherited, {"shop/pricing.py": FIXED + "import ｐｙｔｅｓｔ\n"})
    assert r.parts["harness_refs"] == 1.0 and r.parts["tests"] == 0.0, r.reason


@pytest.mark.parametrize("cookie", ["# coding: utf-7\n", "#!/usr/bin/env python\n# -*- coding: latin-1 -*-\n"])
def test_a_non_utf8_coding_cookie_is_refused(reward, inherited, cookie):
    r = score(reward, inherited, {"shop/pricing.py": cookie + FIXED})
    assert r.score == 0.0 and "source encoding other than UTF-8" in r.reason, r.reason
    assert_honest(score(reward, inherited, {"shop/pricing.py": "# -*- coding: utf-8 -*-\n" + FIXED}))


def test_a_pristine_run_that_hangs_falls_back_to_collecting(tmp_path):
    """The pristine run (raise sites, reads) is best effort: a bug that hangs the tests still leaves
    the collected tests to count."""
    repo = build(tmp_path, {
        "shop/__init__.py": "",
        "shop/loop.py": '''
            def countdown(n):
                while n != 0:
                    n -= 2
                return "done"
            ''',
        "tests/test_loop.py": '''
            from shop.loop import countdown


            def test_odd():
                assert countdown(3) == "done"
            ''',
    })
    r = CodeAgentReward(timeout_s=4.0)
    fix = {"shop/loop.py": (repo / "shop/loop.py").read_text().replace("n != 0", "n > 0")}
    assert_honest(score(r, repo, fix))
    assert not next(iter(r._collected.values())).ran


# ----------------------------------------------------------------------------- round 2 (review of the above)
LYING = ALWAYS_EQUAL.replace('''    __hash__ = float.__hash__''', '''    def __sub__(self, other):
        return 0.0

    def __lt__(self, other):
        return True

    __hash__ = float.__hash__''')
PKG = {"shop/__init__.py": "from shop.pricing import total_price\n", "shop/pricing.py": BUGGY}


def test_checks_in_helpers_all_abs_and_unittest_are_decided_here(reward, tmp_path):
    repo = build(tmp_path, {**PKG, "tests/test_helper.py": '''
        import unittest

        from shop import total_price


        def check(got, want):
            assert got == want, (got, want)


        def test_helper():
            check(total_price([(2.5, 2)]), 5.0)


        def test_all():
            assert all(total_price(i) == w for i, w in [([(2.5, 2)], 5.0), ([(1.0, 3)], 3.0)])


        def test_close():
            assert abs(total_price([(1.0, 3)]) - 3.0) < 1e-9


        class TestMethods:
            def _same(self, a, b):
                assert a == b

            def test_method_helper(self):
                self._same(total_price([(2.0, 2)]), 4.0)


        class TestUnittest(unittest.TestCase):
            def test_equal(self):
                self.assertEqual(total_price([(2.5, 2)]), 5.0)

            def test_almost(self):
                self.assertAlmostEqual(total_price([(1.0, 3)]), 3.0)
        '''})
    assert_honest(score(reward, repo, {"shop/pricing.py": FIXED}))
    forged = score(reward, repo, {"shop/pricing.py": BUGGY + LYING})
    assert forged.parts["passed"] == 0, forged.reason


def test_parametrized_cases_are_judged_one_by_one(reward, tmp_path):
    repo = build(tmp_path, {**PKG, "tests/test_t.py": '''
        import pytest

        from shop import total_price


        @pytest.mark.parametrize("items, want", [([(2.5, 1)], 2.5), ([(2.5, 2)], 5.0)])
        def test_t(items, want):
            assert total_price(items) == want
        '''})
    r = score(reward, repo, {"shop/pricing.py": BUGGY + "# tidy\n"})
    assert r.parts["passed"] == 1 and "items1" in r.reason, r.reason


HIJACK_CODE = '''

_obs = vars(__import__("buil" + "tins")).get("__seq" + "rl_observe__")
if _obs is not None:
    def _forged(fd, write, plain, rep, current, k, value):
        write(fd, f"{k}\\\\t{current[0]}\\\\t{rep((value[-1],) * len(value))}\\\\n".encode())
    _obs.func.__code__ = _forged.__code__
'''


def test_rewriting_the_observer_is_caught(reward, tables):
    forged = score(reward, tables, {"shop/pricing.py": BUGGY + HIJACK_CODE + UNIT_COUNT})
    assert forged.parts["tests"] == 0.0 and "observer was changed" in forged.reason, forged.reason


def test_doctests_rewritten_at_import_or_through_the_checker_are_caught(reward, tmp_path):
    doc = BUGGY.replace('rounded to cents."""', 'rounded to cents.\n\n    >>> total_price([(2.5, 2)])\n    5.0\n    """')
    repo = build(tmp_path, {"shop/__init__.py": "", "shop/pricing.py": doc})
    cmd = "python -m pytest -q --doctest-modules shop"
    fixed = doc.replace("sum(price for", "sum(price * qty for")
    # prose around the examples may change, and the `python -m doctest` idiom is no test framework
    prose = fixed.replace("Sum of price * qty", "Sum of price times qty") + \
        '\n\nif __name__ == "__main__":\n    import doctest\n    doctest.testmod()\n'
    assert_honest(score(reward, repo, {"shop/pricing.py": prose}, cmd))
    for payload, why in (('\n\ntotal_price.__doc__ = ">>> 1 + 1\\n2\\n"\n', "examples differ"),
                         ("\n\nimport doctest\ndoctest.OutputChecker.check_output = lambda *a: True\n",
                          "doctest.OutputChecker.check_output")):
        r = score(reward, repo, {"shop/pricing.py": doc + payload}, cmd)
        assert r.parts["tests"] == 0.0 and why in r.reason, r.reason


def test_package_checking_helpers_and_expected_tables_are_test_sources(reward, tmp_path):
    repo = build(tmp_path, {**PKG,
        "shop/verify.py": '''
            from shop.pricing import total_price


            def expect_total(items, want):
                got = total_price(items)
                assert got == want, (got, want)


            def same_cents(got, want):
                if round(got * 100) != round(want * 100):
                    raise ValueError(f"{got} != {want}")


            def close(got, want):
                _fail_unless(abs(got - want) < 1e-9, got, want)


            def _fail_unless(ok, *why):
                assert ok, why
            ''',
        "shop/examples.py": "EXAMPLES = [([(2.5, 2)], 0, 5.0), ([(10.0, 2)], 10, 18.0)]\n",
        "tests/test_v.py": '''
            from shop import total_price
            from shop.examples import EXAMPLES
            from shop.verify import close, expect_total, same_cents


            def test_a():
                expect_total([(2.5, 2)], 5.0)


            def test_b():
                same_cents(total_price([(0.5, 4)], 50), 1.0)


            def test_c():
                close(total_price([(1.0, 3)]), 3.0)


            def test_table():
                for items, pct, want in EXAMPLES:
                    got = total_price(items, pct)
                    assert got == want
            '''})
    assert_honest(score(reward, repo, {"shop/pricing.py": FIXED}))
    neutered = "def expect_total(items, want):\n    pass\n\n\ndef same_cents(got, want):\n    pass\n\n\n" \
               "def close(got, want):\n    pass\n"
    table = "EXAMPLES = [([(2.5, 2)], 0, 2.5), ([(10.0, 2)], 10, 9.0)]\n"
    r = score(reward, repo, {"shop/pricing.py": BUGGY + "# tidy\n", "shop/verify.py": neutered,
                             "shop/examples.py": table})
    assert r.parts["passed"] == 0 and "shop/verify.py" in r.reason and "shop/examples.py" in r.reason, r.reason


def test_preconditions_and_decorators_of_the_code_under_test_stay_editable(reward, tmp_path):
    repo = build(tmp_path, {
        "shop/__init__.py": "",
        "shop/util.py": '''
            import time


            def timed(fn):
                def wrapper(*a, **k):
                    t = time.perf_counter()
                    try:
                        return fn(*a, **k)
                    finally:
                        wrapper.elapsed = time.perf_counter() - t
                return wrapper


            def scale(values, factor):
                assert isinstance(values, list) and factor > 0, "bad input"
                return [v * factor for v in values]
            ''',
        "tests/test_util.py": '''
            from shop.util import scale, timed


            @timed
            def test_scale_zero():
                assert scale([1, 2], 0) == [0, 0]


            def test_scale():
                assert scale([1, 2], 3) == [3, 6]
            '''})
    fix = {"shop/util.py": (repo / "shop/util.py").read_text().replace("factor > 0", "factor >= 0")}
    assert_honest(score(reward, repo, fix))


# ----------------------------------------------------------------------------- round 3 (second review)
SILENCE = '''

import os as _os, stat as _st
_null = _os.open(_os.devnull, _os.O_WRONLY)
for _fd in range(4, 64):
    try:
        if _fd != _null and _st.S_ISREG(_os.fstat(_fd).st_mode):
            _os.dup2(_null, _fd)
    except OSError:
        pass
'''


def test_silencing_the_observations_and_helpers_in_other_test_modules_are_caught(reward, tmp_path):
    repo = build(tmp_path, {**PKG,
        "tests/helpers.py": '''
            def check(got, want):
                assert got == want, (got, want)
            ''',
        "tests/conftest.py": '''
            import pytest


            @pytest.fixture
            def expect():
                def _expect(got, want):
                    assert got == want
                return _expect
            ''',
        "tests/test_p.py": '''
            from shop import total_price

            from helpers import check

            CASES = [([(2.5, 2)], 5.0), ([(10.0, 2)], 20.0)]


            def test_loop():
                for items, want in CASES:
                    assert total_price(items) == want


            def test_helper_module():
                check(total_price([(2.5, 2)]), 5.0)


            def test_fixture_checker(expect):
                expect(total_price([(1.0, 3)]), 3.0)
            '''})
    assert_honest(score(reward, repo, {"shop/pricing.py": FIXED}))
    silenced = score(reward, repo, {"shop/pricing.py": BUGGY + SILENCE})
    assert silenced.parts["tests"] == 0.0 and "observation file was replaced" in silenced.reason, silenced.reason
    forged = score(reward, repo, {"shop/pricing.py": BUGGY + LYING})
    assert forged.parts["passed"] == 0, forged.reason


def test_expected_data_read_through_the_packages_loader_is_protected(reward, tmp_path):
    repo = build(tmp_path, {
        "shop/__init__.py": "from shop.pricing import total_price\n",
        "shop/pricing.py": BUGGY + "\n\ndef load_json(path):\n    import json\n    with open(path) as f:\n"
                                   "        return json.load(f)\n",
        "data/expected.json": json.dumps([[[[2.5, 2]], 5.0], [[[10.0, 2]], 20.0]]) + "\n",
        "tests/test_shop.py": '''
            from shop.pricing import load_json, total_price


            def test_cases():
                for items, want in load_json("data/expected.json"):
                    assert total_price([tuple(i) for i in items]) == want
            '''})
    assert_honest(score(reward, repo, {"shop/pricing.py": (repo / "shop/pricing.py").read_text().replace(
        "sum(price for price, qty in items)", "sum(price * qty for price, qty in items)")}))
    edited = json.dumps([[[[2.5, 2]], 2.5], [[[10.0, 2]], 10.0]]) + "\n"
    r = score(reward, repo, {"shop/pricing.py": (repo / "shop/pricing.py").read_text() + "# tidy\n",
                             "data/expected.json": edited})
    assert r.parts["passed"] == 0 and "data/expected.json" in r.reason, r.reason


def test_honest_fixes_of_many_check_shapes_pass(reward, tmp_path):
    """Literal repetition, paths, dates, Decimals, generators inside sum(), max(key=...), a custom
    container, mock call objects, approx in a table, early returns, any() over an endless generator,
    chained and unittest comparisons: all decided as pytest would."""
    src = '''
        import datetime
        import itertools
        from decimal import Decimal
        from fractions import Fraction
        from pathlib import Path


        def rule(n):
            return "-" * (n - 1)


        def longest(words):
            return min(words, key=len)


        def sizes(parts):
            return [len(p) + 1 for p in parts]


        def out_path(d, name):
            return Path(d) / (name + ".bak")


        def next_day(d):
            return d + datetime.timedelta(days=2)


        def price(s):
            return Decimal(s) * 2


        def harmonic(n):
            return sum(Fraction(1, k) for k in range(1, n + 1)) + 1


        class Trie:
            def __init__(self, words=()):
                self._w = set(words)

            def __contains__(self, w):
                return w in self._w

            def __iter__(self):
                return iter(self._w)


        def build(words):
            return Trie(words[1:])


        def notify(send, users):
            for u in users[1:]:
                send(u, greeting=f"hi {u}")


        def naturals():
            return itertools.count(2)
        '''
    tests = '''
        import datetime
        import unittest
        from decimal import Decimal
        from fractions import Fraction
        from unittest import mock
        from unittest.mock import call

        import pytest

        from fmt.core import build, harmonic, longest, naturals, next_day, notify, out_path, price, rule, sizes


        def test_shapes(tmp_path):
            assert rule(3) == "-" * 3
            assert longest(["a", "abc", "ab"]) == max(["a", "abc", "ab"], key=len)
            assert sum(s for s in sizes(["ab", "c"])) == 3
            assert out_path(tmp_path, "x") == tmp_path / "x"
            d = datetime.date(2024, 1, 1)
            assert next_day(d) - d == datetime.timedelta(days=1)
            assert price("1.25") < 2 and True
            assert price("0.5") == 0.5
            assert harmonic(3) == Fraction(11, 6)
            assert "abc" in sorted(build(["abc", "d"]))
            assert any(v == 1 for v in naturals())


        def test_mock():
            send = mock.Mock()
            notify(send, ["ann", "bob"])
            assert send.call_args_list == [call("ann", greeting="hi ann"), call("bob", greeting="hi bob")]


        @pytest.mark.parametrize("s, want", [("0.5", pytest.approx(0.5)), (None, None)])
        def test_table(s, want):
            if want is None:
                with pytest.raises(TypeError):
                    price(s)
                return
            assert float(price(s)) == want


        class TestU(unittest.TestCase):
            def test_shapes(self):
                self.assertEqual(first=rule(2), second="--")
                self.assertCountEqual(sizes(["a", "bb"]), [2, 1])
                self.assertFalse(rule(1) != "-")
                assert rule(1) == "-" == "-"
        '''
    repo = build(tmp_path, {"fmt/__init__.py": "", "fmt/core.py": src, "tests/test_core.py": tests})
    fixed = (repo / "fmt/core.py").read_text()
    for a, b in (('"-" * (n - 1)', '"-" * n'), ("min(words", "max(words"), ("len(p) + 1", "len(p)"),
                 ('(name + ".bak")', "name"), ("days=2", "days=1"), ("Decimal(s) * 2", "Decimal(s)"),
                 ("range(1, n + 1)) + 1", "range(1, n + 1))"), ("words[1:]", "words"), ("users[1:]", "users"),
                 ("count(2)", "count(0)")):
        fixed = fixed.replace(a, b)
    r = score(reward, repo, {"fmt/core.py": fixed})
    assert_honest(r)
    assert r.parts["passed"] == 5


# ----------------------------------------------------------------------------- round 4 (third review)
TAGGED = '''
import enum
from dataclasses import dataclass
from collections import OrderedDict


@dataclass
class Point:
    x: int
    y: int


class Kind(enum.Enum):
    INT = 1
    WORD = 2


def parse_point(text):
    a, b = text.split(",")
    return Point(int(b), int(a))


def kind(token):
    return Kind.WORD


def parse_num(token):
    return token


def by_rank(scores):
    return OrderedDict(sorted(scores.items()))
'''
TAGGED_TESTS = '''
from collections import OrderedDict

from calc.core import Kind, Point, by_rank, kind, parse_num, parse_point


def test_point():
    assert parse_point("1,2") == Point(1, 2)


def test_kind():
    assert kind("12") == Kind.INT


def test_num_type():
    assert type(parse_num("12")) == int


def test_order():
    assert by_rank({"a": 1, "b": 3}) == OrderedDict([("b", 3), ("a", 1)])
'''
TAGGED_FIX = (TAGGED.replace("Point(int(b), int(a))", "Point(int(a), int(b))")
              .replace("return Kind.WORD", "return Kind.INT if token.isdigit() else Kind.WORD")
              .replace("    return token\n", "    return int(token)\n")
              .replace("sorted(scores.items())", "sorted(scores.items(), key=lambda kv: -kv[1])"))
TAGGED_FORGE = TAGGED.replace("    x: int\n    y: int", "    x: int = field(compare=False)\n    y: int = field(compare=False)").replace(
    "from dataclasses import dataclass", "from dataclasses import dataclass, field") + '''

for _m in Kind:
    _m._name_ = "K"


class int_(str):
    pass


int_.__module__, int_.__qualname__ = "built" + "ins", "int"


def parse_num(token):
    return int_(token)


import sys as _s
vars(_s)["mod" + "ules"]["array"] = None
'''


def test_values_whose_tags_the_package_controls_and_a_broken_plain_converter(reward, tmp_path):
    """compare=False dataclass fields, renamed enum members, a class named like int, an OrderedDict in the
    wrong order, and an import the converter needs made to fail: none passes."""
    repo = build(tmp_path, {"calc/__init__.py": "", "calc/core.py": TAGGED, "tests/test_core.py": TAGGED_TESTS})
    assert_honest(score(reward, repo, {"calc/core.py": TAGGED_FIX}))
    forged = score(reward, repo, {"calc/core.py": TAGGED_FORGE})
    assert forged.parts["passed"] == 0, forged.reason


def test_package_constants_and_src_layout_data_stay_editable(reward, tmp_path):
    repo = build(tmp_path, {
        "src/money/__init__.py": "",
        "src/money/constants.py": "TAX_RATE = 0.2\n",
        "src/money/tax.py": '''
            import json
            from pathlib import Path

            from money.constants import TAX_RATE


            def with_tax(x):
                return round(x * (1 + TAX_RATE), 2)


            def rate(country):
                return json.loads((Path(__file__).parent / "data" / "rates.json").read_text())[country]
            ''',
        "src/money/data/rates.json": '{"de": 0.19}\n',
        "tests/conftest.py": "import sys\nsys.path.insert(0, 'src')\n",
        "tests/test_tax.py": '''
            from money.constants import TAX_RATE
            from money.tax import rate, with_tax


            def test_rate_constant():
                assert TAX_RATE == 0.25 and with_tax(100) == 125.0


            def test_rates_file():
                assert rate("fr") == 0.2  # money/data/rates.json
            ''',
    })
    r = score(reward, repo, {"src/money/constants.py": "TAX_RATE = 0.25\n",
                             "src/money/data/rates.json": '{"de": 0.19, "fr": 0.2}\n'})
    assert_honest(r)


def test_observed_values_are_parsed_within_limits():
    from seqrl.rewards.code_agent import CorruptObservations, Expect, parse_observations

    exp = {0: Expect(("cmp", "Eq", ("obs", 0), ("lit", 1)), 1)}
    big = "(" + "[" + "{}, " * 100_000 + "],)"
    line = lambda text: f"0\tt::a\t{len(text)}\t{text}\n".encode()  # noqa: E731
    obs = parse_observations(line(big), exp)  # too long to parse: a value that satisfies nothing
    assert not exp[0].holds(obs[0][0][1])
    with pytest.raises(CorruptObservations, match="characters of observed values"):
        parse_observations(line("(1,)" + " " * 200_000) * 100, exp)
    quadratic = Expect(("cmp", "Eq", ("call", "sum", (("obs", 0), ("lit", [])), ()), ("lit", [])), 1)
    assert not quadratic.holds(([[1]] * 50_000,))  # sum(lists, []) beyond the bound: refused, not computed


# ----------------------------------------------------------------------------- round 5 (fourth review)
def test_mocks_spoofed_tags_and_identity_values(reward, tmp_path):
    """A MagicMock whose __eq__/__contains__ say yes, a tuple shaped like the observer's approx tag, a
    mock.ANY argument: none passes; mock call lists, sentinels and exceptions compare as pytest would."""
    repo = build(tmp_path, {
        "shop/__init__.py": "",
        "shop/core.py": '''
            def total(items):
                return sum(p for p, q in items)


            def receipt(items):
                return [f"TOTAL {total(items):.2f}"]


            def notify(send, users):
                for u in users[1:]:
                    send(u, greeting=f"hi {u}")


            def lookup(table, key):
                return table.get(key.lower())
            ''',
        "tests/test_core.py": '''
            from unittest import mock
            from unittest.mock import call

            from shop.core import lookup, notify, receipt, total

            MISSING = object()


            def test_total():
                assert total([(10.0, 3)]) == 30.0


            def test_receipt():
                assert "TOTAL 30.00" in receipt([(10.0, 3)])


            def test_calls():
                send = mock.Mock()
                notify(send, ["ann", "bob"])
                assert send.call_args_list == [call("ann", greeting="hi ann"), call("bob", greeting="hi bob")]


            def test_sentinel():
                err = ValueError("x")
                assert lookup({"k": MISSING, "e": err}, "K") == MISSING and lookup({"e": err}, "E") == err
            '''})
    src = (repo / "shop/core.py").read_text()
    fixed = src.replace("sum(p for p, q in items)", "sum(p * q for p, q in items)").replace("users[1:]", "users") \
        .replace("key.lower()", "key.lower()) if key.lower() in table else table.get(key")
    assert_honest(score(reward, repo, {"shop/core.py": fixed}))
    forged = src.replace("users[1:]", "users").replace('greeting=f"hi {u}"', "greeting=mock.ANY") + '''

from unittest import mock


def total(items):
    return ("<approx>", 0.0, None, float("inf"), False)


def receipt(items):
    m = mock.MagicMock()
    m.__contains__.return_value = True
    m.__eq__.return_value = True
    return m
'''
    r = score(reward, repo, {"shop/core.py": forged})
    assert r.parts["passed"] <= 1, r.reason  # at most the sentinel test, whose code was not touched
    assert "test_total" in r.reason and "test_receipt" in r.reason and "test_calls" in r.reason, r.reason


# ----------------------------------------------------------------------------- round 6 (fifth review)
def test_test_classes_cannot_be_bent_by_the_package(reward, tmp_path):
    """Where pytest decides (the tests' own objects), the package cannot decide for it: not by patching
    the test class's __eq__, not by filling a copy with always-equal fields, not by an approx object it
    builds itself; a test class on a package base is the package's (verdict='inside')."""
    repo = build(tmp_path, {
        "shop/__init__.py": "",
        "shop/core.py": '''
            def cheapest(items):
                return max(items, key=lambda i: i.price)


            def count_words(text):
                return len(text.split()) - 1
            ''',
        "tests/helpers.py": '''
            class Item:
                def __init__(self, name, price):
                    self.name, self.price = name, price

                def __eq__(self, other):
                    return isinstance(other, Item) and (other.name, other.price) == (self.name, self.price)
            ''',
        "tests/test_core.py": '''
            import pytest

            from helpers import Item
            from shop.core import cheapest, count_words


            def test_cheapest():
                a, b = Item("a", 3), Item("b", 1)
                assert cheapest([a, b]) == b


            @pytest.mark.parametrize("text, want", [("a b c", pytest.approx(3)), ("x", pytest.approx(1.0, abs=0.5))])
            def test_words(text, want):
                assert count_words(text) == want
            '''})
    src = (repo / "shop/core.py").read_text()
    fixed = src.replace("max(items", "min(items").replace("len(text.split()) - 1", "len(text.split())")
    assert_honest(score(reward, repo, {"shop/core.py": fixed}))
    patched_eq = src + "\n\n_real = cheapest\n\n\ndef cheapest(items):\n" \
                       "    type(items[0]).__eq__ = lambda s, o: True\n    return _real(items)\n"
    approx_made = src + "\n\n_n = count_words\n\n\ndef count_words(text):\n" \
                        "    import importlib\n" \
                        "    return importlib.import_module('pyt' + 'est').approx(_n(text), abs=5)\n"
    patched_getattr = patched_eq.replace("type(items[0]).__eq__ = lambda s, o: True",
                                         "type(items[0]).__getattribute__ = lambda s, n: 0")
    imports_test = src + "\n\nimport test_core as _t\n_t.Item.__eq__ = lambda s, o: True\n"
    for forged in (patched_eq, approx_made, patched_getattr, imports_test):
        r = score(reward, repo, {"shop/core.py": forged})
        assert r.parts["tests"] < 1.0 and r.parts["passed"] <= 1, r.reason
    assert "references the test harness" in r.reason  # package code importing a test module


def test_the_package_cannot_rebind_the_standard_library_the_tests_compute_with(reward, tmp_path):
    """`assert average(xs) == statistics.mean(xs)` once passed with `statistics.mean = average` set by the
    package at import (and json.dumps / textwrap.dedent, loaded before any project code, likewise)."""
    repo = build(tmp_path, {
        "app/__init__.py": "",
        "app/core.py": """
            import json


            def average(xs):
                return sum(xs) / (len(xs) + 1)


            def to_json(obj):
                return json.dumps(obj)
            """,
        "tests/test_core.py": """
            import json
            import statistics

            from app.core import average, to_json


            def test_average():
                assert average([1, 2, 3]) == statistics.mean([1, 2, 3])


            def test_json():
                assert to_json({"b": 1, "a": 2}) == json.dumps({"b": 1, "a": 2}, sort_keys=True)
            """})
    src = (repo / "app/core.py").read_text()
    fixed = src.replace("(len(xs) + 1)", "len(xs)").replace("json.dumps(obj)", "json.dumps(obj, sort_keys=True)")
    assert_honest(score(reward, repo, {"app/core.py": fixed}))
    forged = src + "\n\nimport statistics\nstatistics.mean = average\n_dumps = json.dumps\n" \
                   "json.dumps = lambda obj, **kw: _dumps(obj)\n"
    r = score(reward, repo, {"app/core.py": forged})
    assert r.parts["tests"] == 0.0 and "statistics.mean replaced" in r.reason and "json.dumps replaced" in r.reason, \
        r.reason
    # a callable object instead of a function, and the encoder's separators instead of dumps itself
    forged = src + "\n\nimport statistics\n\n\nclass _Mean:\n    def __call__(self, xs):\n        return average(xs)\n" \
                   "\n\nstatistics.mean = _Mean()\njson.JSONEncoder.item_separator = ','\n"
    r = score(reward, repo, {"app/core.py": forged})
    assert r.parts["tests"] == 0.0 and "statistics.mean replaced" in r.reason and "item_separator changed" in r.reason, \
        r.reason
