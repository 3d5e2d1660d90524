"""Tasks: problems with verifiers.

Procedural tasks (`ArithmeticTask`, `CountdownTask`, `GSMTask`), any reasoning-gym dataset
(`ReasoningGymTask`) and question/answer files (`JsonlTask`), built by name with `get_task`.
"""

from seqrl.data.arithmetic import ArithmeticTask
from seqrl.data.countdown import CountdownParseError, CountdownTask, parse_expression
from seqrl.data.gsm import GSMTask
from seqrl.data.jsonl import DatasetFormatError, JsonlTask
from seqrl.data.registry import TASKS, get_task
from seqrl.data.rgym import ReasoningGymTask
from seqrl.types import STEP_SEP, Problem, Task, extract_answer, format_completion

__all__ = [
    "STEP_SEP",
    "TASKS",
    "ArithmeticTask",
    "CountdownParseError",
    "CountdownTask",
    "DatasetFormatError",
    "GSMTask",
    "JsonlTask",
    "Problem",
    "ReasoningGymTask",
    "Task",
    "extract_answer",
    "format_completion",
    "get_task",
    "parse_expression",
]
