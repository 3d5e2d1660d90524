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
