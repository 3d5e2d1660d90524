"""Loading and saving models prints nothing of transformers' own (load reports, progress bars); a weight
that is missing from a checkpoint outside the new head is still named, in one line."""

from __future__ import annotations

import safetensors.torch
from transformers.utils import logging as hf_logging

from seqrl.models import ModelConfig, load_policy
from seqrl.models.heads import load_scalar_model
from seqrl.models.lm import load_pretrained
from seqrl.models.prm import ProcessRewardModel
from seqrl.utils.checkpoint import save_checkpoint


def test_scorers_from_a_policy_load_and_save_without_transformers_output(tmp_path, capfd):
    policy = load_policy(ModelConfig(preset="tiny", max_seq_len=64))
    policy.save(tmp_path / "policy")
    capfd.readouterr()
    before = (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled())
    rm, tok = load_scalar_model(ModelConfig(path=str(tmp_path / "policy")))  # fresh score head: expected
    prm = ProcessRewardModel.build(ModelConfig(path=str(tmp_path / "policy")))
    load_pretrained(str(tmp_path / "policy"))
    save_checkpoint(tmp_path / "run", 1, rm, tok)
    prm.save(tmp_path / "prm")
    ProcessRewardModel.load(tmp_path / "prm")
    out, err = capfd.readouterr()
    assert out == "" and err == "", (out, err)
    assert (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()) == before  # the caller's settings


def test_a_backbone_weight_missing_from_the_checkpoint_is_named(tmp_path, capfd):
    policy = load_policy(ModelConfig(preset="tiny", max_seq_len=64))
    policy.save(tmp_path / "policy")
    weights = tmp_path / "policy" / "model.safetensors"
    tensors = safetensors.torch.load_file(str(weights))
    del tensors["model.layers.0.mlp.up_proj.weight"]
    safetensors.torch.save_file(tensors, str(weights), metadata={"format": "pt"})
    capfd.readouterr()
    load_scalar_model(ModelConfig(path=str(tmp_path / "policy")))
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "model.layers.0.mlp.up_proj.weight" in err and "score" not in err
    assert "initialised at random" in err
