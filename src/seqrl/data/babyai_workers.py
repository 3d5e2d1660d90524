"""The bot attempts one worker process of `seqrl data babyai --workers N` runs.

Kept apart from `seqrl.data.babyai` so that a spawned worker imports minigrid and numpy only, not
torch (≈ 2 s less start-up per worker).
"""

from __future__ import annotations

from seqrl.envs.babyai import bot_episode, demo_reset_seed, make_babyai

_ENVS: dict = {}
"""One environment per level in each worker process, reused across its chunks."""


def attempt_chunk(env_id: str, seed: int, start: int, stop: int) -> tuple[int, list]:
    """Bot attempts at indices [start, stop) of `seed`: (start, [(episode or None, why), …])."""
    env = _ENVS.get(env_id)
    if env is None:
        env = _ENVS[env_id] = make_babyai(env_id)
    return start, [bot_episode(env, demo_reset_seed(seed, i)) for i in range(start, stop)]
