"""Real-package code-repair tasks (`seqrl.data.code_repair`) on the two vendored sdists: mutants that
reverse byte for byte, a seeded builder, tasks whose failing tests fail on the buggy tree, honest fixes
scored by the code-agent reward, and bad packages skipped with a reason."""

from __future__ import annotations

import io
import json
import os
import random
import shlex
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from seqrl.data import code_repair as cr

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "real_packages"
INFLECTION = cr.PACKAGES["inflection"]
ISODATE = cr.PACKAGES["isodate"]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's namespaces and uids need root (CI runs as root)")


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """The vendored sdists extracted (found in the fixture folder: no network)."""
    dest = tmp_path_factory.mktemp("trees")
    out = {}
    for pkg in (INFLECTION, ISODATE):
        out[pkg.name] = cr.fetch(pkg.name, pkg.version, FIX, dest=dest)
        cr.prepare_tree(out[pkg.name], pkg)
    return out


def git_apply(tree: Path, diff: str) -> None:
    r = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=tree, input=diff.encode(),
                       capture_output=True, env={**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)})
    assert r.returncode == 0, r.stderr.decode()


# ----------------------------------------------------------------------------- mutation (no sandbox)
def test_mutants_cover_the_operators_and_skip_fstrings_and_annotations():
    src = ("def f(a: 1 + 2 = 3, b=None) -> 4 < 5:\n"
           "    if a < 2 and b is not None or not a:\n"
           "        return a + 1\n"
           "    n: 6 - 7 = 5\n"
           "    n -= a // 2\n"
           "    s = f'{a > 7}'\n"
           "    return (a\n            in [True])\n")
    ms = cr.mutants(src, "m.py")
    ops = {m.operator for m in ms}
    assert {"< -> <=", "and -> or", "is not -> is", "drop not", "+ -> -", "-= -> +=", "// -> /", "in -> not in",
            "True -> False", "2 -> 3", "1 -> 2", "return None", "5 -> 6"} <= ops, ops
    assert [m.operator for m in ms if m.line == 1] == ["3 -> 4"]  # the default, never the annotations
    assert [m.operator for m in ms if m.line == 4] == ["5 -> 6"]
    assert not [m for m in ms if m.line == 6], "positions inside f-strings are not trusted"
    for m in ms:
        text = cr.apply_edit(src, m)
        assert text != src and cr.apply_edit(text, m, reverse=True) == src


def test_mutation_spans_reverse_exactly_through_git_apply(trees, tmp_path):
    """bug then fix is the pristine file byte for byte, also with CRLF line ends, a missing final newline
    and non-ASCII text before the span (offsets are UTF-8 bytes)."""
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "m.py").write_bytes("# é ü\r\ndef f(x):\r\n    return x < 2 and 'ß' != x\r\nY = 1 + 2".encode())
    cases = [(odd, "m.py")]
    for name, tree in trees.items():
        cases += [(tree, rel) for rel in cr.source_files(tree, cr.PACKAGES[name])]
    rng = random.Random(0)
    checked = 0
    for tree, rel in cases:
        text = cr.read_source(tree / rel)
        ms = cr.mutants(text, rel)
        assert ms or tree != odd
        for m in (ms if tree == odd else rng.sample(ms, min(4, len(ms)))):
            buggy = cr.apply_edit(text, m)
            work = tmp_path / f"w{checked}"
            shutil.copytree(tree, work)
            git_apply(work, cr.make_diff(rel, text, buggy))
            assert (work / rel).read_bytes() == buggy.encode()
            git_apply(work, cr.make_diff(rel, buggy, text))
            assert (work / rel).read_bytes() == (tree / rel).read_bytes()
            checked += 1
    assert checked >= 20


def test_safe_extract_refuses_escaping_members_and_leaves_links_out(tmp_path):
    def sdist(name, members):
        path = tmp_path / name
        with tarfile.open(path, "w:gz") as tf:
            for info, data in members:
                tf.addfile(info, io.BytesIO(data) if data is not None else None)
        return path

    def file(name, data=b"x = 1\n"):
        info = tarfile.TarInfo(name)
        info.size = len(data)
        return info, data

    link = tarfile.TarInfo("p-1/evil")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    ok = cr.safe_extract(sdist("p-1.tar.gz", [file("p-1/m.py"), (link, None)]), tmp_path / "ok")
    assert (ok / "m.py").read_text() == "x = 1\n" and not os.path.lexists(ok / "evil")
    for i, bad in enumerate(("p-1/../../escape.py", "/abs.py")):
        with pytest.raises(ValueError, match="unsafe member"):
            cr.safe_extract(sdist(f"bad{i}.tar.gz", [file("p-1/m.py"), file(bad)]), tmp_path / f"bad{i}")
        assert not (tmp_path / f"bad{i}" / "p-1").exists()  # refused before anything was written
    assert not (tmp_path.parent / "escape.py").exists()


# ----------------------------------------------------------------------------- the builder (sandbox)
@pytest.fixture(scope="module")
def built(trees):
    lines = []
    tasks, cmd = cr.build_package(INFLECTION, trees["inflection"], per_package=3, seed=0, log=lines.append)
    return tasks, cmd, lines


@needs_root
def test_builder_is_deterministic_by_seed(trees, built):
    tasks, cmd, _ = built
    again, _ = cr.build_package(INFLECTION, trees["inflection"], per_package=3, seed=0, log=lambda m: None)
    other, _ = cr.build_package(INFLECTION, trees["inflection"], per_package=3, seed=1, log=lambda m: None)
    assert len(tasks) == 3 and again == tasks
    assert [t["bug_diff"] for t in other] != [t["bug_diff"] for t in tasks]
    assert cmd == "python -m pytest -q test_inflection.py"


@needs_root
def test_built_tasks_fail_on_the_buggy_tree_and_pass_on_the_pristine_one(trees, built, tmp_path):
    tasks, _, _ = built
    for t in tasks:
        t = {**t, "tree": str(trees["inflection"])}
        snap = cr.materialize(t, tmp_path / t["id"])
        args = shlex.split(t["test_cmd"])[3:]
        buggy = cr.run_tests(snap, args)
        assert t["fail_to_pass"] and all(buggy.tests.get(n) != "passed" for n in t["fail_to_pass"]), t["id"]
        assert len(buggy.passed) == t["pass_to_pass"]
        git_apply(snap, t["fix_diff"])
        fixed = cr.run_tests(snap, args)
        assert set(t["fail_to_pass"]) <= fixed.passed and fixed.returncode == 0


@needs_root
def test_isodate_src_layout_builds_tasks(trees):
    tasks, cmd = cr.build_package(ISODATE, trees["isodate"], per_package=2, seed=0, log=lambda m: None)
    assert len(tasks) == 2 and all(t["file"].startswith("src/isodate/") for t in tasks)
    assert "pythonpath=src" in cmd and all(t["fail_to_pass"] for t in tasks)


@needs_root
def test_honest_fix_scores_full_and_an_unrelated_patch_does_not(trees, built, tmp_path):
    from seqrl.rewards.code_agent import CodeAgentReward

    tasks, _, _ = built
    reward = CodeAgentReward(timeout_s=30.0)
    for t in tasks[1:2]:  # the hidden-tests test below judges tasks[0] alike; each task costs three pytest runs
        t = {**t, "tree": str(trees["inflection"])}
        snap = cr.materialize(t, tmp_path / t["id"])
        fix = reward.score(snap, "", (), t["fix_diff"], t["test_cmd"])
        assert fix.score == pytest.approx(1.2), (t["id"], fix.reason)
        buggy = cr.read_source(snap / t["file"])
        wrong = reward.score(snap, "", (), cr.make_diff(t["file"], buggy, "# unrelated\n" + buggy), t["test_cmd"])
        assert wrong.score < 1.0 and wrong.parts["tests"] < 1.0, (t["id"], wrong.reason)


@needs_root
def test_hidden_fail_to_pass_tests_judge_a_snapshot_that_lacks_them(trees, built, tmp_path):
    """``materialize(..., hidden=)`` keeps the fail-to-pass tests' files from the snapshot the policy sees;
    the reward lays them over the patched tree: the honest fix keeps 1.2, the wrong patch does not, and a
    patch that writes its own file at the hidden path gets the hidden one instead."""
    from seqrl.rewards.code_agent import CodeAgentReward

    tasks, _, _ = built
    t = {**tasks[0], "tree": str(trees["inflection"])}
    assert cr.hidden_test_files(t) == ["test_inflection.py"]
    snap = cr.materialize(t, tmp_path / "snap", hidden=tmp_path / "hidden")
    assert not (snap / "test_inflection.py").exists() and (tmp_path / "hidden" / "test_inflection.py").is_file()
    reward = CodeAgentReward(timeout_s=30.0)

    def score(diff):
        return reward.score(snap, "", (), diff, t["test_cmd"], hidden_tests=tmp_path / "hidden")

    assert score(t["fix_diff"]).score == pytest.approx(1.2)
    buggy = cr.read_source(snap / t["file"])
    wrong = score(cr.make_diff(t["file"], buggy, "# unrelated\n" + buggy))
    assert wrong.parts["tests"] < 1.0, wrong.reason
    own_tests = ("diff --git a/test_inflection.py b/test_inflection.py\nnew file mode 100644\n--- /dev/null\n"
                 "+++ b/test_inflection.py\n@@ -0,0 +1,2 @@\n+def test_ok():\n+    assert True\n")
    forged = score(own_tests + cr.make_diff(t["file"], buggy, "# unrelated\n" + buggy))
    assert forged.parts["tests"] < 1.0 and forged.score <= wrong.score + 1e-9, forged.reason


@needs_root
def test_bad_packages_are_skipped_with_a_reason(tmp_path, capsys):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "broken-1.0.tar.gz").write_bytes(b"not a tar file")
    with tarfile.open(cache / "notests-1.0.tar.gz", "w:gz") as tf:
        data = b"def f():\n    return 1\n"
        info = tarfile.TarInfo("notests-1.0/notests.py")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    lines = []
    tasks = cr.build([cr.Package("broken", "1.0", ()), cr.Package("notests", "1.0", ()), "no-such-name"],
                     out=tmp_path / "out", per_package=2, cache_dir=cache, log=lines.append)
    assert tasks == [] and (tmp_path / "out" / "tasks.jsonl").read_text() == ""
    # building some packages keeps the other packages' tasks (a subset run used to drop them)
    other = {"id": "other-001", "package": "other", "version": "2.0", "tree": "trees/other-2.0"}
    (tmp_path / "out" / "tasks.jsonl").write_text(json.dumps(other) + "\n")
    assert cr.build([cr.Package("broken", "1.0", ())], out=tmp_path / "out", cache_dir=cache, log=lines.append) == []
    assert cr.load_tasks(tmp_path / "out", absolute=False) == [other]
    lines = lines[:3]
    assert [ln.split(":")[0] for ln in lines] == ["skip no-such-name", "skip broken 1.0", "skip notests 1.0"], lines
    assert "unknown package" in lines[0] and "tests do not run" in lines[2]

    from seqrl.cli import main

    assert main(["data", "code-repair", "--packages", "no-such-name", "--out", str(tmp_path / "cli")]) == 1
    assert '"tasks": 0' in capsys.readouterr().out
