"""Environments: `make_env` with clear errors, deterministic batched rollouts, behaviour policies.

`seqrl.envs.behaviour` trains (stable-baselines3 PPO) and loads the kept behaviour policies the
D4RL-style datasets are built from (`seqrl.data.minari_data`); `seqrl.envs.reference` holds the
random/expert reference returns of the normalised score.
"""

from seqrl.envs.make import EnvError, env_extra, make_env
from seqrl.envs.rollout import collect_episodes, episode_rngs, uniform_policy

__all__ = ["EnvError", "collect_episodes", "env_extra", "episode_rngs", "make_env", "uniform_policy"]
