"""``python``: the model may run Python in the sandbox while it solves the row's problem (tool-integrated
reasoning: ReTool, ToRL, SimpleTIR). The environment adds nothing to the prompt; the task's verifier
scores the answer the policy writes."""

from __future__ import annotations

from typing import Any

from seqrl.agents.builtin import python_tool


class PythonEnv:
    """One interpreter tool per episode; each call is a fresh sandboxed program (no state between calls)."""

    timeout_s = 5.0

    def __init__(self) -> None:
        self._run = python_tool(timeout_s=self.timeout_s)
        self.calls = 0

    def reset(self, **_: Any) -> None:
        self.calls = 0

    def python(self, code: str) -> str:
        """Run a Python program and return what it prints.

        Args:
            code: The program. Print what you want to see; each call starts a fresh interpreter.
        """
        self.calls += 1
        return self._run(code)
