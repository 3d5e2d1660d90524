"""Agents that act: tools in TRL's ``tools=`` shape, environments in its ``environment_factory=`` shape,
and the multi-turn rollout that runs them."""

from seqrl.agents.environments import AgentTools, EnvironmentPool, GymAdapter, environment_tools
from seqrl.agents.rollout import (ENDS, Episode, Sampled, episode_metrics, multi_turn_rollout, tool_framing,
                                  tool_turn_text)
from seqrl.agents.tools import (ERRORS, AgentError, ToolCall, Toolbox, ToolResult, as_text, check_arguments,
                                tool_schema)

__all__ = ["ENDS", "ERRORS", "AgentError", "AgentTools", "EnvironmentPool", "Episode", "GymAdapter", "Sampled", "ToolCall",
           "ToolResult", "Toolbox", "as_text", "check_arguments", "environment_tools", "episode_metrics",
           "multi_turn_rollout", "tool_framing", "tool_schema", "tool_turn_text"]
