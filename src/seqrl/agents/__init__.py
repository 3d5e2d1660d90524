"""Agents that act: tools and environments for multi-turn rollouts (TRL's ``tools=`` shape)."""

from seqrl.agents.tools import ERRORS, ToolCall, Toolbox, ToolResult, as_text, check_arguments, tool_schema

__all__ = ["ERRORS", "ToolCall", "ToolResult", "Toolbox", "as_text", "check_arguments", "tool_schema"]
