"""Shared fixtures: one torch thread, a tiny policy, a temporary run folder."""

from __future__ import annotations

import os

# Tests never reach a model hub: a hub id fails at once instead of retrying for 30 s.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture
def tiny_policy():
    from seqrl.models import ModelConfig, load_policy

    torch.manual_seed(0)
    return load_policy(ModelConfig(preset="tiny", max_seq_len=96))
