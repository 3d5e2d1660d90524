"""Calling reward functions safely and combining them with weights.

A reward function is ``(problems, completions) -> list[RewardResult]``, one result per completion.
Model output must never stop training: when a function raises, it is called again completion by
completion, and only the completions that still raise (or score NaN/inf) get 0, with the reason
recorded and counted. A function that returns the wrong number of results is a programming error
and stops the run with its name.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from seqrl.rewards.format import format_partial_reward, format_reward
from seqrl.rewards.math import math_answer_reward
from seqrl.types import Problem, RewardResult, Task

RewardFn = Callable[[list[Problem], list[str]], list[RewardResult]]

BUILTIN_REWARDS = ("task", "format", "math", "format_partial", "code")


@dataclass
class RewardSpec:
    """One weighted reward function."""

    name: str = "task"
    """task (the task's verifier), format (R1-style think/answer format), math (math-verify on the
    ``<answer>`` tag against problem.answer, strict), format_partial (+0.1 think pair, +0.1 boxed) or
    code (`CodeExecutionReward` with default weights: sandboxed tests from problem.metadata)."""
    weight: float = 1.0
    """Weight in the total reward."""

    def __post_init__(self) -> None:
        if self.name not in BUILTIN_REWARDS:
            raise ValueError(f"reward name must be one of {BUILTIN_REWARDS} (got {self.name!r})")


def task_reward(task: Task) -> RewardFn:
    """The task's verifier as a reward function."""

    def reward(problems: list[Problem], completions: list[str]) -> list[RewardResult]:
        return [task.verify(p, c) for p, c in zip(problems, completions)]

    reward.__name__ = f"{task.name}_verify"
    return reward


def build_reward(spec: RewardSpec, task: Task) -> RewardFn:
    if spec.name == "task":
        return task_reward(task)
    if spec.name == "code":
        from seqrl.rewards.code import CodeExecutionReward  # the sandbox only when asked for

        return CodeExecutionReward()
    return {"format": format_reward, "math": math_answer_reward, "format_partial": format_partial_reward}[spec.name]


@dataclass
class ScoredBatch:
    """Weighted total per completion plus each function's scores and reasons."""

    total: list[float]
    scores: dict[str, list[float]]
    reasons: dict[str, list[str]]
    errors: dict[str, int] = field(default_factory=dict)
    """Completions per function that raised or scored NaN/inf (scored 0)."""


def _safe_results(name: str, fn: RewardFn, problems: list[Problem], completions: list[str]) -> tuple[list[RewardResult], int]:
    try:
        results = list(fn(problems, completions))
    except Exception:  # noqa: BLE001 — isolate the completion(s) that make it raise
        results = []
        for p, c in zip(problems, completions):
            try:
                one = list(fn([p], [c]))
                results.append(one[0] if len(one) == 1 else RewardResult(0.0, f"error: returned {len(one)} results for 1"))
            except Exception as e:  # noqa: BLE001
                results.append(RewardResult(float("nan"), f"error: {type(e).__name__}: {e}"))
    if len(results) != len(completions):
        raise ValueError(f"reward function {name!r} returned {len(results)} results for {len(completions)} completions")
    clean, errors = [], 0
    for r in results:
        score = r.score if isinstance(r, RewardResult) else float("nan")
        if not isinstance(score, (int, float)) or not math.isfinite(score):
            errors += 1
            reason = r.reason if isinstance(r, RewardResult) and r.reason.startswith("error") else f"non-finite score {score!r}"
            clean.append(RewardResult(0.0, reason))
        else:
            clean.append(r)
    return clean, errors


def score_completions(fns: dict[str, tuple[RewardFn, float]], problems: list[Problem], completions: list[str]) -> ScoredBatch:
    """Run every reward function; total = Σ weight · score."""
    if len(problems) != len(completions):
        raise ValueError(f"score_completions: {len(problems)} problems for {len(completions)} completions")
    total = [0.0] * len(completions)
    batch = ScoredBatch(total, {}, {})
    for name, (fn, weight) in fns.items():
        results, errors = _safe_results(name, fn, problems, completions)
        batch.scores[name] = [float(r.score) for r in results]
        batch.reasons[name] = [r.reason for r in results]
        batch.errors[name] = errors
        for i, r in enumerate(results):
            total[i] += weight * float(r.score)
    return batch
