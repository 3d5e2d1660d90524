"""A user's own reward function: named by import path in the config, or passed as a callable.

Two signatures, told apart by inspection when the reward is built:

- **seqrl**: ``fn(problems, completions, **kwargs) -> list[RewardResult | float | None]`` — the
  `Problem`s (question, gold answer, the row's columns in ``problem.metadata``) and the completion texts;
- **TRL**: ``fn(completions, **kwargs) -> list[float | None]`` (TRL's ``reward_funcs``), called with
  keywords: ``prompts`` and ``completions`` as TRL gives them (text for a text row; for a
  conversational row its messages and ``[{"role": "assistant", "content": text}]``), ``answer``
  (the gold answer) and every column of the rows under its own name (one list entry per completion),
  so a function written for TRL runs unchanged. Without ``**kwargs`` it gets only the keywords it names.

In multi-turn training either form also gets, where it names them or takes ``**kwargs``,
``trajectories`` (each episode's messages: the policy's turns with their ``tool_calls`` and the tool
results) and ``environments`` (each episode's environment instance, TRL's keyword).

``None`` means "does not apply to this sample": it is left out of the weighted sum (TRL's rule) and
counted. The spec's ``kwargs`` are passed to every call. User functions run in the trainer process
(they are the user's code); a function that raises keeps `score_completions`' isolation (the
completion that raises scores 0 with the reason), one that calls ``sys.exit`` or ``os._exit`` raises
`RewardExit` there instead of ending the trainer, and one that fails on every completion of a batch
stops the run with one line naming it (`seqrl.rewards.combine.RewardFailed`; the trainers'
``reward_failures: continue`` keeps going).
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Callable
from typing import Any

from seqrl.types import Problem, RewardResult

TRL_FIXED = ("prompts", "completions", "answer")
"""Keywords a TRL-form function gets besides the row's columns."""
EPISODE_KEYS = ("trajectories", "environments")
"""Keywords a function gets in multi-turn training (each episode's messages and environment instance)."""


def signature_form(fn: Callable, where: str) -> str:
    """``"seqrl"`` or ``"trl"`` (see the module docstring); ValueError naming `where` otherwise."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: cannot read the signature of {fn!r} ({e})") from None
    if "problems" in params:
        positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) >= 2 and positional[0].name == "problems":
            return "seqrl"
    if any(k in params and params[k].kind != inspect.Parameter.POSITIONAL_ONLY for k in ("completions", *EPISODE_KEYS)):
        return "trl"  # TRL's environment rewards may take `environments` alone
    shown = ", ".join(str(p) for p in params.values())
    raise ValueError(f"{where}: {getattr(fn, '__name__', fn)!r}({shown}) fits neither reward signature: "
                     f"seqrl's (problems, completions) or TRL's (completions, **kwargs)")


class RewardExit(RuntimeError):
    """A user's reward tried to end the trainer (``sys.exit``, ``SystemExit``, ``os._exit``): an error of
    that call, scored like any other (0 with the reason, counted), never the end of the run."""


def _call_without_exits(name: str, call: Callable[[], Any]) -> Any:
    """``call()`` with ``SystemExit`` and ``os._exit`` turned into `RewardExit`: a reward is scoring code,
    and in the trainer's process ending it would end training with exit 0 and no line. ``os._exit`` is
    caught only in this process (a child the reward forks still exits) and only from the main thread's
    calls (rewards are scored there)."""
    in_main = threading.current_thread() is threading.main_thread()
    real_exit, me, caller = os._exit, os.getpid(), threading.get_ident()

    def refuse(code: int = 0) -> None:
        if os.getpid() != me or threading.get_ident() != caller:  # a forked child, another thread: as asked
            real_exit(code)
        raise RewardExit(f"reward {name!r} called os._exit({code!r})")

    if in_main:
        os._exit = refuse
    try:
        return call()
    except SystemExit as e:
        if os.getpid() != me:  # a child the reward forked ends as it asked, never as a second trainer
            raise
        raise RewardExit(f"reward {name!r} raised SystemExit({e.code!r})") from None
    finally:
        if in_main and os.getpid() == me:
            os._exit = real_exit


def _columns(problems: list[Problem]) -> list[str]:
    seen: dict[str, None] = {}
    for p in problems:
        for k in p.metadata or {}:
            if isinstance(k, str):
                seen.setdefault(k, None)
    return list(seen)


class UserReward:
    """A user's function as a seqrl reward function (one `RewardResult`, or None, per completion)."""

    def __init__(self, fn: Callable, name: str, kwargs: dict[str, Any] | None = None, where: str = "rewards"):
        if not callable(fn):
            raise ValueError(f"{where}: {name!r} is not callable (got {type(fn).__name__})")
        self.fn, self.name, self.kwargs, self.where = fn, name, dict(kwargs or {}), where
        self.__name__ = name
        self.form = signature_form(fn, where)
        params = inspect.signature(fn).parameters
        self._var_kw = any(p.kind == p.VAR_KEYWORD for p in params.values())
        self._accepts = set(params)
        self._required = {n for n, p in params.items() if p.default is p.empty
                          and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        unknown = sorted(k for k in self.kwargs if not self._var_kw and k not in self._accepts)
        if unknown:
            raise ValueError(f"{where}: kwargs {unknown[0]!r} is not a parameter of {name!r}")

    def check_columns(self, problems: list[Problem], episodes: bool = False) -> None:
        """A TRL-form function's required keywords are all given (fixed ones, the rows' columns, the
        spec's kwargs and, in multi-turn training, `EPISODE_KEYS`); ValueError naming the missing one.
        Run before the model loads."""
        if self.form != "trl" or not problems:
            return
        have = {*TRL_FIXED, *_columns(problems), *self.kwargs, *(EPISODE_KEYS if episodes else ())}
        missing = sorted(self._required - have)
        if missing:
            raise ValueError(f"{self.where}: {self.name!r} requires {missing[0]!r}, which is neither a column of the "
                             f"dataset ({', '.join(_columns(problems)) or 'none'}) nor one of {', '.join(TRL_FIXED)} "
                             f"nor in its kwargs")

    takes_episodes = True
    """Multi-turn episodes' extras (``trajectories``, ``environments``) reach the function as keywords,
    where it names them or takes ``**kwargs``."""

    def _call(self, problems: list[Problem], completions: list[str], extras: dict[str, list]):
        extras = {k: v for k, v in extras.items() if self._var_kw or k in self._accepts}
        if self.form == "seqrl":
            return self.fn(problems, completions, **{**extras, **self.kwargs})
        keywords: dict[str, Any] = {
            "prompts": [list(p.messages) if p.messages else p.prompt for p in problems],
            "completions": [[{"role": "assistant", "content": c}] if p.messages else c
                            for p, c in zip(problems, completions)],
            "answer": [p.answer for p in problems],
        }
        for col in _columns(problems):
            if col != "completions" and col != "prompts":
                keywords[col] = [(p.metadata or {}).get(col) for p in problems]
        keywords.update(extras)
        keywords.update(self.kwargs)
        if not self._var_kw:
            keywords = {k: v for k, v in keywords.items() if k in self._accepts}
        return self.fn(**keywords)

    def __call__(self, problems: list[Problem], completions: list[str], **extras: list) -> list[RewardResult | None]:
        out = _call_without_exits(self.name, lambda: self._call(problems, completions, extras))
        try:
            out = list(out)
        except TypeError:
            raise TypeError(f"returned {type(out).__name__}, not a list of scores") from None
        results: list[RewardResult | None] = []
        for value in out:
            if value is None or isinstance(value, RewardResult):
                results.append(value)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                results.append(RewardResult(float(value)))
            else:
                try:  # numpy / torch scalars
                    if isinstance(value, (str, bytes)):
                        raise TypeError
                    results.append(RewardResult(float(value)))
                except (TypeError, ValueError):
                    results.append(RewardResult(float("nan"), f"error: score of type {type(value).__name__}"))
        return results
