"""Environments: `make_env` with clear errors, deterministic batched rollouts, behaviour policies.

`seqrl.envs.behaviour` trains (stable-baselines3 PPO) and loads the kept behaviour policies the
D4RL-style datasets are built from (`seqrl.data.minari_data`); `seqrl.envs.reference` holds the
random/expert reference returns of the normalised score. The names are re-exported lazily (PEP 562),
so the torch-free `seqrl.envs.config` imports neither gymnasium nor torch.
"""

from importlib import import_module

_LAZY = {
    "EnvError": "seqrl.envs.make",
    "env_extra": "seqrl.envs.make",
    "make_env": "seqrl.envs.make",
    "collect_episodes": "seqrl.envs.rollout",
    "episode_rngs": "seqrl.envs.rollout",
    "uniform_policy": "seqrl.envs.rollout",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'seqrl.envs' has no attribute {name!r}")
