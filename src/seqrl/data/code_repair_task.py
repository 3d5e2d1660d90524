"""A code-repair task set as a `Task` (``task.name: code_repair``): one problem per task of a folder that
`seqrl data code-repair` built (``tasks.jsonl`` and the pristine trees), its prompt the issue written
from the tests the bug makes fail, its metadata naming the task for the ``code_repair`` environment,
which acts on the snapshot and judges the episode (`seqrl.agents.envs.code_repair`).

Held-out split: whole packages (a stable hash of the package's name puts about `test_fraction` of them
in ``test``), so a policy is judged on code it never trained on; ``test_packages`` names them instead.
"""

from __future__ import annotations

import random
import zlib
from pathlib import Path

from seqrl.types import Problem, RewardResult, Task


def issue_text(task: dict, shown: int = 3) -> str:
    """The issue a user would file: which of the package's tests fail (up to `shown` named), asking for a
    fix of the package's code, not its tests."""
    failing = list(task["fail_to_pass"])
    names = ", ".join(f"`{n}`" for n in failing[:shown]) + (f" and {len(failing) - shown} more" if len(failing) > shown else "")
    return (f"In {task['package']} {task['version']}, {'this test fails' if len(failing) == 1 else 'these tests fail'}: "
            f"{names}. They passed before a recent change to the package's code. Find the bug and fix it; "
            f"do not change the tests.")


class CodeRepairTask(Task):
    """The tasks of `tasks_dir` (default ``runs/code_repair``) as problems; `verify` scores 0 (an episode is
    judged by the environment's reward, `CodeAgentReward` on its diff)."""

    name = "code_repair"

    def __init__(self, tasks_dir: str = "runs/code_repair", test_fraction: float = 0.3,
                 test_packages: list[str] | None = None):
        from seqrl.data.code_repair import load_tasks

        self.tasks_dir = Path(tasks_dir)
        if not (self.tasks_dir / "tasks.jsonl").is_file():
            raise FileNotFoundError(f"task code_repair: {self.tasks_dir / 'tasks.jsonl'} not found; build the task set "
                                    f"with `seqrl data code-repair --out {self.tasks_dir}`")
        if not 0.0 <= test_fraction < 1.0:
            raise ValueError(f"task code_repair: test_fraction must be in [0, 1) (got {test_fraction})")
        self.tasks = load_tasks(self.tasks_dir, absolute=False)
        packages = sorted({t["package"] for t in self.tasks})
        if test_packages is not None:
            unknown = sorted(set(test_packages) - set(packages))
            if unknown:
                raise ValueError(f"task code_repair: test_packages {unknown} are not in {self.tasks_dir} "
                                 f"({', '.join(packages)})")
            self.test_packages = set(test_packages)
        else:
            self.test_packages = {p for p in packages if zlib.crc32(p.encode()) % 1000 < test_fraction * 1000}

    def problems(self, split: str, n: int, seed: int = 0) -> list[Problem]:
        if split not in ("train", "test"):
            raise ValueError(f"task code_repair: split must be train or test (got {split!r})")
        rows = [t for t in self.tasks if (t["package"] in self.test_packages) == (split == "test")]
        random.Random(seed).shuffle(rows)
        rows = rows if n < 0 else rows[:n]
        return [Problem(issue_text(t), "", metadata={"task_id": t["id"], "tasks_dir": str(self.tasks_dir.resolve())},
                        uid=t["id"]) for t in rows]

    def verify(self, problem: Problem, completion: str) -> RewardResult:
        return RewardResult(0.0, "a code-repair episode is judged by the code_repair environment's reward")
