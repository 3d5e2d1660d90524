"""seqrl: reinforcement learning with transformer sequence models as policies.

The trainers a TRL user reaches for are importable from here, under TRL's names (loaded on first use,
so that ``import seqrl`` stays light): ``from seqrl import GRPOConfig, GRPOTrainer``, ``SFTConfig``,
``SFTTrainer``, ``PPOConfig``, ``PPOTrainer``, ``RewardConfig`` (seqrl's `RMConfig`), ``RewardTrainer``,
``PRMConfig``, ``PRMTrainer``; and ``DTConfig``, ``BCConfig``, ``DTTrainer`` for the Decision Transformer.
"""

__version__ = "0.1.0"

_LAZY = {"GRPOConfig": ("seqrl.algos.grpo_config", "GRPOConfig"), "GRPOTrainer": ("seqrl.algos.grpo", "GRPOTrainer"),
         "SFTConfig": ("seqrl.algos.sft_config", "SFTConfig"), "SFTTrainer": ("seqrl.algos.sft", "SFTTrainer"),
         "RewardConfig": ("seqrl.algos.rm_config", "RMConfig"), "RewardTrainer": ("seqrl.algos.rm", "RewardTrainer"),
         "PRMConfig": ("seqrl.algos.prm_config", "PRMConfig"), "PRMTrainer": ("seqrl.algos.prm", "PRMTrainer"),
         "PPOConfig": ("seqrl.algos.ppo_config", "PPOConfig"), "PPOTrainer": ("seqrl.algos.ppo", "PPOTrainer"),
         "DTConfig": ("seqrl.algos.dt_config", "DTConfig"), "BCConfig": ("seqrl.algos.dt_config", "BCConfig"),
         "DTTrainer": ("seqrl.algos.dt", "DTTrainer")}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'seqrl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
