"""Checkpoints: exact save → load round trip, atomic writes, crash safety, pruning, RNG restore."""

from __future__ import annotations

import hashlib
import json
import os
import random
import stat

import numpy as np
import pytest
import safetensors.torch
import torch
import transformers
from torch import nn

from seqrl.utils.checkpoint import (
    CheckpointError,
    NonFiniteWeightsError,
    clean_stale_tmp,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
    verify_checkpoint,
    verify_if_recorded,
)
from seqrl.utils.seeding import get_rng_state, seed_everything, set_rng_state


def tiny_llama(tie: bool, seed: int) -> transformers.LlamaForCausalLM:
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        tie_word_embeddings=tie,
    )
    return transformers.LlamaForCausalLM(config)


def trained(tie: bool = True, seed: int = 0):
    """A tiny model, AdamW and a LR schedule after two optimiser steps."""
    model = tiny_llama(tie, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    ids = torch.arange(2 * 8).reshape(2, 8) % 50  # (B, T)
    for _ in range(2):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return model, optimizer, scheduler


def fresh(tie: bool):
    model = tiny_llama(tie, seed=123)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    return model, optimizer, scheduler


def assert_same_optimizer_state(a: torch.optim.Optimizer, b: torch.optim.Optimizer) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys() and len(sa["state"]) > 0
    for key in sa["state"]:
        for name, value in sa["state"][key].items():
            assert torch.equal(value, sb["state"][key][name]), (key, name)


@pytest.mark.parametrize("tie", [True, False])
def test_save_load_round_trip_is_exact(tmp_path, tie):
    model, optimizer, scheduler = trained(tie)
    seed_everything(7)
    path = save_checkpoint(
        tmp_path, 2, model, optimizer=optimizer, scheduler=scheduler, state={"tokens_seen": 32, "best": 0.5}
    )
    assert path == tmp_path / "checkpoint-2"
    saved_state = json.loads((path / "trainer_state.json").read_text())
    digests = saved_state.pop("sha256")
    state_digest = saved_state.pop("state_sha256")
    assert saved_state == {"step": 2, "tokens_seen": 32, "best": 0.5, "checkpoint_format": 2}
    canonical = json.dumps({**saved_state, "sha256": digests}, sort_keys=True, separators=(",", ":"))
    assert state_digest == hashlib.sha256(canonical.encode()).hexdigest()
    assert sorted(digests) == ["config.json", "generation_config.json", "model.safetensors", "optimizer.pt", "rng.pt"]
    assert digests["rng.pt"] == hashlib.sha256((path / "rng.pt").read_bytes()).hexdigest()
    expected_draws = (random.random(), float(np.random.rand()), torch.rand(3))

    seed_everything(99)  # move every RNG away from the saved state
    model2, optimizer2, scheduler2 = fresh(tie)
    assert not torch.equal(model2.model.embed_tokens.weight, model.model.embed_tokens.weight)
    state = load_checkpoint(path, model2, optimizer2, scheduler2)

    assert state == {"step": 2, "tokens_seen": 32, "best": 0.5}
    draws = (random.random(), float(np.random.rand()), torch.rand(3))
    assert draws[:2] == expected_draws[:2] and torch.equal(draws[2], expected_draws[2])
    params, params2 = dict(model.named_parameters()), dict(model2.named_parameters())
    assert params.keys() == params2.keys()
    for name in params:
        assert torch.equal(params[name], params2[name]), name
    assert torch.equal(model2.lm_head.weight, model.lm_head.weight)
    assert (model2.lm_head.weight.data_ptr() == model2.model.embed_tokens.weight.data_ptr()) is tie
    assert_same_optimizer_state(optimizer, optimizer2)
    assert scheduler2.state_dict() == scheduler.state_dict()


def test_loaded_training_continues_identically(tmp_path):
    model, optimizer, scheduler = trained()
    save_checkpoint(tmp_path, 2, model, optimizer=optimizer, scheduler=scheduler)
    model2, optimizer2, scheduler2 = fresh(tie=True)
    load_checkpoint(tmp_path / "checkpoint-2", model2, optimizer2, scheduler2)
    ids = torch.arange(16).reshape(2, 8) % 50  # (B, T)
    for m, opt, sched in ((model, optimizer, scheduler), (model2, optimizer2, scheduler2)):
        m(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        sched.step()
    for (name, a), b in zip(model.named_parameters(), model2.parameters()):
        assert torch.equal(a, b), name


def test_model_with_converted_weights_round_trips(tmp_path):
    """transformers 5 fuses Mixtral experts in memory; the checkpoint must still load exactly."""
    config = transformers.MixtralConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_local_experts=2,
        num_experts_per_tok=1,
    )
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(config)
    path = save_checkpoint(tmp_path, 1, model)
    torch.manual_seed(1)
    model2 = transformers.MixtralForCausalLM(config)
    load_checkpoint(path, model2, restore_rng=False)
    for (name, a), b in zip(model.state_dict().items(), model2.state_dict().values()):
        assert torch.equal(a, b), name
    reloaded = transformers.MixtralForCausalLM.from_pretrained(path)
    for (name, a), b in zip(model.state_dict().items(), reloaded.state_dict().values()):
        assert torch.equal(a, b), name


def test_plain_module_with_shared_weights(tmp_path):
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(5, 3)
            self.head = nn.Linear(3, 5, bias=False)
            self.head.weight = self.embed.weight

    torch.manual_seed(0)
    model = Tied()
    save_checkpoint(tmp_path, 1, model)
    torch.manual_seed(1)
    model2 = Tied()
    load_checkpoint(tmp_path / "checkpoint-1", model2, restore_rng=False)
    assert torch.equal(model2.embed.weight, model.embed.weight)
    assert model2.head.weight is model2.embed.weight


def test_plain_module_whose_weights_are_views_of_one_buffer(tmp_path):
    """As cuDNN lays out a GRU's weights on a CUDA device (one flat buffer, each weight a view):
    safetensors' save_model refused it; the checkpoint stores each view's values."""
    class Flat(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            flat = torch.randn(10)
            self.a = nn.Parameter(flat[:4].view(2, 2))
            self.b = nn.Parameter(flat[4:])
            self.register_buffer("c", flat[4:7])

    torch.manual_seed(0)
    model = Flat()
    save_checkpoint(tmp_path, 1, model)
    torch.manual_seed(1)
    model2 = Flat()
    load_checkpoint(tmp_path / "checkpoint-1", model2, restore_rng=False)
    for name in ("a", "b", "c"):
        assert torch.equal(getattr(model2, name), getattr(model, name)), name


def test_tokenizer_is_saved(tmp_path):
    class FakeTokenizer:
        def save_pretrained(self, directory) -> None:
            (directory / "tokenizer.json").write_text("{}")

    path = save_checkpoint(tmp_path, 0, nn.Linear(2, 2), tokenizer=FakeTokenizer())
    assert (path / "tokenizer.json").read_text() == "{}"


def test_latest_checkpoint_ignores_tmp_and_incomplete_dirs(tmp_path):
    assert latest_checkpoint(tmp_path / "missing") is None
    assert latest_checkpoint(tmp_path) is None
    model = nn.Linear(2, 2)
    save_checkpoint(tmp_path, 3, model)
    save_checkpoint(tmp_path, 10, model)
    (tmp_path / "checkpoint-20.tmp-1-abcd").mkdir()
    (tmp_path / "checkpoint-20.tmp-1-abcd" / "trainer_state.json").write_text('{"step": 20}')
    (tmp_path / "checkpoint-15").mkdir()  # no trainer_state.json
    (tmp_path / "checkpoint-final").mkdir()
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-10"
    assert [step for step, _ in list_checkpoints(tmp_path)] == [3, 10]

    assert clean_stale_tmp(tmp_path) == [tmp_path / "checkpoint-20.tmp-1-abcd"]
    assert not (tmp_path / "checkpoint-20.tmp-1-abcd").exists()
    assert (tmp_path / "checkpoint-15").exists()  # not ours to delete


def test_keep_last_prunes_oldest_but_never_the_new_one(tmp_path):
    model = nn.Linear(2, 2)
    for step in (1, 2, 3, 4):
        save_checkpoint(tmp_path, step, model, keep_last=2)
    assert [step for step, _ in list_checkpoints(tmp_path)] == [3, 4]
    save_checkpoint(tmp_path, 2, model, keep_last=1)  # an older step saved last is kept
    assert [step for step, _ in list_checkpoints(tmp_path)] == [2]
    with pytest.raises(ValueError, match="keep_last"):
        save_checkpoint(tmp_path, 5, model, keep_last=0)


def test_crash_during_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    model, optimizer, _ = trained()
    save_checkpoint(tmp_path, 1, model, optimizer=optimizer)
    reference = {k: v.clone() for k, v in model.state_dict().items()}

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(model, "save_pretrained", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path, 2, model, optimizer=optimizer)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1"]
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-1"
    model2, optimizer2, _ = fresh(tie=True)
    assert load_checkpoint(tmp_path / "checkpoint-1", model2, optimizer2) == {"step": 1}
    for key, value in model2.state_dict().items():
        assert torch.equal(value, reference[key]), key


def test_a_write_limit_inside_safetensors_or_torch_is_an_os_error_naming_the_checkpoint(tmp_path):
    """A file-size limit (RLIMIT_FSIZE, EFBIG) or quota leaves the disk's free space untouched, and the
    libraries raise their own types (SafetensorError "... (os error 27)", torch's "unexpected pos"):
    the run's one-line disk error needs the OSError. Measured in a child with a 64 KiB file limit."""
    import subprocess
    import sys

    code = (
        "import errno, resource, sys, torch, torch.nn as nn\n"
        "from seqrl.utils.checkpoint import save_checkpoint\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, resource.RLIM_INFINITY))\n"
        "small, big = nn.Linear(4, 4), nn.Linear(256, 256)\n"
        "opt = torch.optim.Adam(small.parameters())\n"
        "small(torch.ones(1, 4)).sum().backward(); opt.step()\n"
        "opt.state[next(iter(opt.state))]['exp_avg'] = torch.zeros(64 << 10)  # optimizer file over the limit\n"
        "for model, optimizer in ((big, None), (small, opt)):\n"
        "    try:\n"
        "        save_checkpoint(sys.argv[1], 1, model, optimizer=optimizer)\n"
        "    except OSError as e:\n"
        "        print(e.errno == errno.EFBIG, 'checkpoint-1' in str(e.filename))\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.stdout.split() == ["True", "True", "True", "True"], (r.stdout, r.stderr[-2000:])
    assert not list(tmp_path.iterdir())  # nothing half-written left


def test_failed_replace_of_same_step_restores_old_checkpoint(tmp_path, monkeypatch):
    torch.manual_seed(0)
    old = nn.Linear(2, 2)
    save_checkpoint(tmp_path, 5, old, state={"version": "old"})
    real_replace = os.replace

    def failing_replace(src, dst):
        if ".tmp-" in os.fspath(src):
            raise OSError("rename failed")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="rename failed"):
        save_checkpoint(tmp_path, 5, nn.Linear(2, 2), state={"version": "new"})
    monkeypatch.setattr(os, "replace", real_replace)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-5"]
    model = nn.Linear(2, 2)
    assert load_checkpoint(tmp_path / "checkpoint-5", model)["version"] == "old"
    assert torch.equal(model.weight, old.weight)

    new = nn.Linear(2, 2)
    save_checkpoint(tmp_path, 5, new, state={"version": "new"})  # a working replace
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-5"]
    assert load_checkpoint(tmp_path / "checkpoint-5", model)["version"] == "new"
    assert torch.equal(model.weight, new.weight)


def test_clean_stale_tmp_restores_checkpoint_moved_aside_before_a_crash(tmp_path):
    save_checkpoint(tmp_path, 5, nn.Linear(2, 2))
    aside = tmp_path / "checkpoint-5.old-1-abcd"
    os.replace(tmp_path / "checkpoint-5", aside)  # crash between "move aside" and "rename in"
    (tmp_path / "checkpoint-5.tmp-1-abcd").mkdir()
    assert clean_stale_tmp(tmp_path) == [tmp_path / "checkpoint-5.tmp-1-abcd"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-5"]
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-5"


def test_corrupt_or_mismatched_checkpoints_name_the_path(tmp_path):
    model = tiny_llama(tie=True, seed=0)
    path = save_checkpoint(tmp_path, 1, model)

    with pytest.raises(CheckpointError, match="checkpoint-9.*not found"):
        load_checkpoint(tmp_path / "checkpoint-9", model)
    with pytest.raises(CheckpointError, match=r"optimizer\.pt: file not found"):
        load_checkpoint(path, model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    other = tiny_llama(tie=False, seed=0)  # untied model needs lm_head.weight, which was not saved
    with pytest.raises(CheckpointError, match=r"checkpoint-1: keys missing .*: \['lm_head.weight'\]"):
        load_checkpoint(path, other)
    with pytest.raises(CheckpointError, match="checkpoint-1: unexpected keys"):
        load_checkpoint(path, nn.Linear(2, 2))

    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"checkpoint-1/model\.safetensors: checksum mismatch"):
        load_checkpoint(path, model)
    state = json.loads((path / "trainer_state.json").read_text())
    del state["sha256"], state["state_sha256"], state["checkpoint_format"]  # every seqrl checkpoint records them
    (path / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match=r"trainer_state\.json: no 'sha256' digests"):
        load_checkpoint(path, model)
    (path / "trainer_state.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"trainer_state\.json: corrupt"):
        load_checkpoint(path, model)
    (path / "trainer_state.json").unlink()
    with pytest.raises(CheckpointError, match=r"checkpoint-1: no trainer_state\.json"):
        load_checkpoint(path, model)


def test_shape_mismatch_and_bad_arguments(tmp_path):
    save_checkpoint(tmp_path, 1, nn.Linear(2, 2))
    with pytest.raises(CheckpointError, match="checkpoint-1: weights do not fit"):
        load_checkpoint(tmp_path / "checkpoint-1", nn.Linear(2, 3))
    with pytest.raises(ValueError, match="must not contain 'step'"):
        save_checkpoint(tmp_path, 2, nn.Linear(2, 2), state={"step": 3})
    with pytest.raises(ValueError, match="must not contain 'sha256'"):
        save_checkpoint(tmp_path, 2, nn.Linear(2, 2), state={"sha256": {}})
    with pytest.raises(ValueError, match="step must be an int"):
        save_checkpoint(tmp_path, -1, nn.Linear(2, 2))


def test_rng_state_round_trip_through_torch_load(tmp_path):
    seed_everything(3)
    torch.save(get_rng_state(), tmp_path / "rng.pt")
    expected = (random.random(), float(np.random.rand()), torch.rand(2))
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    got = (random.random(), float(np.random.rand()), torch.rand(2))
    assert got[:2] == expected[:2] and torch.equal(got[2], expected[2])
    with pytest.raises(ValueError, match="seed must be"):
        seed_everything(-1)


def test_flipped_bytes_in_any_file_are_named_and_an_unchanged_checkpoint_verifies(tmp_path):
    model = tiny_llama(tie=True, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    path = save_checkpoint(tmp_path, 1, model, optimizer=optimizer)
    assert verify_checkpoint(path)["step"] == 1 and "sha256" not in verify_checkpoint(path)
    for name in ("model.safetensors", "optimizer.pt", "rng.pt"):
        file = path / name
        original = file.read_bytes()
        middle = len(original) // 2
        file.write_bytes(original[:middle] + bytes(b ^ 0xFF for b in original[middle:middle + 4096]) + original[middle + 4096:])
        with pytest.raises(CheckpointError, match=rf"checkpoint-1/{name}: checksum mismatch"):
            load_checkpoint(path, model, optimizer)
        file.write_bytes(original)
    (path / "rng.pt").unlink()
    with pytest.raises(CheckpointError, match=r"rng\.pt: missing"):
        verify_checkpoint(path)


def test_non_finite_weights_or_optimizer_state_are_never_written_and_never_prune(tmp_path):
    model = nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    save_checkpoint(tmp_path, 1, model, optimizer=optimizer, keep_last=1)
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteWeightsError, match=r"checkpoint-2 not written: 1 of 8 weights are NaN"):
        save_checkpoint(tmp_path, 2, model, optimizer=optimizer, keep_last=1)
    with torch.no_grad():
        model.weight[0, 0] = 1.0
    optimizer.state[model.weight]["exp_avg"][0, 0] = float("inf")
    with pytest.raises(NonFiniteWeightsError, match="optimizer state holds NaN or infinity"):
        save_checkpoint(tmp_path, 2, model, optimizer=optimizer, keep_last=1)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1]  # the finite one stays, nothing half-written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1"]


def _edit_state(path, old: str, new: str) -> None:
    file = path / "trainer_state.json"
    text = file.read_text()
    assert old in text
    file.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("old,new,why", [
    ('"sha256"', '"sha25v"', "checksum mismatch"),           # the digest record renamed: nothing checked
    ('"step": 2', '"step": 1', "checksum mismatch"),         # an earlier step: resume would overwrite 1 and 2
    ('"state_sha256"', '"state_sha257"', "no 'state_sha256' digest"),  # one flipped bit: the state unchecked
])
def test_the_trainer_state_protects_itself(tmp_path, old, new, why):
    path = save_checkpoint(tmp_path, 2, nn.Linear(2, 2))
    _edit_state(path, old, new)
    with pytest.raises(CheckpointError, match=rf"checkpoint-2/trainer_state\.json: {why}"):
        verify_checkpoint(path)
    with pytest.raises(CheckpointError, match="trainer_state"):
        verify_if_recorded(path)


def test_a_state_whose_step_is_not_the_folders_is_refused(tmp_path):
    """A self-consistent state (its own digest recomputed) copied into another step's folder."""
    path = save_checkpoint(tmp_path, 1, nn.Linear(2, 2))
    os.rename(path, tmp_path / "checkpoint-5")
    with pytest.raises(CheckpointError, match="step 1 does not match the folder's 5"):
        verify_checkpoint(tmp_path / "checkpoint-5")


def test_a_transformers_trainer_state_is_not_checked(tmp_path):
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 10, "log_history": []}))
    verify_if_recorded(tmp_path)  # no error: not seqrl's


def test_a_checkpoint_from_before_the_state_digest_still_loads_with_its_files_checked(tmp_path):
    path = save_checkpoint(tmp_path, 3, nn.Linear(2, 2))
    state = json.loads((path / "trainer_state.json").read_text())
    del state["state_sha256"], state["checkpoint_format"]  # as the previous version wrote it
    (path / "trainer_state.json").write_text(json.dumps(state))
    assert verify_checkpoint(path) == {"step": 3}
    _edit_state(path, '"step": 3', '"step": 2')
    with pytest.raises(CheckpointError, match="step 2 does not match the folder's 3"):
        verify_checkpoint(path)
    _edit_state(path, '"step": 2', '"step": 3')
    (path / "rng.pt").write_bytes(b"changed")
    with pytest.raises(CheckpointError, match="rng.pt: checksum mismatch"):
        verify_checkpoint(path)


def test_a_state_with_integer_keys_verifies_after_the_json_round_trip(tmp_path):
    """{10: …, 2: …} sorts as integers when saved and as text when read back: the digest is of the latter."""
    path = save_checkpoint(tmp_path, 1, nn.Linear(2, 2), state={"per_bin": {10: 0.5, 2: 0.25}})
    assert verify_checkpoint(path) == {"step": 1, "per_bin": {"10": 0.5, "2": 0.25}}


def test_checkpoint_files_get_the_users_mode(tmp_path):
    """safetensors writes weights 0600; every other file of a run follows the umask."""
    from seqrl.config import user_file_mode

    model, optimizer, _ = trained()
    path = save_checkpoint(tmp_path, 1, model, optimizer=optimizer)
    modes = {f.name: stat.S_IMODE(f.stat().st_mode) for f in path.iterdir() if f.is_file()}
    assert modes and set(modes.values()) == {user_file_mode()}, modes


def test_a_file_no_record_lists_is_refused_naming_it(tmp_path):
    """An added weight index and shard would replace the saved weights on load; any unrecorded file is refused."""
    saved = nn.Linear(2, 2)
    path = save_checkpoint(tmp_path, 1, saved)
    safetensors.torch.save_file(nn.Linear(2, 2).state_dict(), str(path / "model-00001-of-00001.safetensors"))
    index = {"weight_map": {"weight": "model-00001-of-00001.safetensors", "bias": "model-00001-of-00001.safetensors"}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    model = nn.Linear(2, 2)
    with pytest.raises(CheckpointError, match=r"checkpoint-1/model-00001-of-00001\.safetensors: not recorded"):
        load_checkpoint(path, model)
    (path / "model-00001-of-00001.safetensors").unlink()
    for check in (verify_checkpoint, verify_if_recorded, lambda p: load_checkpoint(p, model)):
        with pytest.raises(CheckpointError, match=r"checkpoint-1/model\.safetensors\.index\.json: not recorded"):
            check(path)
    (path / "model.safetensors.index.json").unlink()
    (path / "sub").mkdir()
    (path / "sub" / "notes.txt").write_text("x")
    with pytest.raises(CheckpointError, match=r"checkpoint-1/sub/notes\.txt: not recorded"):
        verify_checkpoint(path)
    (path / "sub" / "notes.txt").unlink()
    assert load_checkpoint(path, model) == {"step": 1}  # an empty folder is no file
    assert torch.equal(model.weight, saved.weight)
