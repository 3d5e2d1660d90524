"""Seeding and RNG state capture, so that a resumed run draws the same random numbers.

`get_rng_state` covers Python's `random`, NumPy's global RNG, torch's CPU generator and, when CUDA is
available, every CUDA device's generator. The state holds only plain Python values and tensors, so it
can be saved with ``torch.save`` and read back with ``torch.load(..., weights_only=True)``.

>>> seed_everything(0)
>>> state = get_rng_state()
>>> first = (random.random(), float(np.random.rand()), torch.rand(1).item())
>>> set_rng_state(state)
>>> first == (random.random(), float(np.random.rand()), torch.rand(1).item())
True
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
import torch

__all__ = ["get_rng_state", "seed_everything", "set_rng_state"]

_KEYS = {"python", "numpy", "torch", "cuda"}


def seed_everything(seed: int) -> None:
    """Seed `random`, NumPy's global RNG and torch (CPU and all CUDA devices) with `seed`.

    In multi-process runs pass ``seqrl.utils.dist.seed_for_rank(seed)``.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an int in [0, 2**32) (got {seed!r})")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def get_rng_state() -> dict[str, Any]:
    """The state of every global RNG: ``{"python", "numpy", "torch", "cuda"}`` (cuda is None
    without CUDA)."""
    _, key, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    return {
        "python": random.getstate(),
        "numpy": {"key": key.tolist(), "pos": int(pos), "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the global RNGs from a `get_rng_state` dict.

    A CUDA state saved on a GPU machine cannot be restored without CUDA; that case warns.
    """
    if set(state) != _KEYS:
        raise ValueError(f"RNG state must have keys {sorted(_KEYS)} (got {sorted(state)})")
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    key = np.asarray(np_state["key"], dtype=np.uint32)
    np.random.set_state(("MT19937", key, np_state["pos"], np_state["has_gauss"], np_state["gauss"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None:
        if torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
        else:
            warnings.warn("RNG state holds CUDA generator states but CUDA is not available; not restored")
