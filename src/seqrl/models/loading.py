"""Rebuilding a DT, BC or Online DT policy from its checkpoint folder."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from seqrl.models.dt import DecisionTransformer, MLPPolicy
from seqrl.models.odt import OnlineDecisionTransformer
from seqrl.utils.checkpoint import STATE_FILE, CheckpointError, load_checkpoint


_NAMES = {"dt": "Decision Transformer", "bc": "BC", "odt": "Online DT", "vla": "VLA"}


def _policy_class(method: str) -> type[torch.nn.Module]:
    if method == "vla":
        from seqrl.models.vla import VLAModel  # its language encoder is only needed for VLA checkpoints

        return VLAModel
    return {"dt": DecisionTransformer, "bc": MLPPolicy, "odt": OnlineDecisionTransformer}[method]


def load_policy_checkpoint(path: str | Path, methods: tuple[str, ...] = ("dt", "bc", "odt")
                           ) -> tuple[torch.nn.Module, dict]:
    """(policy, info) from a checkpoint folder of one of `methods` (`seqrl train dt|bc|odt|vla`, the
    policy's class and constructor arguments in its trainer state); errors name the path."""
    path = Path(path)
    state_file = path / STATE_FILE
    if not state_file.is_file():
        raise CheckpointError(f"{path}: not a checkpoint (no {STATE_FILE})")
    try:
        info = json.loads(state_file.read_text(encoding="utf-8"))["policy"]
        if info["method"] not in methods:
            raise KeyError("method")
        policy = _policy_class(info["method"])(**info["model"])
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        what = " / ".join(_NAMES[m] for m in methods)
        raise CheckpointError(f"{state_file}: not a {what} checkpoint ({e!r})") from e
    load_checkpoint(path, policy, restore_rng=False)
    return policy.eval(), info
