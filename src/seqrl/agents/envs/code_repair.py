"""``code_repair``: the code agent — a repository snapshot with a bug, tools to look around, edit and run
the tests, and `CodeAgentReward` on the final diff as the reward (the repository's tests + quality − a
penalty per action).

Rows name a task of a folder `seqrl data code-repair` built (``task.name: code_repair`` gives them:
``task_id``, ``tasks_dir``). ``reset`` writes the buggy snapshot to a scratch folder — without the files
of the tests the bug makes fail (``hidden = True``, as SWE-bench judges: the reward lays them back) — and
returns nothing (the prompt is the issue). The file tools act inside the snapshot only (a path that
leaves it is refused; ``search`` matches literal text, so no pattern can hang the trainer); the tests —
the only place the model's code runs — run in the sandbox. Give ``agent.tool_timeout_s`` room for a
test run (``run_tests`` stops at `test_timeout_s`).
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from seqrl.data import code_repair as cr
from seqrl.data.code_repair_task import issue_text
from seqrl.rewards.code_agent import parse_test_cmd

_TASKS: dict[str, dict[str, dict]] = {}  # tasks_dir → task id → task (read once per process)
_SNAPSHOTS: dict[tuple, tuple[Path, Path | None]] = {}  # (tasks_dir, task id, hidden) → (buggy snapshot, hidden tests)
_REWARDS: dict[float, Any] = {}  # test time limit → the verdict (its pristine-run and hidden-test caches shared)
_LOCK = threading.Lock()
_ROOT: list[Path] = []  # the process's folder of snapshots, removed at exit


def _task(tasks_dir: str, task_id: str) -> dict:
    with _LOCK:
        if tasks_dir not in _TASKS:
            _TASKS[tasks_dir] = {t["id"]: t for t in cr.load_tasks(Path(tasks_dir))}
    try:
        return _TASKS[tasks_dir][task_id]
    except KeyError:
        raise ValueError(f"code_repair: no task {task_id!r} in {tasks_dir}") from None


def _snapshot(tasks_dir: str, task: dict, hidden: bool) -> tuple[Path, Path | None]:
    """The task's buggy snapshot (and its hidden tests), written once per process and never changed: the
    reward patches copies of it, so its pristine test runs are computed once per task."""
    key = (tasks_dir, task["id"], hidden)
    with _LOCK:
        if key not in _SNAPSHOTS:
            if not _ROOT:
                _ROOT.append(Path(tempfile.mkdtemp(prefix="seqrl-repair-tasks-")))
                atexit.register(shutil.rmtree, _ROOT[0], True)
            home = Path(tempfile.mkdtemp(dir=_ROOT[0]))
            base = cr.materialize(task, home / "base", hidden=home / "hidden" if hidden else None)
            _SNAPSHOTS[key] = (base, home / "hidden" if hidden else None)
        return _SNAPSHOTS[key]


def _reward(test_timeout_s: float):
    from seqrl.rewards.code_agent import CodeAgentReward

    with _LOCK:
        return _REWARDS.setdefault(test_timeout_s, CodeAgentReward(timeout_s=test_timeout_s))


class CodeRepairEnv:
    """One repair episode: ``list_files``, ``read_file``, ``search``, ``edit``, ``run_tests``, ``submit``."""

    hidden = True
    """Keep the failing tests' files out of the snapshot (the reward judges with them)."""
    test_timeout_s = 60.0
    min_tool_timeout_s = test_timeout_s + 30.0
    """`AgentTools` refuses a shorter per-call timeout: a test run abandoned by its call would still be
    running when the episode's next call, or the next episode's reset, touches this instance."""
    max_listed = 400

    def __init__(self) -> None:
        self.scratch: Path | None = None
        self.done = False
        self.actions: list[str] = []
        self.original: dict[str, str] = {}

    def reset(self, task_id: str, tasks_dir: str, **_: Any) -> None:
        self.close()
        self.task = _task(str(tasks_dir), str(task_id))
        self.base, self.hidden_dir = _snapshot(str(tasks_dir), self.task, self.hidden)  # what the reward patches
        self.scratch = Path(tempfile.mkdtemp(prefix="seqrl-repair-env-"))
        self.repo = self.scratch / "repo"
        shutil.copytree(self.base, self.repo)
        self.done, self.actions, self.original, self.last = False, [], {}, None
        return None

    # -- the tools ---------------------------------------------------------------------------------
    def _path(self, path: str, must_exist: bool = True) -> Path:
        if not isinstance(path, str) or not path or "\x00" in path:
            raise ValueError("give a path inside the repository, e.g. 'pkg/module.py'")
        root = self.repo.resolve()
        full = (root / path).resolve()
        if full != root and root not in full.parents:
            raise ValueError(f"{path!r} is outside the repository")
        if must_exist and not full.exists():
            raise ValueError(f"{path!r} does not exist")
        return full

    def list_files(self, path: str = ".") -> str:
        """List the files under a folder of the repository.

        Args:
            path: A folder of the repository ("." for all of it).
        """
        self.actions.append("list_files")
        root, top = self.repo.resolve(), self._path(path)
        files = sorted(str(p.relative_to(root)) for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        more = len(files) - self.max_listed
        return "\n".join(files[: self.max_listed]) + (f"\n[{more} more files]" if more > 0 else "") or "(no files)"

    def read_file(self, path: str, start: int = 1, end: int = 0) -> str:
        """Read a file of the repository, its lines numbered.

        Args:
            path: The file, relative to the repository root.
            start: The first line to show (1-based).
            end: The last line to show (0: to the end).
        """
        self.actions.append("read_file")
        lines = cr.read_source(self._path(path)).splitlines()
        start = max(1, start)
        stop = len(lines) if end <= 0 else min(end, len(lines))
        return "\n".join(f"{i}: {lines[i - 1]}" for i in range(start, stop + 1)) or "(no lines there)"

    def search(self, text: str) -> str:
        """Find the lines of the repository's Python files that contain a text (literal, not a pattern).

        Args:
            text: The text to find.
        """
        self.actions.append("search")
        if not text:
            raise ValueError("give a non-empty text to find")
        root, hits = self.repo.resolve(), []
        for p in sorted(root.rglob("*.py")):
            if not p.is_file() or p.is_symlink():
                continue
            for i, line in enumerate(cr.read_source(p).splitlines(), 1):
                if text in line:
                    hits.append(f"{p.relative_to(root)}:{i}: {line.strip()}")
        return "\n".join(hits[:50]) + (f"\n[{len(hits) - 50} more]" if len(hits) > 50 else "") if hits else "(not found)"

    def edit(self, path: str, old: str, new: str) -> str:
        """Replace a text that occurs exactly once in a file of the repository.

        Args:
            path: The file, relative to the repository root.
            old: The exact text to replace (with enough context to occur once).
            new: The text to put in its place.
        """
        self.actions.append("edit")
        full = self._path(path)
        if not full.is_file():
            raise ValueError(f"{path!r} is not a file")
        text = cr.read_source(full)
        count = text.count(old) if old else 0
        if count != 1:
            raise ValueError(f"the old text occurs {count} times in {path}; give text that occurs exactly once")
        rel = str(full.relative_to(self.repo.resolve()))
        self.original.setdefault(rel, text)
        full.write_text(text.replace(old, new, 1), encoding="utf-8")
        return f"edited {rel}"

    def run_tests(self, selector: str = "") -> str:
        """Run the repository's tests (in the sandbox) and report which fail.

        Args:
            selector: A test file or test id to run ("" for the repository's test command).
        """
        self.actions.append("run_tests")
        args = [a for a in parse_test_cmd(self.task["test_cmd"])  # the test command less the hidden files
                if a.startswith("-") or (self.repo / a.split("::", 1)[0]).exists()]
        if selector:
            if selector.startswith("-"):
                raise ValueError("give a test file or test id, not an option")
            self._path(selector.split("::", 1)[0])
            args = ["-q", selector]
        run = cr.run_tests(self.repo, args, timeout_s=self.test_timeout_s)
        if run.status != "ok":
            return f"the tests did not run: {run.status} {run.reason[-300:]}"
        failed = sorted(k for k, v in run.tests.items() if v == "failed")
        head = f"{len(run.passed)} passed, {len(failed)} failed" + (f", {len(run.errors)} errors" if run.errors else "")
        return "\n".join([head, *failed[:10], *(["…"] if len(failed) > 10 else []), *run.errors[:3]])

    def submit(self) -> str:
        """Submit the repository as it is now: the episode ends and the fix is judged."""
        self.actions.append("submit")
        self.done = True
        return "submitted"

    # -- the judgement ---------------------------------------------------------------------------
    def _diff(self) -> str:
        """The episode's changes as a unified diff against the snapshot."""
        return "".join(cr.make_diff(rel, old, cr.read_source(self.repo / rel)) for rel, old in sorted(self.original.items()))

    def get_reward(self) -> float:
        result = _reward(self.test_timeout_s).score(self.base, issue_text(self.task), self.actions, self._diff(),
                                                    self.task["test_cmd"], hidden_tests=self.hidden_dir)
        self.last = result
        return float(result.score)

    @property
    def solved(self) -> bool:
        """Every test the verdict counted passed (after `get_reward`)."""
        last = getattr(self, "last", None)
        return last is not None and last.parts.get("tests", 0.0) >= 1.0

    def close(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


__all__ = ["CodeRepairEnv"]


def repair_expert(noise: float = 0.0, seed: int = 0, syntax: str = "hermes"):
    """A privileged expert for `seqrl.agents.demos.expert_sampler(..., with_env=True)`: it reads the
    buggy lines around the task's mutation, replaces the buggy line with the fixed one, runs the tests and
    submits. With probability `noise` per episode it first looks around (lists the files, searches for
    a word of the buggy line) — the noisy demonstrations that cost actions."""
    import random

    rng = random.Random(seed)
    plans: dict[int, list[tuple[str, dict]]] = {}

    def call(name: str, args: dict) -> str:
        if syntax == "compact":
            return f"[[{name} " + " ".join(json.dumps(v) for v in args.values()) + "]]"
        return f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>'

    def plan(env) -> list[tuple[str, dict]]:
        t = env.task
        lines = cr.read_source(env.repo / t["file"]).splitlines()
        buggy = lines[t["line"] - 1]
        fixed = buggy.replace(t["edit"]["new"], t["edit"]["old"], 1)
        steps = [("read_file", {"path": t["file"], "start": max(1, t["line"] - 3), "end": t["line"] + 3}),
                 ("edit", {"path": t["file"], "old": buggy, "new": fixed}),
                 ("run_tests", {"selector": ""}), ("submit", {})]
        if rng.random() < noise:
            word = max(buggy.split(), key=len) if buggy.split() else t["file"]
            steps = [("list_files", {"path": "."}), ("search", {"text": word})] + steps
        return steps

    def turn(text: str, env) -> str:
        if not env.actions:  # a new episode (a pooled instance plays several): plan its task afresh
            plans[id(env)] = plan(env)
        steps = plans[id(env)]
        done = len(env.actions)
        return call(*steps[done]) if done < len(steps) else "Fixed."

    return turn
