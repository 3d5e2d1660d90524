"""One episode of an environment played by hand (`seqrl env play NAME`): the person types the model's
turns — tool calls in the model's syntax, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` —
and reads what the model would read back, so an environment can be tried before any training."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seqrl.agents.environments import AgentTools, EnvironmentReward
from seqrl.agents.tools import ToolCall
from seqrl.types import Problem


def play(factory: Any, row: Problem, read: Callable[[], str | None], write: Callable[[str], None],
         max_turns: int = 20, timeout_s: float = 30.0, syntax: str = "hermes") -> dict[str, Any]:
    """Play one episode of `factory`'s environment on `row`: ``read()`` gives each turn (None: the input
    ended), ``write`` shows the prompt, the tools, each result and the end. Returns the turns, the calls,
    how it ended and the environment's reward (None without ``get_reward``). `syntax`: how the turns
    write calls (`seqrl.agents.tools.SYNTAXES`)."""
    timeout_s = max(timeout_s, float(getattr(factory, "min_tool_timeout_s", 0.0)))
    agent = AgentTools(environments=factory, timeout_s=timeout_s, syntax=syntax)
    try:
        return _play(agent, row, read, write, max_turns)
    finally:
        agent.close()


def _play(agent: AgentTools, row: Problem, read, write, max_turns: int) -> dict[str, Any]:
    boxes, envs, added = agent.prepare([row], 1)
    box, env = boxes[0], envs[0]
    write(f"prompt: {row.prompt}{added[0] or ''}")
    write(box.compact_prompt())
    turns = calls = 0
    end = "max_turns"
    while turns < max_turns:
        text = read()
        if text is None:
            end = "input ended"
            break
        turns += 1
        parsed, any_call = box.parse(text)
        if not any_call:
            end = "answer"
            break
        for c in parsed:
            r = box.call(c) if isinstance(c, ToolCall) else c
            calls += 1
            write(f"[{r.name}{' error: ' + r.error if r.error else ''}] {r.content}")
        if getattr(env, "done", False):
            end = "done"
            break
    reward = None
    if agent.rewards():
        reward = EnvironmentReward(type(env).__name__)([row], [""], environments=[env])[0]
        reward = None if reward is None else reward.score
    write(f"episode over ({end}): {turns} turns, {calls} calls" + ("" if reward is None else f", reward {reward:g}"))
    return {"turns": turns, "calls": calls, "end": end, "reward": reward}
