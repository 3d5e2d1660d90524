"""Shared fixtures: one torch thread, a tiny policy, a temporary run folder."""

from __future__ import annotations

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture
def tiny_policy():
    from seqrl.models import ModelConfig, load_policy

    torch.manual_seed(0)
    return load_policy(ModelConfig(preset="tiny", max_seq_len=96))
