"""Environments in TRL's ``environment_factory=`` shape: one instance per episode, its public methods the
episode's tools.

An environment is a class (or any zero-argument callable returning an instance) with:

- ``reset(**row) -> str | None`` — called before each episode with the dataset row's fields (``prompt``,
  ``answer`` and every column; only those its signature names unless it takes ``**kwargs``); a string is
  appended to the last user message of the prompt;
- public methods (type hints and a Google-style docstring, as ``tools=``): the episode's tools, bound to
  that episode's instance;
- optionally ``get_reward() -> float``: the environment's own reward, read once the episode ends (a
  reward function named after the class, weight 1, beside the trainer's others);
- optionally a ``done`` attribute: true after a turn's calls ends the episode (``end == "done"``);
- optionally ``solved`` (what the held-out accuracy counts) and ``min_tool_timeout_s`` (a shorter
  ``agent.tool_timeout_s`` is refused).

A call past its timeout is abandoned, not stopped (`seqrl.agents.tools`): its episode ends
(``tool_timeout``) and its instance leaves the pool, so nothing else runs on it meanwhile.

Instances are pooled per environment and reused across steps (built once, reset per episode), as TRL
does. `GymAdapter` wraps a Gymnasium-style ``reset()/step(action)`` environment in this shape.

GRPO compares the G episodes of one prompt, so ``reset`` must give the same text to every episode of a
row (seed any randomness from the row); `EnvironmentPool.reset` refuses a group whose texts differ.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from seqrl.agents.tools import AgentError
from seqrl.types import Problem

RESERVED = ("reset", "get_reward", "close")
"""Methods of an environment that are not tools."""


def environment_tools(env: Any) -> list[Callable]:
    """The tools of environment instance `env`: its class's public functions other than `RESERVED`, bound
    to `env` (read on the class, so that properties are not evaluated)."""
    return [getattr(env, name) for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
            if not name.startswith("_") and name not in RESERVED]


def _row(problem: Problem) -> str:
    return repr(problem.uid or problem.prompt[:40])


def _check_environment(env: Any, name: str) -> None:
    if not callable(getattr(env, "reset", None)):
        raise ValueError(f"environment {name!r}: {type(env).__name__} has no reset() method (each environment "
                         f"needs reset(**row) -> str | None)")
    if not environment_tools(env):
        raise ValueError(f"environment {name!r}: {type(env).__name__} has no public method to expose as a tool")
    reward = getattr(env, "get_reward", None)
    if reward is not None and not callable(reward):
        raise ValueError(f"environment {name!r}: get_reward of {type(env).__name__} is not callable")


def reset_arguments(reset: Callable, problem: Problem) -> dict[str, Any]:
    """What ``reset`` receives for `problem`'s row: ``prompt`` (its messages, or its text), ``answer`` and
    every column, limited to the parameters `reset` names unless it takes ``**kwargs``."""
    row: dict[str, Any] = {"prompt": list(problem.messages) if problem.messages else problem.prompt,
                           "answer": problem.answer}
    row.update({k: v for k, v in (problem.metadata or {}).items() if isinstance(k, str) and k != "environment"})
    try:
        params = inspect.signature(reset).parameters
    except (TypeError, ValueError):
        return row
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return row
    return {k: v for k, v in row.items() if k in params}


class EnvironmentPool:
    """The instances of one or several environments (``factories``: name → factory; one unnamed
    environment is the name None), handed out per episode and reused across batches."""

    def __init__(self, factories: Callable | Mapping[str, Callable]):
        if isinstance(factories, Mapping):
            if not factories:
                raise ValueError("environment_factory: an empty dict")
            self.factories = dict(factories)
            self.multi = True
        else:
            self.factories = {None: factories}
            self.multi = False
        self.pools: dict[Any, list] = {}
        self.discarded: list = []
        for name, factory in self.factories.items():
            if not callable(factory):
                raise ValueError(f"environment_factory: {name!r} is not callable (got {type(factory).__name__})")
            self.pools[name] = [self._build(name)]  # one now: its reset and tools are checked before any model loads
        self.rewarded = {name: type(pool[0]).__name__ for name, pool in self.pools.items()
                         if callable(getattr(pool[0], "get_reward", None))}
        """Environments that own a reward (name → class name, the reward's name)."""

    def _build(self, name) -> Any:
        try:
            env = self.factories[name]()
        except Exception as e:  # noqa: BLE001 — the user's constructor: say which
            raise ValueError(f"environment {name or 'environment_factory'!r}: building an instance failed: "
                             f"{type(e).__name__}: {e}") from e
        _check_environment(env, name or type(env).__name__)
        return env

    def name_of(self, problem: Problem) -> Any:
        """Which environment `problem`'s row uses (its ``environment`` column where there are several)."""
        if not self.multi:
            return None
        name = (problem.metadata or {}).get("environment")
        if name not in self.factories:
            raise AgentError(f"row {_row(problem)}: environment={name!r} is not one of the environments given "
                             f"({', '.join(map(str, self.factories))}); each row needs an 'environment' column")
        return name

    def take(self, problems: Sequence[Problem], n: int) -> list[Any]:
        """One instance per episode (`n` per problem, in order), from the pool, built where it runs short."""
        cursor: dict[Any, int] = {}
        out = []
        for p in problems:
            name = self.name_of(p)
            for _ in range(n):
                i = cursor.get(name, 0)
                pool = self.pools[name]
                if i == len(pool):
                    pool.append(self._build(name))
                cursor[name] = i + 1
                out.append(pool[i])
        return out

    def reset(self, envs: Sequence[Any], problems: Sequence[Problem], n: int) -> list[str | None]:
        """``reset`` every episode's instance with its row; the text each problem's prompt gains (None:
        nothing). A failing reset is an `AgentError` naming the row; G episodes of one row must get one text."""
        added: list[str | None] = []
        for j, p in enumerate(problems):
            texts = []
            for env in envs[j * n:(j + 1) * n]:
                try:
                    out = env.reset(**reset_arguments(env.reset, p))
                except Exception as e:  # noqa: BLE001 — the environment's failure on this row: name it
                    raise AgentError(f"environment {type(env).__name__}: reset failed on row {_row(p)}: "
                                     f"{type(e).__name__}: {e}") from e
                if out is not None and not isinstance(out, str):
                    raise AgentError(f"environment {type(env).__name__}: reset on row {_row(p)} returned "
                                     f"{type(out).__name__}; it must return a string or None")
                texts.append(out)
            if len(set(texts)) > 1:
                raise AgentError(f"environment {type(envs[j * n]).__name__}: reset gave different texts to the "
                                 f"{n} episodes of row {_row(p)}; GRPO compares the episodes of one prompt, so "
                                 f"derive any randomness from the row (a seed column)")
            added.append(texts[0] if texts else None)
        return added

    def discard(self, env: Any) -> None:
        """Leave `env` out of the pool (a call of its episode was abandoned past its timeout and may still be
        running on it): a fresh instance takes its place when one is needed; it is closed at `close`."""
        for pool in self.pools.values():
            if any(e is env for e in pool):
                pool[:] = [e for e in pool if e is not env]
                self.discarded.append(env)

    def instances(self) -> list[Any]:
        return [env for pool in self.pools.values() for env in pool]

    def close(self) -> None:
        """``close()`` every instance that has one (errors ignored: the run is over)."""
        for env in [*self.instances(), *self.discarded]:
            close = getattr(env, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:  # noqa: BLE001, S110 — closing after training; nothing to recover
                    pass


class EnvironmentReward:
    """``get_reward()`` of each episode's environment instance, for the environments of one class: a
    reward function of the episode extras (``environments``). Rows of another environment: None (does
    not apply)."""

    takes_episodes = True

    def __init__(self, class_name: str):
        self.class_name = self.__name__ = class_name

    def __call__(self, problems: list[Problem], completions: list[str], *, environments: Sequence[Any] = (),
                 **_: Any) -> list:
        from seqrl.types import RewardResult

        out = []
        for env in environments:
            if type(env).__name__ != self.class_name:
                out.append(None)
                continue
            value = env.get_reward()
            out.append(value if value is None or isinstance(value, RewardResult) else RewardResult(float(value)))
        return out


class GymAdapter:
    """A Gymnasium-style environment (``reset(seed=) -> (obs, info)``, ``step(action) -> (obs, reward,
    terminated, truncated, info)``, text observations and actions) as a seqrl environment: one tool,
    ``step(action)``, whose result is the next observation; the rewards summed are `get_reward`; a
    terminated or truncated episode is ``done``.

    ``GymAdapter.factory(make)`` is an ``environment_factory`` (``make`` builds the Gymnasium environment);
    a row's ``seed`` column seeds its reset."""

    def __init__(self, env: Any):
        self.env = env
        self.total = 0.0
        self.done = False

    @classmethod
    def factory(cls, make: Callable[[], Any]) -> type[GymAdapter]:
        """A subclass whose instances wrap a fresh ``make()`` (a class: its ``get_reward`` is seen unbuilt)."""
        return type(cls.__name__, (cls,), {"__init__": lambda self: cls.__init__(self, make()),
                                           "__module__": cls.__module__})

    def reset(self, seed: int | None = None, **_: Any) -> str:
        self.total, self.done = 0.0, False
        obs, _info = self.env.reset(seed=seed)
        return str(obs)

    def step(self, action: str) -> str:
        """Take one action in the environment.

        Args:
            action: the action, as text
        """
        if self.done:
            return "the episode is over"
        obs, reward, terminated, truncated, _info = self.env.step(action)
        self.total += float(reward)
        self.done = bool(terminated or truncated)
        return str(obs)

    def get_reward(self) -> float:
        return self.total


def owns_reward(factory: Callable | Mapping[str, Callable]) -> bool:
    """Whether an ``environment_factory`` that is a class (or a dict of them) defines ``get_reward``
    (a factory function cannot tell before it is called: False)."""
    factories = factory.values() if isinstance(factory, Mapping) else [factory]
    return any(isinstance(f, type) and callable(getattr(f, "get_reward", None)) for f in factories)


class AgentTools:
    """The tools of a run's episodes: plain functions shared by every episode (`tools`) and, with
    `environments` (an ``environment_factory``: a factory or a dict of them), each episode's own instance's
    methods. ``timeout_s`` and ``max_result_chars`` are each call's limits, ``syntax`` how the model writes a
    call (`Toolbox`)."""

    def __init__(self, tools: Sequence[Callable] = (), environments: Callable | Mapping[str, Callable] | None = None,
                 timeout_s: float = 10.0, max_result_chars: int = 4000, syntax: str = "hermes"):
        from seqrl.agents.tools import Toolbox

        self.tools = list(tools)
        self.limits = {"timeout_s": timeout_s, "max_result_chars": max_result_chars, "syntax": syntax}
        self.shared = Toolbox(self.tools, **self.limits)
        self.pool = EnvironmentPool(environments) if environments is not None else None
        for env in self.pool.instances() if self.pool is not None else ():
            self.toolbox(env)  # a method named like a plain tool is refused now, before any model loads
            need = float(getattr(env, "min_tool_timeout_s", 0.0))
            if timeout_s < need:
                raise AgentError(f"environment {type(env).__name__}: a tool call may take up to {need:g} s; "
                                 f"agent.tool_timeout_s is {timeout_s:g} (raise it to {need:g} or more)")

    def toolbox(self, env: Any = None):
        """The toolbox of an episode with environment instance `env` (None: the plain tools only)."""
        if env is None:
            return self.shared
        from seqrl.agents.tools import Toolbox

        try:
            return Toolbox([*self.tools, *environment_tools(env)], **self.limits)
        except ValueError as e:
            raise ValueError(f"environment {type(env).__name__}: {e}") from None

    def prepare(self, problems: Sequence[Problem], n: int) -> tuple[list, list | None, list[str | None] | None]:
        """For `n` episodes of each problem: each episode's toolbox, its environment instance (None without
        environments) and, per problem, the text its reset adds to the prompt."""
        if self.pool is None:
            return [self.shared] * (len(problems) * n), None, None
        envs = self.pool.take(problems, n)
        added = self.pool.reset(envs, problems, n)
        return [self.toolbox(env) for env in envs], envs, added

    def release(self, episodes) -> None:
        """After a rollout: the environments of episodes a tool timeout ended leave the pool (`discard`)."""
        if self.pool is not None:
            for e in episodes:
                if e.end == "tool_timeout" and e.env is not None:
                    self.pool.discard(e.env)

    def rewards(self) -> dict[str, EnvironmentReward]:
        """One reward function per environment class that defines ``get_reward`` (named after the class)."""
        if self.pool is None:
            return {}
        return {cls: EnvironmentReward(cls) for cls in dict.fromkeys(self.pool.rewarded.values())}

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
