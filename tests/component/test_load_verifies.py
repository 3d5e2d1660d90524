"""Loading a checkpoint folder from Python checks it as the command line does: a file changed since its save
is an error naming it, before any weight is read."""

from __future__ import annotations

import pytest

from seqrl.models.config import ModelConfig
from seqrl.utils.checkpoint import CheckpointError, save_checkpoint


def _flip(file) -> None:
    data = bytearray(file.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(b ^ 0x5A for b in data[middle:middle + 64])  # same length, other bytes
    file.write_bytes(bytes(data))


def test_load_policy_and_load_scalar_model_refuse_a_changed_checkpoint_naming_the_file(tmp_path, tiny_policy):
    from seqrl.models.heads import load_scalar_model
    from seqrl.models.lm import load_policy

    checkpoint = save_checkpoint(tmp_path, 1, tiny_policy.model, tiny_policy.tokenizer)
    assert load_policy(ModelConfig(path=str(checkpoint))).model.num_parameters() == tiny_policy.model.num_parameters()
    _flip(checkpoint / "model.safetensors")
    with pytest.raises(CheckpointError, match="checkpoint-1/model.safetensors: checksum mismatch"):
        load_policy(ModelConfig(path=str(checkpoint)))
    with pytest.raises(CheckpointError, match="checkpoint-1/model.safetensors: checksum mismatch"):
        load_scalar_model(ModelConfig(path=str(checkpoint)))
    other = save_checkpoint(tmp_path, 2, tiny_policy.model, tiny_policy.tokenizer)
    (other / "tokenizer_config.json").unlink()
    with pytest.raises(CheckpointError, match="checkpoint-2/tokenizer_config.json: missing"):
        load_policy(ModelConfig(path=str(other)))


def test_a_model_folder_without_trainer_state_loads_unchecked(tmp_path, tiny_policy):
    from seqrl.models.lm import load_policy

    tiny_policy.save(tmp_path / "plain")  # a Hugging Face folder: nothing recorded to check against
    assert load_policy(ModelConfig(path=str(tmp_path / "plain"))).model.num_parameters() > 0


def test_a_prm_checkpoint_with_a_changed_file_is_refused_naming_it(tmp_path):
    import torch

    from seqrl.models.prm import ProcessRewardModel

    torch.manual_seed(0)
    prm = ProcessRewardModel.build(ModelConfig(preset="tiny", max_seq_len=32), "prm", "2class")
    checkpoint = save_checkpoint(tmp_path, 2, prm.model, prm.tokenizer)
    assert ProcessRewardModel.load(checkpoint).kind == "prm"
    _flip(checkpoint / "model.safetensors")
    with pytest.raises(CheckpointError, match="checkpoint-2/model.safetensors: checksum mismatch"):
        ProcessRewardModel.load(checkpoint)


def test_a_folder_whose_trainer_state_is_not_seqrls_loads_unchecked(tmp_path, tiny_policy):
    import json

    from seqrl.models.lm import load_policy

    tiny_policy.save(tmp_path / "hf")  # a transformers Trainer checkpoint has a trainer_state.json of its own
    (tmp_path / "hf" / "trainer_state.json").write_text(json.dumps({"global_step": 5, "log_history": []}))
    assert load_policy(ModelConfig(path=str(tmp_path / "hf"))).model.num_parameters() > 0


def test_seqrl_eval_of_a_run_folder_verifies_the_checkpoint_it_picks(tmp_path, tiny_policy, capsys):
    from seqrl.cli import main

    checkpoint = save_checkpoint(tmp_path / "run", 1, tiny_policy.model, tiny_policy.tokenizer)
    _flip(checkpoint / "model.safetensors")
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--task", "arith", "--n", "2", "--max-new-tokens", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("seqrl: error: ") and "checkpoint-1/model.safetensors: checksum mismatch" in err
    assert err.count("\n") == 1
