"""Rebuilding a DT, BC or Online DT policy from its checkpoint folder."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from seqrl.models.dt import DecisionTransformer, MLPPolicy
from seqrl.models.odt import OnlineDecisionTransformer
from seqrl.utils.checkpoint import STATE_FILE, CheckpointError, load_checkpoint


def load_policy_checkpoint(path: str | Path) -> tuple[torch.nn.Module, dict]:
    """(policy, info) from a DT, BC or Online DT checkpoint folder (`seqrl train dt|bc|odt`); errors name the path."""
    path = Path(path)
    state_file = path / STATE_FILE
    if not state_file.is_file():
        raise CheckpointError(f"{path}: not a checkpoint (no {STATE_FILE})")
    try:
        info = json.loads(state_file.read_text(encoding="utf-8"))["policy"]
        cls = {"dt": DecisionTransformer, "bc": MLPPolicy, "odt": OnlineDecisionTransformer}[info["method"]]
        policy = cls(**info["model"])
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{state_file}: not a Decision Transformer / BC / Online DT checkpoint ({e!r})") from e
    load_checkpoint(path, policy, restore_rng=False)
    return policy.eval(), info
