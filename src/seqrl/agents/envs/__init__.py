"""The environments seqrl ships (``agent.env: NAME``; `seqrl env ls` lists them, `seqrl env play NAME`
plays one from the terminal).

- ``guess`` — the minimal environment to copy: guess a number with ``guess(number)``, told higher or
  lower; its ``get_reward`` is 1 when found, less the more guesses it took.
- ``python`` — tool-integrated reasoning: ``python(code)`` runs the model's program in the sandbox while
  it solves the row's problem; the task's verifier scores the answer.
- ``code_repair`` — the code agent on a task set `seqrl data code-repair` built (``task.name:
  code_repair``): read, search, edit, run the tests, submit; `CodeAgentReward` on the diff.
"""

from __future__ import annotations

from collections.abc import Callable

BUILTIN = {"guess": "seqrl.agents.envs.guess:GuessEnv", "python": "seqrl.agents.envs.python:PythonEnv",
           "code_repair": "seqrl.agents.envs.code_repair:CodeRepairEnv"}
ABOUT = {"guess": "find a hidden number from 1 to 100 told higher or lower (reward: found, in few guesses)",
         "python": "run Python in the sandbox while solving the row's problem (reward: the task's verifier)",
         "code_repair": "fix a bug injected in a real package: read, search, edit, run its tests in the sandbox, "
                        "submit (reward: the code-agent verdict on the diff, hidden tests included)"}


def environment_class(spec: str, where: str = "env") -> Callable:
    """The environment factory `spec` names: a built-in environment (`BUILTIN`) or an import path
    ``pkg.module:Class``; ValueError naming `where` otherwise."""
    from seqrl.utils.imports import import_object, is_import_path

    if spec in BUILTIN:
        return import_object(BUILTIN[spec], where)
    if not is_import_path(spec):
        raise ValueError(f"{where}: {spec!r} is neither a built-in environment ({', '.join(BUILTIN)}) nor an import "
                         f"path 'pkg.module:Class'")
    return import_object(spec, where)
