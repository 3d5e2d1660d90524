"""Code-agent trajectory reward (component tier): the fixture repository's four patches, attacks on
the test harness, bad diffs, the action penalty, the batch interface and the CLI. Everything runs in
the sandbox, which needs root (as on the project's machines and CI)."""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqrl.types import Problem
from seqrl.rewards.code_agent import (
    CodeAgentReward,
    CodeAgentRewardFunction,
    default_pytest_path,
    stage_pytest,
    is_protected,
    parse_junit,
    parse_test_cmd,
    scan_diff,
)
from seqrl.sandbox import run_command, runner

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's namespaces and uids need root (CI runs as root)")

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "code_agent"
REPO = FIX / "repo"
ISSUE = (FIX / "ISSUE.md").read_text()
CMD = "python -m pytest -q"
PRICING = "shop/pricing.py"
BUGGY = (REPO / PRICING).read_text()
FIXED = BUGGY.replace("sum(price for price, qty in items)", "sum(price * qty for price, qty in items)")


def patch(name: str) -> str:
    return (FIX / "patches" / f"{name}.diff").read_text()


def make_diff(changes: dict[str, str | None], repo: Path = REPO) -> str:
    """A git-style unified diff of ``changes`` (path → new text, None = delete) against ``repo``."""
    out = []
    for path, new in changes.items():
        old_file = repo / path
        old = old_file.read_text() if old_file.exists() else None
        a = old.splitlines(keepends=True) if old is not None else []
        b = new.splitlines(keepends=True) if new is not None else []
        out.append(f"diff --git a/{path} b/{path}\n")
        if old is None:
            out.append("new file mode 100644\n")
        elif new is None:
            out.append("deleted file mode 100644\n")
        out += difflib.unified_diff(a, b, "/dev/null" if old is None else f"a/{path}",
                                    "/dev/null" if new is None else f"b/{path}")
    return "".join(out)


@pytest.fixture(scope="module")
def reward():
    return CodeAgentReward(timeout_s=20.0)


def score(reward, diff, actions=(), repo=REPO, cmd=CMD):
    return reward.score(repo, ISSUE, actions, diff, cmd)


# ----------------------------------------------------------------------------- the four patches
def test_four_fixture_patches_score_as_intended(reward):
    correct = score(reward, patch("correct"))
    wrong = score(reward, patch("wrong"))
    edits = score(reward, patch("edit_tests"))
    broken = score(reward, patch("not_apply"))

    # correct: every pristine test passes; full quality; no actions → the maximum 1.0 + 0.1 + 0.1
    assert correct.parts["tests"] == 1.0 and correct.parts["passed"] == correct.parts["total"] == 4
    assert correct.score == pytest.approx(1.2) and correct.reason == ""
    # wrong: applies, 2 of 4 pass → 0.5 × 0.5 test reward, named failures
    assert wrong.parts["passed"] == 2 and wrong.parts["total"] == 4
    assert wrong.parts["tests"] == pytest.approx(0.25) and 0 < wrong.score < correct.score
    assert wrong.score == pytest.approx(0.25 + 0.2)
    assert "2/4 tests passed" in wrong.reason and "test_discount" in wrong.reason
    # test edits: the edited tests would all pass on the buggy code, but they are restored → nothing
    assert edits.score == 0.0 and edits.parts["tests"] == 0.0 and edits.parts["test_files_touched"] == 1
    assert "tests/test_pricing.py" in edits.reason and "restored" in edits.reason
    # does not apply: 0 with git's reason
    assert broken.score == 0.0 and broken.parts["applies"] == 0
    assert "does not apply" in broken.reason and "shop/pricing.py" in broken.reason


def test_fix_plus_test_edits_keeps_the_fix_credit_and_can_be_penalised(reward):
    edited_tests = (REPO / "tests/test_pricing.py").read_text().replace("== 18.0", "== 17.0")
    diff = make_diff({PRICING: FIXED, "tests/test_pricing.py": edited_tests,
                      "tests/test_extra.py": "def test_free():\n    assert True\n"})
    r = score(reward, diff)
    assert r.parts["tests"] == 1.0 and r.parts["total"] == 4  # the added test does not count
    assert r.parts["test_files_touched"] == 2 and "restored" in r.reason
    strict = CodeAgentReward(timeout_s=20.0, test_edit_penalty=-0.3)
    assert score(strict, diff).score == pytest.approx(r.score - 0.3)


def test_action_penalty_per_action_and_cap(reward):
    base = score(reward, patch("correct"), actions=[])
    five = score(reward, patch("correct"), actions=[{"tool": "edit"}] * 5)
    many = score(reward, patch("correct"), actions=1000)
    assert base.score - five.score == pytest.approx(5 * 0.01)
    assert five.parts["actions"] == 5 and five.parts["action_penalty"] == pytest.approx(0.05)
    assert base.score - many.score == pytest.approx(0.2)  # max_action_penalty
    assert "5 actions" in five.reason


def test_syntax_error_in_the_patch(reward):
    r = score(reward, make_diff({PRICING: BUGGY.replace("def total_price(items", "def total_price(items:")}))
    assert r.parts["applies"] == 1 and r.parts["parses"] == 0.0 and r.parts["passed"] == 0
    assert "does not parse" in r.reason and r.score == pytest.approx(0.1)  # size only


# ----------------------------------------------------------------------------- attacks on the harness
def applied_tree(diff: str) -> Path:
    """The fixture repo with ``diff`` applied (root-owned, world-readable), for the plain-pytest check."""
    d = Path(tempfile.mkdtemp(prefix="seqrl-test-agent-"))
    os.chmod(d, 0o755)
    shutil.copytree(REPO, d / "repo")
    subprocess.run(["git", "apply", "-"], input=diff.encode(), cwd=d / "repo", check=True,
                   env={"PATH": "/usr/bin:/bin", "GIT_CEILING_DIRECTORIES": str(d)})
    for p in [d / "repo", *(d / "repo").rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return d


def plain_pytest_passes(diff: str) -> bool:
    """Does the attack fool *plain* pytest (no guard, no restore)? Run in the sandbox, exit status."""
    d = applied_tree(diff)
    try:
        staged = stage_pytest(default_pytest_path())  # reachable by the sandbox uid from a private checkout too
        code = (f"import sys; sys.path[:0] = ['.', *{list(staged)!r}]; import pytest; "
                "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider']))")
        r = run_command([runner._sandbox_python(), "-I", "-S", "-B", "-c", code], cwd=d / "repo", timeout_s=30,
                        env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, memory_mb=2048, read_paths=staged)
        return r.status == "ok" and r.returncode == 0
    finally:
        shutil.rmtree(d, ignore_errors=True)


CONFTEST_FORGE = '''import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    rep.outcome, rep.longrepr = "passed", None
'''

OBFUSCATED_FORGE = BUGGY + '''

import importlib as _il

_r = _il.import_module("_py" + "test.rep" + "orts")
_orig = _r.TestReport.__init__


def _init(self, *a, **k):
    _orig(self, *a, **k)
    self.outcome, self.longrepr = "passed", None


_r.TestReport.__init__ = _init
'''

EXIT_FORGE = BUGGY + '''

import os as _os

_names = ["test_quantity_counts", "test_several_items", "test_discount", "test_half_price"]
_x = ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="x" tests="4" failures="0" errors="0">'
      + "".join('<testcase classname="tests.test_pricing" name="%s" />' % n for n in _names)
      + "</testsuite></testsuites>")
for _fd in range(3, 12):
    try:
        _os.write(_fd, _x.encode())
    except OSError:
        pass
_os._exit(0)
'''

WRITE_IF_ABLE = '''"""Prices of a basket."""


def _writable(path):
    try:
        with open(path, "a"):
            return True
    except OSError:
        return False


if _writable("tests/test_pricing.py") or _writable("shop/new_module.py") or _writable("tests/test_zz.py"):
    def total_price(items, discount_pct=0):
        return round(sum(p * q for p, q in items) * (1 - discount_pct / 100), 2)
else:
    def total_price(items, discount_pct=0):
        return -1.0
'''


def test_conftest_added_by_the_patch_is_removed(reward):
    diff = make_diff({"conftest.py": CONFTEST_FORGE, PRICING: BUGGY.replace("Prices of", "The prices of")})
    assert plain_pytest_passes(diff), "the attack must fool plain pytest, else this test proves nothing"
    r = score(reward, diff)
    assert r.parts["applies"] == 1 and r.parts["passed"] == 0 and r.parts["tests"] == 0.0
    assert r.parts["test_files_touched"] == 1 and "conftest.py" in r.reason


def test_harness_references_in_source_get_no_test_reward(reward):
    src = FIXED + "\nimport _pytest.reports as _r  # noqa\n"
    r = score(reward, make_diff({PRICING: src}))
    assert r.parts["harness_refs"] == 1 and r.parts["tests"] == 0.0 and r.parts["total"] == 0
    assert "references the test harness" in r.reason
    lenient = CodeAgentReward(timeout_s=20.0, forbid_harness_refs=False)
    assert score(lenient, make_diff({PRICING: src})).parts["tests"] == 1.0  # the fix itself is fine


def test_obfuscated_monkeypatch_of_pytest_is_caught_by_the_guard(reward):
    diff = make_diff({PRICING: OBFUSCATED_FORGE})
    assert plain_pytest_passes(diff), "the attack must fool plain pytest, else this test proves nothing"
    r = score(reward, diff)
    assert r.parts["harness_refs"] == 0  # the static heuristic misses it …
    assert r.parts["tests"] == 0.0 and r.parts["passed"] == 0  # … the integrity guard does not
    assert "integrity check failed: tampered" in r.reason and "TestReport.__init__" in r.reason


def test_forged_report_and_exit_zero_earn_nothing(reward):
    r = score(reward, make_diff({PRICING: EXIT_FORGE}))
    assert r.parts["tests"] == 0.0 and r.parts["passed"] == 0
    assert "integrity" in r.reason or "report" in r.reason


def test_tested_code_cannot_write_the_tree(reward):
    r = score(reward, make_diff({PRICING: WRITE_IF_ABLE}))
    assert r.parts["applies"] == 1 and r.parts["passed"] == 0  # every write was refused → the -1.0 branch


def test_config_planted_above_the_copy_is_ignored(monkeypatch):
    """An earlier run could leave pytest.ini / conftest.py in a world-writable parent (/tmp): config
    discovery would pick them up; the pinned -c / --rootdir / --confcutdir do not."""
    d = world_dir()
    (d / "conftest.py").write_text("raise SystemExit('planted conftest was loaded')\n")
    (d / "pytest.ini").write_text("[pytest]\naddopts = -p planted_plugin_xyz\n")
    monkeypatch.setattr(tempfile, "tempdir", str(d))  # the reward's work dirs are created in d
    try:
        r = score(CodeAgentReward(timeout_s=20.0), patch("correct"))
        assert r.parts["tests"] == 1.0, r.reason
    finally:
        shutil.rmtree(d)


def test_symlinks_and_compiled_files_are_rejected(reward):
    link = ("diff --git a/shop/data b/shop/data\nnew file mode 120000\n--- /dev/null\n+++ b/shop/data\n"
            "@@ -0,0 +1 @@\n+/etc/shadow\n\\ No newline at end of file\n")
    r = score(reward, link + make_diff({PRICING: FIXED}))
    assert r.score == 0.0 and "symlink" in r.reason
    pyc = ("diff --git a/shop/__pycache__/pricing.cpython-311.pyc b/shop/__pycache__/pricing.cpython-311.pyc\n"
           "new file mode 100644\n--- /dev/null\n+++ b/shop/__pycache__/pricing.cpython-311.pyc\n@@ -0,0 +1 @@\n+x\n")
    r = score(reward, pyc + make_diff({PRICING: FIXED}))
    assert r.score == 0.0 and "compiled file" in r.reason


def test_hanging_import_times_out(reward):
    quick = CodeAgentReward(timeout_s=3.0)
    r = score(quick, make_diff({PRICING: "while True:\n    pass\n"}))
    assert r.parts["tests"] == 0.0 and "timed out" in r.reason


def test_tests_that_do_not_collect_on_the_snapshot_count_when_the_patch_makes_them(reward, tmp_path):
    snap = tmp_path / "repo"
    shutil.copytree(REPO, snap)
    (snap / "tests" / "test_unit.py").write_text(
        "from shop.pricing import unit_price\n\n\ndef test_unit():\n    assert unit_price(6.0, 3) == 2.0\n\n\n"
        "def test_unit_zero():\n    assert unit_price(1.0, 0) == 0.0\n")
    only_fix = score(reward, make_diff({PRICING: FIXED}, snap), repo=snap)
    assert only_fix.parts["total"] == 5 and only_fix.parts["passed"] == 4  # the uncollectable file counts as 1
    full = FIXED + "\n\ndef unit_price(total, qty):\n    return total / qty if qty else 0.0\n"
    r = score(reward, make_diff({PRICING: full}, snap), repo=snap)
    assert r.parts["total"] == 6 and r.parts["passed"] == 6 and r.parts["tests"] == 1.0


# ----------------------------------------------------------------------------- bad diffs never raise
@pytest.mark.parametrize("diff, why", [
    (None, "not text"), (123, "not text"), ({"a": 1}, "not text"), ("", "empty patch"), ("  \n\t", "empty patch"),
    ("fix the bug please", "not a unified diff"), ("--- a/x\n+++ b/x\n\x00\x01", "NUL"),
    (b"\xff\xfe--- a/shop/pricing.py\x00", "NUL"),
    ("diff --git a/x b/x\nGIT binary patch\nliteral 3\nabc\n", "binary"),
    ("--- a/shop/pricing.py\n+++ b/shop/pricing.py\n" + "+x\n" * 600_000, "too large"),
    ("--- a/shop/pricing.py\n+++ b/shop/pricing.py\n@@ -1 +1 @@\n-nothing like this\n+x\n", "does not apply"),
    ("--- a/nope.py\n+++ b/nope.py\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n", "does not apply"),
])
def test_garbage_diffs_score_zero_with_a_reason(reward, diff, why):
    r = score(reward, diff)
    assert r.score == 0.0 and why in r.reason, r


_DIFFISH = st.lists(st.one_of(
    st.sampled_from(["diff --git a/shop/pricing.py b/shop/pricing.py", "--- a/shop/pricing.py",
                     "+++ b/shop/pricing.py", "--- /dev/null", "+++ b/new.py", "@@ -1,3 +1,3 @@", "@@ -0,0 +1 @@",
                     '+"""Prices of a basket."""', '-"""Prices of a basket."""', " ", "+import os", "-",
                     "new file mode 100644", "deleted file mode 100644", "\\ No newline at end of file"]),
    st.text(max_size=20)), max_size=12).map("\n".join)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.text(max_size=300), _DIFFISH, st.binary(max_size=200)))
def test_arbitrary_text_as_diff_never_raises(reward, diff):
    r = score(reward, diff, actions=2)
    assert r.reason or r.score > 0
    assert set(r.parts) >= {"applies", "tests", "size", "parses", "action_penalty"}
    assert r.score <= 1.2 + 1e-9


# ----------------------------------------------------------------------------- interfaces
def test_batch_interface_keeps_order_and_seed_name():
    assert CodeAgentRewardFunction is CodeAgentReward
    fn = CodeAgentReward(timeout_s=20.0, max_workers=2)
    probs = [Problem(ISSUE, "", metadata={"repo": str(REPO), "test_cmd": CMD}, uid=f"p{i}") for i in range(3)]
    out = fn(probs, [patch("wrong"), {"diff": patch("correct"), "actions": ["a", "b"]}, "garbage"])
    assert [r.parts["passed"] for r in out] == [2, 4, 0]
    assert out[1].score == pytest.approx(1.2 - 0.02) and out[2].score == 0.0
    with pytest.raises(ValueError, match="'test_cmd'"):
        fn([Problem(ISSUE, "", metadata={"repo": str(REPO)}, uid="q")], ["x"])


def test_bad_tasks_fail_by_name(reward, tmp_path):
    with pytest.raises(ValueError, match="test_cmd must run pytest"):
        score(reward, patch("correct"), cmd="make test")
    with pytest.raises(ValueError, match="may not set --junitxml"):
        score(reward, patch("correct"), cmd="pytest --junitxml=x.xml")
    with pytest.raises(ValueError, match="not a directory"):
        score(reward, patch("correct"), repo=tmp_path / "missing")
    with pytest.raises(ValueError, match="exit 4|collects no tests"):
        score(reward, patch("correct"), cmd="pytest tests/no_such_file.py")
    assert parse_test_cmd("python3 -m pytest -x 'tests/a b.py'") == ["-x", "tests/a b.py"]


def test_helpers():
    assert is_protected("tests/x/y.py") and is_protected("a/b/conftest.py") and is_protected("pyproject.toml")
    assert not is_protected("shop/pyproject.toml") and not is_protected("shop/testing_utils.py")
    assert scan_diff(patch("correct")) == {PRICING: [["    subtotal = sum(price * qty for price, qty in items)"],
                                                     ["    subtotal = sum(price for price, qty in items)"]]}
    ok = b'<testsuites><testsuite><testcase classname="a" name="t"/><testcase classname="a" name="u">' \
         b'<failure message="x"/></testcase></testsuite></testsuites>'
    rep = parse_junit(ok)
    assert rep.outcomes == {("a", "t"): True, ("a", "u"): False} and rep.any_failed
    for bad, why in [(b"", "empty"), (b"<testsuites><testsuite/><testsuite/></testsuites>", "2 suites"),
                     (b'<!DOCTYPE x [<!ENTITY a "b">]><testsuite/>', "DOCTYPE"), (b"<testsuite>", "malformed"),
                     (ok + ok, "malformed")]:
        with pytest.raises(ValueError, match=why):
            parse_junit(bad)


def test_cli_code_agent(tmp_path, capsys):
    from seqrl.cli import main

    p = tmp_path / "fix.diff"
    p.write_text(patch("wrong"))
    rc = main(["reward", "code-agent", "--repo", str(REPO), "--patch", str(p), "--test-cmd", CMD,
               "--actions", "3", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["parts"]["passed"] == 2 and out["score"] == pytest.approx(0.45 - 0.03)
    assert "2/4 tests passed" in out["reason"]
    assert main(["reward", "code-agent", "--repo", str(REPO), "--patch", str(tmp_path / "nope.diff"),
                 "--test-cmd", CMD]) == 2
    hidden = tmp_path / "hidden" / "tests"  # one more test the agent never saw (the wrong patch passes it)
    hidden.mkdir(parents=True)
    (hidden / "test_more.py").write_text("from shop.pricing import total_price\n\n\ndef test_qty():\n"
                                         "    assert total_price([(1.0, 3)]) == 3.0\n")
    rc = main(["reward", "code-agent", "--repo", str(REPO), "--patch", str(p), "--test-cmd", CMD,
               "--hidden-tests", str(tmp_path / "hidden"), "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["parts"]["total"] == 5 and out["parts"]["passed"] == 3, out


# ----------------------------------------------------------------------------- run_command (the generalised sandbox)
PY = "/usr/bin/python3"


def world_dir() -> Path:
    d = Path(tempfile.mkdtemp(prefix="seqrl-test-cmd-"))
    os.chmod(d, 0o755)
    return d


def test_run_command_is_confined_and_reports_on_fd3(monkeypatch):
    monkeypatch.setenv("SEQRL_SECRET", "xyz")
    d = world_dir()
    try:
        code = ("import os, socket, sys\n"
                "try:\n    socket.create_connection(('127.0.0.1', 22), timeout=1); net = 'up'\n"
                "except OSError:\n    net = 'down'\n"
                "w = open('/dev/fd/3', 'w')\n"
                "w.write(repr([os.getuid(), os.getcwd(), sorted(os.environ), net]) + 'x' * 5000)\n"
                "sys.exit(7)\n")
        r = run_command([PY, "-I", "-S", "-c", code], cwd=d, report=True, max_report_bytes=4000, env={"EXTRA": "1"})
        assert r.status == "ok" and r.returncode == 7 and r.report_truncated and len(r.report) == 4000
        uid, cwd, env, net = eval(r.report.rstrip(b"x"))  # our own repr of plain data
        assert 200_000 <= uid < 260_000 and cwd == str(d) and net == "down"
        assert env == ["EXTRA", "HOME", "LANG", "PATH", "PYTHONHASHSEED", "TMPDIR"]
        assert set(runner.STRONG_LAYERS) <= set(r.layers)
    finally:
        shutil.rmtree(d)


def test_run_command_writable_tree_is_returned_to_root_and_others_are_read_only():
    d = world_dir()
    (d / "w").mkdir()
    (d / "ro.txt").write_text("keep")
    try:
        code = ("import os\nopen('w/new.txt', 'w').write('hi')\n"
                "try:\n    open('ro.txt', 'a').write('x')\nexcept OSError:\n    print('refused')\n")
        r = run_command([PY, "-I", "-S", "-c", code], cwd=d, writable=[d / "w"])
        assert r.status == "ok" and r.returncode == 0 and "refused" in r.stdout
        assert (d / "w" / "new.txt").read_text() == "hi" and (d / "ro.txt").read_text() == "keep"
        assert all(p.stat().st_uid == 0 for p in [d / "w", d / "w" / "new.txt"])
    finally:
        shutil.rmtree(d)


def test_run_command_failures_and_the_whole_tree_dies():
    d = world_dir()
    try:
        r = run_command(["/no/such/binary"], cwd=d)
        assert r.status == "error" and "cannot execute" in r.reason
        daemon = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(2)\n"
                  "    open('/tmp/seqrl-cmd-survived', 'w').close()\n    os._exit(0)\n")
        r = run_command([PY, "-I", "-S", "-c", daemon], cwd=d)
        assert r.status == "ok" and r.returncode == 0
        r = run_command([PY, "-I", "-S", "-c", "while True: pass"], cwd=d, timeout_s=1.0)
        assert r.status == "timeout"
        r = run_command([PY, "-I", "-S", "-c", "import os; os.kill(os.getpid(), 9)"], cwd=d)
        assert r.status == "killed" and r.signal == 9
        import time
        time.sleep(2.5)
        assert not Path("/tmp/seqrl-cmd-survived").exists()
    finally:
        shutil.rmtree(d)
        Path("/tmp/seqrl-cmd-survived").unlink(missing_ok=True)
    with pytest.raises(ValueError, match="absolute path"):
        run_command(["python3"], cwd="/")


# ----------------------------------------------------------------------------- driver internals changed for speed
def test_solution_process_has_no_new_privs_without_importing_ctypes():
    """no_new_privs is now set once by the parent's preexec_fn for the whole tree; the child only
    checks it. The solution must still see it set (and the driver never needed ctypes)."""
    from seqrl.sandbox import run_python

    sol = ("import sys\n"
           "def probe():\n"
           "    status = open('/proc/self/status').read()\n"
           "    nnp = [l.split()[1] for l in status.splitlines() if l.startswith('NoNewPrivs')]\n"
           "    return [nnp, 'ctypes' in sys.modules, 'ast' in sys.modules, 'json' in sys.modules]\n")
    r = runner.run_python(sol, io_cases=[[[], [["1"], False, False, False]]], entry_point="probe")
    assert r.all_passed, r.tests
    assert run_python(sol, tests="def check(c):\n    assert c()[0] == ['1']\n", entry_point="probe").all_passed


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids, max_size=4),
                    max_leaves=20), st.text(max_size=40))
def test_driver_json_codec_matches_json(value, junk):
    from seqrl.sandbox import _driver

    text = json.dumps(value)
    assert _driver.json_dumps(value) == text
    back, ref = _driver.json_loads(text.encode()), json.loads(text)
    assert repr(back) == repr(ref)  # repr: NaN != NaN
    try:
        ref = repr(json.loads(junk))
    except ValueError:
        ref = ValueError
    try:
        got = repr(_driver.json_loads(junk))
    except ValueError:
        got = ValueError
    assert got == ref, junk


def test_limits_and_cgroup_hold_without_preexec_and_when_the_parent_does_not_attach(monkeypatch):
    """rlimits are applied by the driver to itself, the pids cgroup is joined by the parent (by pid) or
    else by the driver before it forks: the solution process must have all of them either way."""
    sol = ("import resource as r\n"
           "def f():\n"
           "    lim = [r.getrlimit(getattr(r, 'RLIMIT_' + n))[0] for n in ('CPU', 'AS', 'FSIZE', 'NOFILE', 'CORE')]\n"
           "    return [lim, open('/proc/self/cgroup').read().count(':pids:/seqrl-')]\n")
    want = [[[], [[4, 300 << 20, 12345, 64, 0], 1]]]
    r = runner.run_python(sol, io_cases=want, entry_point="f", timeout_s=3.0, memory_mb=300, max_file_bytes=12345)
    assert r.all_passed, r.tests
    monkeypatch.setattr(runner, "_attach_driver", lambda *a, **k: None)
    r = runner.run_python(sol, io_cases=want, entry_point="f", timeout_s=3.0, memory_mb=300, max_file_bytes=12345)
    assert r.all_passed and "pids_cgroup" in r.layers, r.tests


def test_without_setpriv_no_new_privs_comes_from_the_preexec_fallback(monkeypatch):
    monkeypatch.setattr(runner, "_setpriv_nnp", lambda: ())
    sol = "def f():\n    return [l.split()[1] for l in open('/proc/self/status') if l.startswith('NoNewPrivs')]\n"
    r = runner.run_python(sol, io_cases=[[[], ["1"]]], entry_point="f")
    assert r.all_passed, r.tests
