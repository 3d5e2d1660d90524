"""The untrusted JUnit report parsed, and the tally over the pristine collection with the outside checks."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass

from .records import Outside, Pristine
from .rewrite import resolve_test


@dataclass
class JUnitReport:
    """Outcomes parsed from an untrusted JUnit XML report: (classname, name) → passed?"""

    outcomes: dict[tuple[str, str], bool]
    integrity: list[str]
    any_failed: bool


def parse_junit(data: bytes) -> JUnitReport:
    """Parse pytest's JUnit XML (untrusted): raises ValueError with a reason on anything odd."""
    if not data.strip():
        raise ValueError("empty test report")
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise ValueError("test report rejected: DOCTYPE/ENTITY declarations")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as e:
        raise ValueError(f"malformed test report: {e}") from e
    if root.tag == "testsuites":
        suites = list(root)
    elif root.tag == "testsuite":
        suites = [root]
    else:
        raise ValueError(f"malformed test report: root element <{root.tag[:40]}>")
    if len(suites) != 1 or suites[0].tag != "testsuite":
        raise ValueError(f"malformed test report: {len(suites)} suites (expected one <testsuite>)")
    suite = suites[0]
    integrity = [p.get("value", "") for props in suite.findall("properties") for p in props.findall("property")
                 if p.get("name") == "seqrl_integrity"]
    outcomes: dict[tuple[str, str], bool] = {}
    any_failed = False
    for case in suite.iter("testcase"):
        key = (case.get("classname", ""), case.get("name", ""))
        bad = any(child.tag in ("failure", "error", "skipped") for child in case)
        any_failed |= any(child.tag in ("failure", "error") for child in case)
        outcomes[key] = outcomes.get(key, True) and not bad
    return JUnitReport(outcomes, integrity, any_failed)


def _checks_ok(observations: list, must, expected: Mapping) -> bool:
    """Every check observed while the test ran holds, and each of ``must`` (checks directly in the
    test function's body) was observed while it ran."""
    seen = {k for k, _ in observations}
    if any(k not in seen for k in must):
        return False
    return all(expected[k].holds(v) for k, v in observations)


def _outside_ok(outside: Outside | None, nodeid: str) -> bool:
    if not outside:
        return True
    _ks, must = outside.per_node.get(nodeid, ([], []))
    return _checks_ok(outside.by_node.get(nodeid, []), must, outside.expected)


def _junit_key(nodeid: str) -> tuple[str, str]:
    """The JUnit ``(classname, name)`` pytest writes for a test's node id."""
    from _pytest.junitxml import bin_xml_escape, mangle_test_address

    names = mangle_test_address(nodeid)
    return bin_xml_escape(".".join(names[:-1])), bin_xml_escape(names[-1])


def _open_test_ok(outside: Outside | None, prefix: str, classname: str, name: str) -> bool:
    """A test of a file that did not collect on the snapshot: matched statically to its definition in
    that (pristine, restored) file and checked like the others; a test that cannot be matched while
    the file was rewritten does not count (its checks may be ones nobody judges)."""
    if not outside or prefix not in outside.open:
        return True
    rel, tree = outside.open[prefix]
    if tree is None:
        return True
    module = rel[:-3].replace("/", ".")
    rest = classname[len(module) + 1:] if classname.startswith(module + ".") else ""
    qual = (rest + "." if rest else "") + re.sub(r"\[.*\]$", "", name)
    found = resolve_test(tree, qual)
    if found is None:
        return False
    ks = outside.tests.get((rel, found), [])
    mine = outside.by_junit.get((classname, name), [])
    return _checks_ok(mine, [k for k in ks if k in outside.must], outside.expected)


def _report(run, nonce: str, outside: Outside | None) -> tuple[JUnitReport | None, str]:
    """The untrusted run's report, or None and why it earns no test reward."""
    tail = (run.stdout.strip().splitlines() or [""])[-1][:200]
    if run.status == "timeout":
        return None, f"tests timed out ({run.reason})"
    if run.status != "ok":
        return None, f"test run {run.status}: {run.reason}"
    if run.report_truncated:
        return None, "test report rejected: larger than max_report_bytes"
    if run.returncode not in (0, 1):
        return None, f"pytest exited {run.returncode} (interrupted, internal error or no tests): {tail}"
    try:
        rep = parse_junit(run.report)
    except ValueError as e:
        return None, f"{e} (pytest exit {run.returncode}: {tail})"
    if rep.integrity != [f"ok {nonce}"]:
        what = rep.integrity[0][:200] if rep.integrity else "missing"
        return None, f"harness integrity check failed: {what}"
    if (run.returncode == 0) == rep.any_failed:
        return None, f"test report inconsistent with pytest's exit status {run.returncode}"
    if outside is not None and outside.corrupt:
        return None, f"{outside.corrupt}: no test reward"
    return rep, ""


def uncounted_tests(run, nonce: str, collected: Pristine, outside: Outside | None) -> tuple[dict[str, str], str]:
    """node id → why, for the tests that count for no patch: those pytest alone skips on the *unpatched*
    snapshot (`Pristine.outcomes`), and those it passes there that `run` — the same snapshot under the
    guard and the outside checks — does not confirm (a check the outside cannot judge on the snapshot's
    own objects: a set holding everything, a recursion error pytest's own comparison raises). A patch
    changes neither run, so leaving these out gives a forgery nothing and a test the snapshot fails
    (the bug's) always counts; a regression in them goes unseen. ``({}, why)`` where `run` is not
    usable (every test counts)."""
    rep, why = _report(run, nonce, outside)
    if rep is None:
        return {}, why
    out = {}
    for key, nid in zip(collected.items, collected.nodeids or [""] * len(collected.items)):
        alone = collected.outcomes.get(nid)
        if alone == "skipped":
            out[nid] = "skipped on the unpatched snapshot"
        elif alone == "passed" and not (rep.outcomes.get(key, False) and _outside_ok(outside, nid)):
            out[nid] = "passes on the unpatched snapshot, where the outside checks do not confirm it"
    return out, ""


def tally(run, nonce: str, collected: Pristine, outside: Outside | None = None,
           void: Mapping[str, str] | None = None,
           uncounted: Mapping[str, str] | None = None) -> tuple[int, int, str, list[str]]:
    """``(passed, total, why no test reward, failing tests)`` from the untrusted run, counted over the
    pristine collection: a pristine test the report lacks has failed; ``void``: node ids that fail
    whatever the report says (doctests whose examples the patch edited); ``uncounted``: node ids left
    out of both counts (`uncounted_tests`)."""
    uncounted = uncounted or {}
    nodeids = collected.nodeids or [""] * len(collected.items)
    counted = [(key, nid) for key, nid in zip(collected.items, nodeids) if not (nid and nid in uncounted)]
    open_prefixes = collected.errors
    total = len(counted) + len(open_prefixes)
    rep, why = _report(run, nonce, outside)
    if rep is None:
        return 0, total, why, []
    void = void or {}
    failing = [f"{c}::{n}" for (c, n), nid in counted
               if not (rep.outcomes.get((c, n), False) and _outside_ok(outside, nid) and nid not in void)]
    passed = len(counted) - len(failing)
    total = len(counted)
    for prefix in open_prefixes:  # files that did not collect on the snapshot: their tests as reported now
        mine = [(f"{c}::{n}", v and _open_test_ok(outside, prefix, c, n)) for (c, n), v in rep.outcomes.items()
                if c == prefix or c.startswith(prefix + ".")]
        passed += sum(v for _, v in mine)
        total += max(1, len(mine))
        failing += [k for k, v in mine if not v] or ([] if mine else [f"{prefix} (not collected)"])
    return passed, total, "", failing
