"""Reference returns of the D4RL normaliser ``100 · (R − R_random) / (R_expert − R_random)``.

`reference_returns` gives the pair our datasets carry (measured here: uniform random actions and our
expert policy, both in the v5 MuJoCo / v1 Pendulum environments, recorded in the kept policies'
``meta.json``). `D4RL_REFERENCE` holds D4RL's own pair (``HOPPER_RANDOM_SCORE`` … ``WALKER_EXPERT_SCORE`` in
d4rl/gym_mujoco/__init__.py, measured in the v2 environments with D4RL's SAC experts): put a return on that scale
to sit beside the Decision Transformer paper's table, knowing the simulators differ (v5 vs v2).

>>> round(d4rl_normalized_score("Hopper-v5", 3234.3), 6)
100.0
"""

from __future__ import annotations

from seqrl.data.offline import normalized_score

__all__ = ["D4RL_REFERENCE", "d4rl_normalized_score", "normalized_score", "reference_returns"]

D4RL_REFERENCE: dict[str, tuple[float, float]] = {
    "Hopper": (-20.272305, 3234.3),
    "HalfCheetah": (-280.178953, 12135.0),
    "Walker2d": (1.629008, 4592.3),
}
"""Environment name (without version) → (R_random, R_expert) of D4RL (d4rl/gym_mujoco/__init__.py)."""


def reference_returns(env_id: str) -> tuple[float, float]:
    """``(R_random, R_expert)`` measured here for `env_id` (from its kept behaviour policies)."""
    from seqrl.envs.behaviour import kept_meta

    meta = kept_meta(env_id)
    return float(meta["ref_min_score"]), float(meta["ref_max_score"])


def d4rl_normalized_score(env_id: str, ret):
    """`ret` normalised with D4RL's reference returns of `env_id`'s environment (×100)."""
    name = env_id.split("-")[0]
    if name not in D4RL_REFERENCE:
        raise ValueError(f"{env_id}: D4RL has no reference returns (only {', '.join(D4RL_REFERENCE)})")
    return normalized_score(ret, *D4RL_REFERENCE[name])
