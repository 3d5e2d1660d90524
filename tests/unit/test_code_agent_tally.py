"""The tally over the pristine collection: which tests count, and a run whose observations were rejected
earns no test reward with the reason (not a crash)."""

from __future__ import annotations

from types import SimpleNamespace

from seqrl.rewards.code_agent.junit import tally, uncounted_tests
from seqrl.rewards.code_agent.records import Outside, Pristine

NONCE = "n0nce"
IDS = ["tests/test_a.py::test_bug", "tests/test_a.py::test_kept", "tests/test_a.py::test_opaque",
       "tests/test_a.py::test_skip"]


def _pristine(outcomes: dict) -> Pristine:
    items = [("tests.test_a", i.split("::")[1]) for i in IDS]
    return Pristine(items=items, nodeids=list(IDS), errors=[], error_ids=[], identities={}, defs={}, modules=[],
                    module_files={}, defs_files=[], doctests={}, doctest_ids=[], doctest_digests={}, protect={},
                    ran=True, inifile=None, dataclass_fields={}, conftests=[], outcomes=outcomes)


def _run(passed: dict[str, bool]) -> SimpleNamespace:
    cases = "".join(f'<testcase classname="tests.test_a" name="{n}">' + ("" if ok else "<failure/>") + "</testcase>"
                    for n, ok in passed.items())
    xml = (f'<testsuites><testsuite><properties><property name="seqrl_integrity" value="ok {NONCE}"/>'
           f"</properties>{cases}</testsuite></testsuites>")
    return SimpleNamespace(status="ok", reason="", returncode=0 if all(passed.values()) else 1, stdout="",
                           report=xml.encode(), report_truncated=False)


class _Holds:
    def __init__(self, ok: bool):
        self.ok = ok

    def holds(self, _value) -> bool:
        return self.ok


def _outside(failing_check_in: str = "") -> Outside:
    per_node = {i: ([0], [0]) if i == failing_check_in else ([], []) for i in IDS}
    return Outside(expected={0: _Holds(False)}, per_node=per_node, tests={}, must={0}, open={}, own_files=[],
                   own_names={}, bindings={}, stdlib_uses=[], covered=1.0,
                   by_node={failing_check_in: [(0, ())]} if failing_check_in else {})


def test_uncounted_are_the_snapshots_skips_and_passes_the_outside_does_not_confirm():
    collected = _pristine({IDS[0]: "failed", IDS[1]: "passed", IDS[2]: "passed", IDS[3]: "skipped"})
    # the unpatched snapshot under the guard: the bug's test fails, one passing test's check is not confirmed
    base = _run({"test_bug": True, "test_kept": True, "test_opaque": True})
    found, why = uncounted_tests(base, NONCE, collected, _outside(IDS[2]))
    assert why == "" and sorted(found) == [IDS[2], IDS[3]], found
    assert "skipped" in found[IDS[3]] and "do not confirm" in found[IDS[2]]
    # the bug's test counts whatever the outside said of it on the snapshot
    found, _ = uncounted_tests(base, NONCE, collected, _outside(IDS[0]))
    assert sorted(found) == [IDS[3]]
    # a patched run: 2 counted tests (the bug's and the kept one), the report's skip of test_skip is moot
    patched = _run({"test_bug": True, "test_kept": False, "test_opaque": False, "test_skip": False})
    passed, total, why, failing = tally(patched, NONCE, collected, _outside(), None, {IDS[2]: "", IDS[3]: ""})
    assert (passed, total, why, failing) == (1, 2, "", ["tests.test_a::test_kept"])
    # an unusable snapshot run leaves every test counted
    timed_out = SimpleNamespace(**{**vars(base), "status": "timeout", "reason": "5 s"})
    found, why = uncounted_tests(timed_out, NONCE, collected, _outside())
    assert found == {} and "timed out" in why


def test_rejected_observations_earn_no_test_reward_with_the_reason():
    collected = _pristine({})
    outside = _outside()
    outside.corrupt = "observations rejected: a line without the run's nonce"
    run = _run({"test_bug": True, "test_kept": True, "test_opaque": True, "test_skip": True})
    passed, total, why, failing = tally(run, NONCE, collected, outside)
    assert (passed, total, failing) == (0, 4, []) and why == f"{outside.corrupt}: no test reward"
