"""Running untrusted code: a confined subprocess tree, limits, timeouts, no network, unforgeable
per-test verdicts, and a worker pool. See ``docs/sandbox.md``."""

from seqrl.sandbox.pool import run_many
from seqrl.sandbox.runner import (
    COMMAND_LIMITS,
    CommandResult,
    Limits,
    SandboxResult,
    SandboxUnavailable,
    TestRecord,
    available_layers,
    numbers_equal,
    plain_equal,
    run_command,
    run_python,
    stdio_equal,
    stdio_pairs,
)

__all__ = [
    "COMMAND_LIMITS",
    "CommandResult",
    "Limits",
    "SandboxResult",
    "SandboxUnavailable",
    "TestRecord",
    "available_layers",
    "numbers_equal",
    "plain_equal",
    "run_command",
    "run_many",
    "run_python",
    "stdio_equal",
    "stdio_pairs",
]
