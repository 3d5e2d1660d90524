"""Task names → tasks (`get_task`).

>>> get_task("arith_sub", digits=3).name
'arith_sub'
"""

from __future__ import annotations

from seqrl.data.arithmetic import ArithmeticTask
from seqrl.data.countdown import CountdownTask
from seqrl.data.gsm import GSMTask
from seqrl.data.jsonl import JsonlTask
from seqrl.data.rgym import ReasoningGymTask
from seqrl.types import Task
from seqrl.utils.imports import import_object, is_import_path

TASKS = ("arith", "arith_add", "arith_sub", "arith_mul", "arith_mixed", "countdown", "gsm", "code_repair")
PATTERNS = ("rg:<reasoning_gym_dataset>", "jsonl:<path>", "<package.module>:<TaskFactory>")

_ARITH_OPS = {
    "arith": ("add",),
    "arith_add": ("add",),
    "arith_sub": ("sub",),
    "arith_mul": ("mul",),
    "arith_mixed": ("add", "sub", "mul"),
}


def get_task(spec: str, **kwargs) -> Task:
    """Build a task from its name; `kwargs` go to the task's constructor (e.g. ``digits=3``).

    `spec` is one of `TASKS`, ``"rg:<reasoning_gym_dataset>"``, ``"jsonl:<path>"`` (a local
    JSONL/JSON/Parquet/CSV file, or a Hugging Face hub dataset name), or a user's task by import path
    ``"package.module:Factory"`` (a `Task` subclass or a function returning a `Task`, called with
    `kwargs`; the working directory is on the import path).
    """
    if spec in _ARITH_OPS:
        return ArithmeticTask(**{"ops": _ARITH_OPS[spec], "name": spec, **kwargs})
    if spec == "countdown":
        return CountdownTask(**kwargs)
    if spec == "gsm":
        return GSMTask(**kwargs)
    if spec == "code_repair":
        from seqrl.data.code_repair_task import CodeRepairTask

        return CodeRepairTask(**kwargs)
    prefix, _, rest = spec.partition(":")
    if prefix == "rg" and rest:
        return ReasoningGymTask(rest, **kwargs)
    if prefix == "jsonl" and rest:
        return JsonlTask(rest, **kwargs)
    if is_import_path(spec):
        factory = import_object(spec, "task.name")
        if not callable(factory):
            raise ValueError(f"task.name {spec!r} is not a Task class or a function returning one")
        task = factory(**kwargs)
        if not isinstance(task, Task):
            raise ValueError(f"task.name {spec!r} returned {type(task).__name__}, not a seqrl.types.Task "
                             f"(subclass Task: problems(split, n, seed) and verify(problem, completion))")
        return task
    raise ValueError(f"unknown task {spec!r}; valid: {', '.join(TASKS + PATTERNS)}")
