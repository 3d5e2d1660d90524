"""Calling reward functions safely and combining them with weights.

A reward function is ``(problems, completions) -> list[RewardResult]``, one result per completion.
Model output must never stop training: when a function raises, it is called again completion by
completion, and only the completions that still raise (or score NaN/inf) get 0, with the reason
recorded and counted. A function that returns the wrong number of results is a programming error
and stops the run with its name.

Every built-in reward is bounded: `build_reward` wraps it in a `BoundedReward`, which scores each
completion in a confined, pre-started worker process (`seqrl.sandbox.workers`) within the spec's
``timeout_s``, in parallel across the workers; a completion past its limit scores 0 with reason
"timeout" (counted in `ScoredBatch.timeouts`). `score_completions` takes a batch budget: completions
not started before it runs out score 0 with reason "batch budget". The code reward runs its programs
in the sandbox (each bounded by its own ``timeout_s``) and is called in this process.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from seqrl.rewards.format import format_partial_reward, format_reward
from seqrl.rewards.math import math_answer_reward
from seqrl.rewards.user import UserReward
from seqrl.types import Problem, RewardResult, Task
from seqrl.utils.imports import import_object, is_import_path

RewardFn = Callable[[list[Problem], list[str]], list[RewardResult]]

BUILTIN_REWARDS = ("task", "format", "math", "format_partial", "code", "prm", "orm", "rm")
LEARNED_REWARDS = ("prm", "orm", "rm")
DEFAULT_TIMEOUT_S = {"task": 2.0, "format": 1.0, "math": 1.0, "format_partial": 1.0, "code": 2.0, "prm": 60.0, "orm": 60.0}
DEFAULT_BATCH_BUDGET_S = 300.0


@dataclass
class RewardSpec:
    """One weighted reward function."""

    name: str = "task"
    """task (the task's verifier), format (R1-style think/answer format), math (math-verify on the
    ``<answer>`` tag against problem.answer, strict), format_partial (+0.1 think pair, +0.1 boxed),
    code (`CodeExecutionReward` with default weights: sandboxed tests from problem.metadata), prm or orm
    (a `seqrl train prm|orm` checkpoint at `path`: aggregated step scores in [0, 1], in this process),
    rm (a learned reward model's score, `path` its folder: `seqrl train rm`'s checkpoint), or a
    user's function by import path ``package.module:function`` (seqrl or TRL signature,
    `seqrl.rewards.user`; the working directory is on the import path)."""
    weight: float = 1.0
    """Weight in the total reward."""
    timeout_s: float | None = None
    """Time limit of one completion's score (None: the default of the name, `DEFAULT_TIMEOUT_S`:
    task 2, math 1, format 1, format_partial 1 s; for code, the sandbox's limit per program). User
    functions run in the trainer process, unbounded."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments passed to a user's function on every call."""
    path: str | None = None
    """rm, prm, orm: the learned model's checkpoint folder (scored in the trainer process, unbounded
    like a user's function)."""
    aggregation: str = "min"
    """prm/orm: how step scores become one reward (min, last, prod, mean)."""

    def __post_init__(self) -> None:
        if self.name in LEARNED_REWARDS and not self.path:
            raise ValueError(f"reward {self.name!r} needs path: the checkpoint folder of `seqrl train {self.name}`")
        if self.path and self.name not in LEARNED_REWARDS:
            raise ValueError(f"reward {self.name!r}: path is only for {', '.join(LEARNED_REWARDS)}")
        user = is_import_path(self.name)
        if self.name not in BUILTIN_REWARDS and not user:
            raise ValueError(f"reward name must be one of {BUILTIN_REWARDS} or an import path "
                             f"'package.module:function' (got {self.name!r})")
        if self.kwargs and not user:
            raise ValueError(f"reward {self.name!r}: kwargs are for a user's function (an import path)")
        if self.timeout_s is None:
            self.timeout_s = DEFAULT_TIMEOUT_S.get(self.name, 0.0) or None
        if user:
            self.user_reward()  # imports now: a wrong path fails before anything is loaded
        elif self.name != "rm" and not (isinstance(self.timeout_s, (int, float)) and math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(f"reward {self.name!r}: timeout_s must be a positive number (got {self.timeout_s!r})")

    @property
    def key(self) -> str:
        """Metric name: ``accuracy`` for the task's verifier, the function's name for a user's one."""
        if self.name == "task":
            return "accuracy"
        return self.name.rpartition(":")[2].rpartition(".")[2] if is_import_path(self.name) else self.name

    def user_reward(self) -> UserReward:
        """The user's function this spec names, checked (import, signature, kwargs)."""
        fn = import_object(self.name, "rewards name")
        return UserReward(fn, self.key, self.kwargs, where=f"rewards name {self.name!r}")


@dataclass
class TaskReward:
    """The task's verifier as a reward function (a class, so it pickles into a worker)."""

    task: Task

    def __post_init__(self) -> None:
        self.__name__ = f"{self.task.name}_verify"

    def __call__(self, problems: list[Problem], completions: list[str]) -> list[RewardResult]:
        return [self.task.verify(p, c) for p, c in zip(problems, completions)]


def task_reward(task: Task) -> RewardFn:
    """The task's verifier as a reward function."""
    return TaskReward(task)


@dataclass
class _One:
    """``fn`` on one completion (what a worker runs per call)."""

    fn: RewardFn

    def __call__(self, problem: Problem, completion: str) -> RewardResult:
        out = list(self.fn([problem], [completion]))
        if len(out) != 1 or not isinstance(out[0], RewardResult):
            raise ValueError(f"returned {len(out)} results for 1")
        return out[0]


class BoundedReward:
    """``fn`` scored completion by completion in confined worker processes, each within ``timeout_s``,
    in parallel over the pool's workers. ``fn`` (and the problems) must pickle, and its module must be
    importable by a confined worker (an installed package, or a module in the pool's ``preload``).
    pool: a `WorkerPool` (default: the process-wide `shared_pool`)."""

    def __init__(self, fn: RewardFn, timeout_s: float, workers: int | None = None, pool=None):
        if not timeout_s > 0:
            raise ValueError(f"BoundedReward: timeout_s must be > 0 (got {timeout_s})")
        self.fn, self.timeout_s, self.workers, self.pool = fn, float(timeout_s), workers, pool
        self._one = _One(fn)
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def score(self, problems: list[Problem], completions: list[str], deadline: float | None = None
              ) -> list[RewardResult]:
        from seqrl.sandbox.workers import reward_from_reply, shared_pool

        outs = (self.pool or shared_pool(self.workers)).map(self._one, list(zip(problems, completions)), self.timeout_s, deadline)
        results = []
        for o in outs:
            if o.status == "ok":
                results.append(reward_from_reply(o.value))
            elif o.status == "timeout":
                results.append(RewardResult(0.0, f"timeout: over {self.timeout_s:g} s"))
            elif o.status == "budget":
                results.append(RewardResult(0.0, "batch budget exhausted"))
            else:
                results.append(RewardResult(float("nan"), o.reason if o.reason.startswith("error") else f"error: {o.reason}"))
        return results

    def __call__(self, problems: list[Problem], completions: list[str]) -> list[RewardResult]:
        return self.score(problems, completions)


def build_reward(spec: RewardSpec, task: Task) -> RewardFn:
    """The spec's reward function, bounded (see the module docstring) except a user's own and a
    learned reward model (torch models, scored in this process)."""
    if is_import_path(spec.name):
        return spec.user_reward()
    if spec.name in ("prm", "orm"):
        from seqrl.rewards.learned import LearnedStepReward

        return LearnedStepReward(spec.path, spec.aggregation)
    if spec.name == "rm":
        from seqrl.models.heads import RewardModelReward  # torch and transformers only when asked for

        return RewardModelReward(spec.path)
    if spec.name == "code":
        from seqrl.rewards.code import CodeExecutionReward  # the sandbox only when asked for

        return CodeExecutionReward(limits={"timeout_s": spec.timeout_s})
    fn = {"task": TaskReward(task) if spec.name == "task" else None, "format": format_reward,
          "math": math_answer_reward, "format_partial": format_partial_reward}[spec.name]
    if spec.name == "task":
        import pickle

        if type(task).__module__ == "__main__":
            raise ValueError(f"reward 'task': task {task.name!r} is defined in the running script (__main__); "
                             f"reward workers import it by module, so define it in an importable module")

        try:
            pickle.dumps(fn)
        except Exception as e:  # noqa: BLE001 — fail at build time, naming the task, not per completion
            raise ValueError(f"reward 'task': task {task.name!r} cannot be sent to a reward worker "
                             f"({type(e).__name__}: {e}); its attributes must pickle") from None
    from seqrl.sandbox.workers import shared_pool

    shared_pool()  # the workers start now, not inside the first batch
    return BoundedReward(fn, spec.timeout_s)


def check_reward_keys(specs: list[RewardSpec]) -> None:
    """Each reward logs under its own metric name (`RewardSpec.key`); a ValueError names a clash."""
    keys = [spec.key for spec in specs]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"rewards: two reward functions log as {dup!r}; each may appear once")


def build_rewards(specs: list[RewardSpec], task: Task, extra: dict | None = None
                  ) -> dict[str, tuple[RewardFn, float]]:
    """A run's reward functions by metric name: the specs (`build_reward`), plus `extra` callables
    with no import path (``{"name": fn}`` or ``{"name": (fn, weight)}``, weight 1 by default; seqrl or
    TRL signature)."""
    fns = {spec.key: (build_reward(spec, task), spec.weight) for spec in specs}
    for name, value in (extra or {}).items():
        fn, weight = value if isinstance(value, tuple) else (value, 1.0)
        if name in fns:
            raise ValueError(f"rewards={{{name!r}: ...}}: the config already has a reward named {name!r}")
        fns[name] = (UserReward(fn, name, where=f"rewards[{name!r}]"), float(weight))
    return fns


def check_reward_columns(fns: dict[str, tuple[RewardFn, float]], problems: list[Problem],
                         episodes: bool = False) -> None:
    """Every TRL-form user reward finds the keywords it requires in the rows' columns (and, with
    multi-turn `episodes`, in ``trajectories`` and ``environments``) before the model loads;
    `UserReward.check_columns`."""
    for fn, _ in fns.values():
        if isinstance(fn, UserReward):
            fn.check_columns(problems, episodes)


FLOAT32_MAX = 3.4028234663852886e38
"""A score above this becomes inf in the trainer's float32 tensors."""


def report_reward_errors(metrics: dict, step: int, warned: set[str] | None) -> dict[str, str]:
    """Take the ``reward/<fn>/first_error`` texts out of a step's metrics (they are logged beside the
    numbers, not returned with them); print each function's first failure of the run once, on stderr
    (``warned``: the functions already printed; None prints nothing — other processes than the main)."""
    import sys

    texts = {k: metrics.pop(k) for k in [k for k in metrics if k.endswith("/first_error")]}
    for key, text in texts.items():
        name = key[len("reward/"):-len("/first_error")]
        if warned is None or name in warned or not text:
            continue
        warned.add(name)
        n = int(metrics.get(f"reward/{name}/errors", 0))
        print(f"warning: reward {name!r} failed on {n} completion(s) at step {step}, scored 0: {str(text)[:300]} "
              f"(later failures: reward/{name}/errors and reward/{name}/first_error in metrics.jsonl)",
              file=sys.stderr)
    return texts


class RewardFailed(ValueError):
    """A user's reward function failed (raised, or returned no number) on every completion of a batch:
    a bug in the function, not a verdict on the model's output. Stops the run with one line naming it."""


@dataclass
class ScoredBatch:
    """Weighted total per completion plus each function's scores and reasons."""

    total: list[float]
    scores: dict[str, list[float]]
    reasons: dict[str, list[str]]
    errors: dict[str, int] = field(default_factory=dict)
    """Completions per function that raised or scored NaN/inf (scored 0)."""
    timeouts: dict[str, int] = field(default_factory=dict)
    """Completions per function scored 0 for passing their time limit."""
    over_budget: dict[str, int] = field(default_factory=dict)
    """Completions per function scored 0 because the batch budget ran out first."""
    not_applicable: dict[str, int] = field(default_factory=dict)
    """Completions per function it scored None ("does not apply"): NaN in `scores`, 0 in `total`."""
    first_error: dict[str, str] = field(default_factory=dict)
    """Per function with errors in this batch, the first one's reason (``error: …``)."""


def _safe_results(name: str, fn: RewardFn, problems: list[Problem], completions: list[str],
                  extras: Mapping[str, list] | None = None) -> tuple[list[RewardResult | None], int]:
    extras = extras or {}
    try:
        results = list(fn(problems, completions, **extras))
    except Exception:  # noqa: BLE001 — isolate the completion(s) that make it raise
        results = []
        for i, (p, c) in enumerate(zip(problems, completions)):
            try:
                one = list(fn([p], [c], **{k: v[i:i + 1] for k, v in extras.items()}))
                results.append(one[0] if len(one) == 1 else RewardResult(0.0, f"error: returned {len(one)} results for 1"))
            except Exception as e:  # noqa: BLE001
                results.append(RewardResult(float("nan"), f"error: {type(e).__name__}: {e}"))
    if len(results) != len(completions):
        raise ValueError(f"reward function {name!r} returned {len(results)} results for {len(completions)} completions")
    clean: list[RewardResult | None] = []
    errors = 0
    for r in results:
        if r is None:  # "does not apply to this sample" (user functions, TRL's rule)
            clean.append(None)
            continue
        score = r.score if isinstance(r, RewardResult) else float("nan")
        if not isinstance(score, (int, float)) or not math.isfinite(score) or abs(score) > FLOAT32_MAX:
            errors += 1
            reason = (r.reason if isinstance(r, RewardResult) and r.reason.startswith("error") else
                      f"error: score {score!r} of {name!r} is beyond float32 (training tensors)" if
                      isinstance(score, (int, float)) and math.isfinite(score) else f"non-finite score {score!r}")
            clean.append(RewardResult(0.0, reason))
        else:
            clean.append(r)
    return clean, errors


def score_completions(fns: dict[str, tuple[RewardFn, float]], problems: list[Problem], completions: list[str],
                      budget_s: float | None = DEFAULT_BATCH_BUDGET_S, stop_on_failure: bool = True,
                      extras: Mapping[str, list] | None = None) -> ScoredBatch:
    """Run every reward function; total = Σ weight · score over the functions that apply (a None
    score is left out, TRL's rule).

    budget_s: wall-clock budget of the whole batch (None: unbounded). `BoundedReward` completions not
    started before it runs out, and every completion of a plain function called after it ran out,
    score 0 with reason "batch budget".

    stop_on_failure: a user's function that fails on every completion raises `RewardFailed` (a bug,
    not a verdict); False scores those completions 0 and goes on (counted in ``errors``).

    extras: per-completion keywords of multi-turn episodes (``trajectories``: each episode's messages,
    ``environments``: its environment instance), given to the functions whose ``takes_episodes`` is
    true (a user's function, an environment's ``get_reward``)."""
    if len(problems) != len(completions):
        raise ValueError(f"score_completions: {len(problems)} problems for {len(completions)} completions")
    if budget_s is not None and not (isinstance(budget_s, (int, float)) and budget_s >= 0):
        raise ValueError(f"score_completions: budget_s must be a number >= 0 or None (got {budget_s!r})")
    deadline = None if budget_s is None else time.monotonic() + budget_s
    total = [0.0] * len(completions)
    batch = ScoredBatch(total, {}, {})
    for name, (fn, weight) in fns.items():
        if deadline is not None and time.monotonic() >= deadline:
            results, errors = [RewardResult(0.0, "batch budget exhausted") for _ in completions], 0
        elif isinstance(fn, BoundedReward):
            results, errors = _safe_results(name, lambda p, c, fn=fn: fn.score(p, c, deadline), problems, completions)
        else:
            given = extras if extras and getattr(fn, "takes_episodes", False) else None
            results, errors = _safe_results(name, fn, problems, completions, given)
        batch.timeouts[name] = sum(r is not None and r.reason.startswith("timeout") for r in results)
        batch.over_budget[name] = sum(r is not None and r.reason == "batch budget exhausted" for r in results)
        batch.not_applicable[name] = sum(r is None for r in results)
        batch.scores[name] = [float("nan") if r is None else float(r.score) for r in results]
        batch.reasons[name] = ["not applicable" if r is None else r.reason for r in results]
        batch.errors[name] = errors
        if errors:
            batch.first_error[name] = next(r.reason for r in results if r is not None and r.reason.startswith(
                ("error", "non-finite")))
            if stop_on_failure and isinstance(fn, UserReward) and errors == len(completions):
                raise RewardFailed(f"reward {name!r} ({fn.where}) failed on all {errors} completions of a batch, a "
                                   f"bug in the function, not a verdict; the first: {batch.first_error[name][:300]}")
        for i, r in enumerate(results):
            if r is not None:
                total[i] += weight * float(r.score)
    return batch
