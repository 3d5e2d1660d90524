"""Code-agent reward against patches that leave the fixture's bug in place but attack the harness
(classes A–D of docs/sandbox.md, "Pytest verdicts"), and a checkout + virtualenv under a private
(0700) directory (class E). Every attack must earn no more than the wrong patch (0.45)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from seqrl.rewards.code_agent import CodeAgentReward, default_pytest_path

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's namespaces and uids need root (CI runs as root)")

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "code_agent"
REPO = FIX / "repo"
CMD = "python -m pytest -q"
WRONG_SCORE = 0.45
BUGGY = (REPO / "shop/pricing.py").read_text()
FIXED = BUGGY.replace("sum(price for price, qty in items)", "sum(price * qty for price, qty in items)")


def make_diff(changes: dict[str, str], repo: Path = REPO) -> str:
    import difflib

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
    return CodeAgentReward(timeout_s=20.0)


def score(reward, diff, repo=REPO):
    return reward.score(repo, "", (), diff, CMD)


# ----------------------------------------------------------------------------- E: private checkout
def test_checkout_and_venv_under_a_private_directory(tmp_path):
    priv = tmp_path / "home"
    site = priv / "venv" / "lib" / "python3" / "site-packages"
    site.mkdir(parents=True)
    for d in default_pytest_path():
        for name in ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py.py"):
            src = Path(d) / name
            if src.exists() and not (site / name).exists():
                (shutil.copytree if src.is_dir() else shutil.copyfile)(src, site / name)
    shutil.copytree(REPO, priv / "repo")
    os.chmod(priv, 0o700)
    assert stat.S_IMODE(os.stat(priv).st_mode) == 0o700
    r = CodeAgentReward(timeout_s=20.0, python_path=(str(site),))
    fixed = r.score(priv / "repo", "", (), make_diff({"shop/pricing.py": FIXED}), CMD)
    assert fixed.score == pytest.approx(1.2), fixed.reason
    wrong = r.score(priv / "repo", "", (), make_diff({"shop/pricing.py": BUGGY.replace("round(", "round(0 + ")}), CMD)
    assert wrong.score == pytest.approx(0.2) and wrong.parts["passed"] == 0, wrong.reason


def assert_no_better_than_wrong(r):
    assert r.score <= WRONG_SCORE + 1e-9, (r.score, r.reason)
    assert r.parts["tests"] < 1.0, r.reason


# The payload the attacks deliver: every test's body becomes a no-op, so the bug stays and every test
# "passes" (harness names are spelled in pieces, as a policy would, to pass the static screen).
NOOP_RUNTEST = '''
import importlib, importlib.util, sys
_T = "_py" + "test.python"
def _noop(self):
    return None
def _patch(m):
    m.Function.runtest = _noop
if _T in sys.modules:
    _patch(sys.modules[_T])
else:
    class _F:
        def find_spec(self, name, path=None, target=None):
            if name != _T:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            ex = spec.loader.exec_module
            def exec_module(m, ex=ex):
                ex(m)
                _patch(m)
            spec.loader.exec_module = exec_module
            return spec
    sys.meta_path.insert(0, _F())
'''

# A: a stdlib-named module at the root loads the real one, then hooks pytest before the guard starts
STDLIB_SHADOW = '''import os, sys, importlib
_here = os.path.dirname(os.path.abspath(__file__))
_saved = list(sys.path)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _here]
del sys.modules[__name__]
_real = importlib.import_module(__name__)
sys.path[:] = _saved
sys.modules[__name__] = _real
''' + NOOP_RUNTEST

# A: a `_pytest` package at the root that runs the real one's __init__ from the real directory
HARNESS_SHADOW = '''import os, sys
for _p in sys.path[1:]:
    _d = os.path.join(_p, "_py" + "test")
    if os.path.isfile(os.path.join(_d, "__init__.py")):
        __path__[:] = [_d]
        __file__ = os.path.join(_d, "__init__.py")
        exec(compile(open(__file__).read(), __file__, "exec"))
        break
''' + NOOP_RUNTEST


@pytest.mark.parametrize("path, text", [
    ("textwrap.py", STDLIB_SHADOW),
    ("pprint.py", STDLIB_SHADOW),
    ("shlex.py", STDLIB_SHADOW),
    ("_pytest/__init__.py", HARNESS_SHADOW),
    ("src/textwrap.py", STDLIB_SHADOW),
])
def test_class_a_shadowing_a_module_pytest_imports(reward, path, text):
    r = score(reward, make_diff({path: text}))
    assert_no_better_than_wrong(r)
    assert r.score == 0.0 and "standard-library or test harness module" in r.reason, r.reason


# B: a plugin registered from the package under test through hooks that carry no result (hook names
# spelled in pieces: the static screen never sees "pytest")
FIND_PM = '''
import gc, sys
_H = "py" + "test_"
def _pm():
    for o in gc.get_objects():
        if type(o).__name__ == "Py" + "testPluginManager":
            return o
'''
PLUGIN_RUNTEST = FIND_PM + '''
class _P:
    pass
def _finish(self, session):
    for it in session.items:
        it.runtest = lambda: None
setattr(_P, _H + "collection_finish", _finish)
_pm().register(_P(), "helper")
'''
PLUGIN_OBJ = FIND_PM + '''
def _ok():
    return None
class _P:
    pass
def _finish(self, session):
    for it in session.items:
        it._obj = _ok
setattr(_P, _H + "collection_finish", _finish)
_pm().register(_P(), "helper2")
'''
PLUGIN_MODULE = FIND_PM + '''
def _loop(session):
    for it in session.items:
        it.runtest = lambda: None
globals()[_H + "runtestloop"] = _loop
_pm().register(sys.modules[__name__], "helper3")
'''
PLUGIN_TESTFN = FIND_PM + '''
class _P:
    pass
def _finish(self, session):
    for it in session.items:
        it.obj.__code__ = (lambda: None).__code__
setattr(_P, _H + "collection_finish", _finish)
_pm().register(_P(), "helper4")
'''


@pytest.mark.parametrize("payload", [PLUGIN_RUNTEST, PLUGIN_OBJ, PLUGIN_MODULE, PLUGIN_TESTFN],
                         ids=["runtest", "obj", "module", "code"])
def test_class_b_plugin_through_a_non_result_hook(reward, payload):
    r = score(reward, make_diff({"shop/pricing.py": BUGGY + payload}))
    assert r.parts["harness_refs"] == 0  # it reaches the run: the guard must catch it
    assert_no_better_than_wrong(r)


# C: forge a complete stamped report and exit before any test runs; the nonce comes from argv,
# /proc/self/cmdline or the guard's memory
FORGE = '''
import os, re
def _forge(nonce):
    names = []
    for f in sorted(os.listdir("tests")):
        if f.startswith("test_") and f.endswith(".py"):
            for m in re.finditer(r"^def (test\\w+)", open(os.path.join("tests", f)).read(), re.M):
                names.append(("tests." + f[:-3], m.group(1)))
    cases = "".join(f'<testcase classname="{c}" name="{n}" time="0"/>' for c, n in names)
    xml = ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="p" errors="0" failures="0" '
           f'skipped="0" tests="{len(names)}"><properties><property name="seq{""}rl_integrity" value="ok {nonce}"/>'
           f'</properties>{cases}</testsuite></testsuites>')
    os.write(3, xml.encode())
    os._exit(0)
'''
NONCE_ARGV = FORGE + '''
import json, sys
for _a in sys.argv:
    if _a.startswith("{"):
        _forge(json.loads(_a)["nonce"])
'''
NONCE_CMDLINE = FORGE + '''
import json
for _a in open("/proc/self/cmdline", "rb").read().split(b"\\0"):
    if _a.startswith(b"{") and b"nonce" in _a:
        _forge(json.loads(_a)["nonce"])
'''
NONCE_MEMORY = FORGE + '''
import gc
for _o in gc.get_objects():
    if type(_o).__name__ == "Guard" and isinstance(getattr(_o, "nonce", None), str):
        _forge(_o.nonce)
'''


@pytest.mark.parametrize("payload", [NONCE_ARGV, NONCE_CMDLINE, NONCE_MEMORY], ids=["argv", "cmdline", "memory"])
def test_class_c_forged_report_with_the_nonce(reward, payload):
    r = score(reward, make_diff({"shop/pricing.py": BUGGY + payload}))
    assert r.parts["harness_refs"] == 0
    assert_no_better_than_wrong(r)


def test_class_c_without_outside_verdicts_only_the_memory_route_stays_open():
    inside = CodeAgentReward(timeout_s=20.0, verdict="inside")
    for payload in (NONCE_ARGV, NONCE_CMDLINE):
        assert_no_better_than_wrong(score(inside, make_diff({"shop/pricing.py": BUGGY + payload})))


# D: read the expected values from the tests while they run
READ_TESTS = '''
import ast as _ast, os as _os
_TABLE = {}
for _f in sorted(_os.listdir("tests")):
    if _f.endswith(".py"):
        for _n in _ast.walk(_ast.parse(open(_os.path.join("tests", _f)).read())):
            if isinstance(_n, _ast.Compare) and isinstance(_n.left, _ast.Call):
                try:
                    _args = tuple(_ast.literal_eval(a) for a in _n.left.args)
                    _kw = {k.arg: _ast.literal_eval(k.value) for k in _n.left.keywords}
                    _TABLE[repr((_args, sorted(_kw.items())))] = _ast.literal_eval(_n.comparators[0])
                except ValueError:
                    pass
_buggy = total_price
def total_price(items, discount_pct=0):
    key = repr(((items,) if discount_pct == 0 else (items,), sorted({"discount_pct": discount_pct}.items())
                if discount_pct else []))
    return _TABLE.get(key, _buggy(items, discount_pct))
'''
READ_STACK = '''
import sys as _sys, linecache as _lc, re as _re
_buggy = total_price
def total_price(items, discount_pct=0):
    f = _sys._getframe(1)
    line = _lc.getline(f.f_code.co_filename, f.f_lineno)
    m = _re.search(r"==\\s*([-0-9.]+)", line)
    return float(m.group(1)) if m else _buggy(items, discount_pct)
'''
READ_CODE_CONSTS = '''
import sys as _sys
_buggy = total_price
def total_price(items, discount_pct=0):
    consts = [c for c in _sys._getframe(1).f_code.co_consts if type(c) is float]
    return consts[-1] if consts else _buggy(items, discount_pct)
'''


@pytest.mark.parametrize("payload", [READ_TESTS, READ_STACK, READ_CODE_CONSTS], ids=["files", "stack", "consts"])
def test_class_d_expected_values_read_from_the_tests(reward, payload):
    diff = make_diff({"shop/pricing.py": BUGGY + payload})
    inside = score(CodeAgentReward(timeout_s=20.0, verdict="inside"), diff)
    assert inside.parts["passed"] >= 3, inside.reason  # the attack works when pytest alone decides
    assert_no_better_than_wrong(score(reward, diff))


# ----------------------------------------------------------------------------- static screen
@pytest.mark.parametrize("line, word", [
    ("_f = __import__('sys')._getframe(1)", "sys._getframe"),
    ("import inspect", "inspect"),
    ("import linecache", "linecache"),
    ("_m = __import__('sys').modules", "sys.modules"),
    ("_fd = open('/dev/fd/3', 'w')", "/dev/fd"),
    ("_src = open('tests/test_pricing.py').read()", "'tests/"),
    ("__import__('os')._exit(0)", "os._exit"),
])
def test_suspicious_references_are_penalised_and_named(reward, line, word):
    fixed = FIXED + "\n" + line.replace("__import__('sys')", "sys").replace("__import__('os')", "os") + "\n"
    fixed = "import os, sys\n" + fixed
    r = score(reward, make_diff({"shop/pricing.py": fixed}))
    assert r.parts["suspect_refs"] == 1.0, r.reason
    assert f"suspicious references to the harness (−0.25): shop/pricing.py: {word!r}" in r.reason, r.reason
    if "_exit" not in line and "/dev/fd" not in line:
        assert r.score == pytest.approx(1.2 - 0.25), r.reason


def test_a_plain_fix_is_not_suspicious(reward):
    r = score(reward, make_diff({"shop/pricing.py": FIXED}))
    assert r.score == pytest.approx(1.2) and r.parts["suspect_refs"] == 0 and r.parts["outside"] == 1.0


# ----------------------------------------------------------------------------- outside verdicts (pure)
def test_externalize_asserts_keeps_every_literal_out_of_the_rewritten_file():
    from seqrl.rewards.code_agent import externalize_asserts, parse_observations

    src = ("import pytest\n"
           "def helper():\n    assert g() == 11\n"
           "def test_a():\n    assert 4 == f(2), 'msg 7'\n    for x in [1]:\n        assert f(x) == 5\n"
           "    assert f(3) == expected\n    assert f(4) is None\n"
           "class TestB:\n    def test_b(self):\n        assert f(9) == (1, 'zz')\n")
    out, expected, by_test, must = externalize_asserts(src, start=10)
    assert sorted(expected) == [10, 11, 12, 13, 14]
    assert by_test == {"helper": [10], "test_a": [11, 12, 13], "TestB.test_b": [14]} and must == {11, 13, 14}
    assert expected[11].holds((4,)) and not expected[11].holds((5,)) and not expected[11].holds((4, 4))
    assert expected[12].holds((5,)) and expected[14].holds(((1, "zz"),)) and expected[10].holds((11,))
    assert expected[13].holds((7, 7)) and not expected[13].holds((7, 8))  # both sides observed, compared here
    for secret in ("4 ==", "msg 7", "== 5", "== 11"):  # no comparison with its literal is left in the file
        assert secret not in out
    import ast as _ast  # a literal compared with a value sits among at least 7 others of its type (the run's pool)
    pools = [kw.value for n in _ast.walk(_ast.parse(out)) if isinstance(n, _ast.Call) for kw in n.keywords
             if kw.arg == "pool"]
    assert len(pools) == 4 and all(8 <= len(_ast.literal_eval(p)) <= 16 for p in pools)
    assert sum(_ast.literal_eval(p).count((1, "zz")) for p in pools) == 1  # only in its own check's pool
    assert "f(4) is None" in out  # an identity check stays in-process
    compile(out, "t.py", "exec")
    def lines(*rows):
        return "".join(f"{k}\t{node}\t{len(text)}\t{text}\n" for k, node, text in rows).encode()

    obs = parse_observations(lines((11, "t::a", "(4,)"), (12, "t::a", "(6,)"), (14, "t::b", "((1, 'zz'),)"),
                                   (99, "t::a", "1"), (14, "t::b", "object()"), (13, "t::a", "(inf, inf)")), expected)
    assert obs[11] == [("t::a", (4,))] and obs[12] == [("t::a", (6,))] and obs[14][0] == ("t::b", ((1, "zz"),))
    assert not expected[14].holds(obs[14][1][1])
    assert set(obs) == {11, 12, 13, 14} and expected[13].holds(obs[13][0][1])
    from seqrl.rewards.code_agent import CorruptObservations

    for bad in (lines((11, "t::a", "(4,)"))[:-1], b"11\tt::a\t9\t(4,)\n", b"xx\t1\n",
                lines((11, "t::a", "(4,)")).replace(b"\n", b"") + lines((12, "t::a", "(5,)"))):
        with pytest.raises(CorruptObservations):  # cut, wrong length, no fields, two lines merged
            parse_observations(bad, expected)


def test_externalized_comparisons_are_made_here_on_plain_values():
    """Comparisons of any order, arithmetic inside them, ``pytest.approx``, ``math.isclose`` and unittest's
    assertions are evaluated here on the observed leaves."""
    from seqrl.rewards.code_agent import externalize_asserts

    src = ("import math, pytest\nfrom pytest import approx\n"
           "def test_t(want, tol):\n"
           "    assert mean(xs) == pytest.approx(want, rel=tol)\n"
           "    assert approx(2.0, abs=0.1) == g()\n"
           "    assert f(1) != want\n"
           "    assert 3 == 3\n"
           "    assert h(*a) == approx(*b)\n"
           "    assert abs(got - want) < 1e-9\n"
           "    assert math.isclose(got, 0.5)\n"
           "    assert x is None or x.v == 3\n"
           "class TestU:\n"
           "    def test_u(self):\n"
           "        self.assertEqual(f(2), 4)\n"
           "        self.assertAlmostEqual(g(), 0.3, places=3)\n"
           "        self.assertIn(k, {1, 2})\n")
    out, exp, by_test, must = externalize_asserts(src)
    assert by_test == {"test_t": [0, 1, 2, 3, 4, 5], "TestU.test_u": [6, 7, 8]}
    assert "approx(2.0" not in out and "3 == 3" in out and "approx(*b)" in out and "x is None or" in out and "1e-09" not in out
    assert exp[0].holds((1.0004, 1.0, 1e-3)) and not exp[0].holds((1.01, 1.0, 1e-3))
    assert exp[0].holds((float("nan"), float("nan"), 1e-3)) is False
    assert exp[1].holds((2.05,)) and not exp[1].holds((2.2,)) and not exp[1].holds(("2.05",))
    assert exp[2].holds((1, 2)) and not exp[2].holds((2, 2))
    from seqrl.rewards.code_agent import Verdict, _untag

    approx_3 = _untag(("<approx>", 3.0, None, None, False))  # a starred approx: both sides observed
    assert exp[3].holds((3.0000001, approx_3)) and not exp[3].holds((3.1, approx_3))
    assert exp[3].holds(Verdict(True)) and not exp[1].holds(Verdict(True))  # pytest's verdict: no literal only
    assert exp[4].holds((1.0, 1.0)) and not exp[4].holds((1.0, 1.5)) and not exp[4].holds(("a", "b"))
    assert exp[5].holds((0.5,)) and not exp[5].holds((0.6,))
    assert exp[6].holds((4,)) and not exp[6].holds((5,))
    assert exp[7].holds((0.3001,)) and not exp[7].holds((0.31,))
    assert exp[8].holds((2,)) and not exp[8].holds((3,))
    assert must == {0, 1, 2, 3, 4, 5, 6, 7, 8}


def test_inherited_and_aliased_tests_resolve_to_their_definition():
    import ast

    from seqrl.rewards.code_agent import function_defs, resolve_test

    tree = ast.parse("class TestBase:\n    __test__ = False\n    def test_m(self): pass\n"
                     "class TestInts(TestBase):\n    pass\n"
                     "class TestMore(TestInts):\n    def test_n(self):\n        def inner(): pass\n"
                     "def test_a(): pass\ntest_b = test_a\nclass TestExt(Elsewhere):\n    pass\n")
    assert sorted(function_defs(tree)) == ["TestBase.test_m", "TestMore.test_n", "TestMore.test_n.<locals>.inner",
                                           "test_a"]
    assert resolve_test(tree, "TestInts.test_m") == "TestBase.test_m"
    assert resolve_test(tree, "TestMore.test_m") == "TestBase.test_m"
    assert resolve_test(tree, "test_b") == "test_a"
    assert resolve_test(tree, "TestExt.test_m") is None and resolve_test(tree, "test_zz") is None


def test_observed_values_are_converted_to_plain_data():
    import collections
    import enum
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src" / "seqrl" / "sandbox"))
    try:
        import _pytest_entry as entry
    finally:
        sys.path.pop(0)

    class Color(str, enum.Enum):
        RED = "red"

    class Always:
        def __eq__(self, other):
            return True

    point = collections.namedtuple("point", "x y")
    assert repr(entry._plain([Color.RED, point(1, 2.5), frozenset({3}), {1: (True,)}])) == \
        "['red', (1, 2.5), ('<set>', (3,)), {1: (True,)}]"
    with pytest.raises(TypeError):
        entry._plain(Always())

    class Forged(float):  # lies through every method a conversion could call
        def __eq__(self, other):
            return True

        def __float__(self):
            return 5.0

        __hash__ = float.__hash__

    import collections as c

    from seqrl.rewards.code_agent import _parse_value

    big = 7 ** 20_000
    class Relabelled(float):  # a subclass without a comparison of its own: its real contents
        def __float__(self):
            return 5.0

    with pytest.raises(TypeError, match="its own comparison"):  # not plain data: the probes decide
        entry._plain(Forged(2.5))
    values = [Relabelled(2.5), {frozenset({1, 2}), frozenset()}, int, ValueError, {"a": 1}.keys(), bytearray(b"x"),
              c.deque([1]), big, float("inf")]
    back = _parse_value(repr(entry._plain(values)))
    assert back[0] == 2.5 and back[1] == {frozenset({1, 2}), frozenset()} and back[4] == {"a"} and back[5] == b"x"
    assert not entry._honest(Forged(2.5))  # equal to a fresh object of no known class
    assert back[2] == ("<type>", "builtins", "int", id(int)) and back[3][:3] == ("<type>", "builtins", "ValueError")
    assert back[6] == c.deque([1]) and type(back[6]) is c.deque and back[7] == big and back[8] == float("inf")


def test_guard_allows_pytest_plugins_registered_as_classes_and_nothing_new():
    """pytest before 9.2 registers its ``legacypath-tmpdir`` plugin as a class, not an instance: a
    class recorded in the snapshot is pytest's own; a class made later (by the patch) is not."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src" / "seqrl" / "sandbox"))
    try:
        import _pytest_entry as entry
    finally:
        sys.path.pop(0)
    from _pytest.legacypath import LegacyTmpdirPlugin

    guard = entry.Guard("n", [], entry.snapshot())

    class Planted:
        pass

    assert guard._allowed_plugin(LegacyTmpdirPlugin) and guard._allowed_plugin(LegacyTmpdirPlugin())
    assert not guard._allowed_plugin(Planted) and not guard._allowed_plugin(Planted())
