"""Tools seqrl ships: ``python`` — the model's code run in the sandbox (tool-integrated reasoning, as
ReTool / ToRL / SimpleTIR give a model a Python interpreter while it solves a problem)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

from seqrl.sandbox import run_command
from seqrl.sandbox import runner as _runner


def python_tool(timeout_s: float = 5.0, memory_mb: int = 512, max_output_bytes: int = 16_000,
                allow_unconfined: bool = False) -> Callable[[str], str]:
    """A ``python(code)`` tool: the code runs as a fresh program in the sandbox (no network, its own
    uid, a scratch directory, `timeout_s` of wall clock, `memory_mb`), and the model reads what it
    printed — with the error's last lines where it failed, or the limit it hit. The trainer's process
    and files are out of its reach; give the Toolbox a ``timeout_s`` above this one."""
    if timeout_s <= 0 or memory_mb < 64:
        raise ValueError(f"python_tool: timeout_s must be > 0 and memory_mb >= 64 (got {timeout_s}, {memory_mb})")

    def python(code: str) -> str:
        """Run a Python program and return what it prints.

        Args:
            code: The program. Print what you want to see; each call starts a fresh interpreter.
        """
        with tempfile.TemporaryDirectory(prefix="seqrl-pytool-") as cwd:
            os.chmod(cwd, 0o755)  # reachable by the run's unprivileged uid
            r = run_command([_runner._sandbox_python(), "-I", "-c", code], cwd=cwd, timeout_s=timeout_s,
                            memory_mb=memory_mb, max_output_bytes=max_output_bytes, allow_unconfined=allow_unconfined)
        out = r.stdout.rstrip("\n")
        if r.status == "timeout":
            return f"{out}\n[stopped: no result within {timeout_s:g} s]".lstrip("\n")
        if r.status == "memory":
            return f"{out}\n[stopped: more than {memory_mb} MB of memory]".lstrip("\n")
        if r.status != "ok":
            return f"{out}\n[the program could not run: {r.status} {r.reason}]".lstrip("\n")
        if r.returncode:
            tail = "\n".join(r.stderr.strip().splitlines()[-6:])
            return f"{out}\n{tail}".strip()
        return out if out.strip() else "(no output)"

    return python


python = python_tool()
"""The ``python`` tool with its default limits: ``agent.tools: [seqrl.agents.builtin:python]``."""
