"""seqrl: reinforcement learning with transformer sequence models as policies.

The trainers a TRL user reaches for are importable from here (loaded on first use, so that
``import seqrl`` stays light): ``from seqrl import GRPOConfig, GRPOTrainer``.
"""

__version__ = "0.1.0"

_LAZY = {"GRPOConfig": "seqrl.algos.grpo_config", "GRPOTrainer": "seqrl.algos.grpo"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'seqrl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
