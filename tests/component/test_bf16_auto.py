"""run.bf16 = auto as the trainers read it (`RunConfig.use_bf16`), with torch's CPU capability probe mocked:
fp32 on an AVX2-only CPU (bf16 is emulated there, ≈ 12× slower), bf16 with AVX-512 BF16 or AMX-BF16."""

from __future__ import annotations

import importlib

import pytest
import torch

from seqrl.algos.config import RunConfig

AVX2_ONLY = {"avx2": True, "avx512_f": False, "avx512_bf16": False, "amx_bf16": False}

pytestmark = pytest.mark.real_bf16_probe  # these tests read the probe the suite otherwise pins to fp32


def test_auto_is_the_default():
    assert RunConfig().bf16 == "auto"


@pytest.mark.parametrize("caps, expected", [(AVX2_ONLY, False), ({**AVX2_ONLY, "avx512_bf16": True}, True)])
def test_a_default_sft_run_autocasts_where_the_cpu_is_fast(tmp_path, monkeypatch, caps, expected):
    from seqrl.algos.config import OptimConfig, TaskConfig
    from seqrl.algos.sft import SFTConfig, train
    from seqrl.models import ModelConfig

    finetune = importlib.import_module("seqrl.training.finetune")  # the module (the package exports a function of that name)
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: caps)
    asked, real = [], finetune.bf16_autocast

    def spy(device, enabled):
        asked.append(enabled)
        return real(device, enabled)

    monkeypatch.setattr(finetune, "bf16_autocast", spy)
    cfg = SFTConfig(run=RunConfig(name="s", out_dir=str(tmp_path), progress=False, device="cpu"),
                    model=ModelConfig(preset="tiny", max_seq_len=32),
                    task=TaskConfig(name="arith", kwargs={"digits": 1}, n_train=64, n_test=4),
                    optim=OptimConfig(lr=1e-3, warmup_steps=0), steps=2, batch_size=8)
    assert cfg.run.bf16 == "auto"
    train(cfg)
    assert asked and all(a is expected for a in asked)


@pytest.mark.parametrize("caps, expected", [
    (AVX2_ONLY, False),
    ({**AVX2_ONLY, "avx512_f": True}, False),  # AVX-512 without its BF16 extension
    ({**AVX2_ONLY, "avx512_f": True, "avx512_bf16": True}, True),
    ({**AVX2_ONLY, "amx_bf16": True}, True),
    ({}, False),  # a probe that reports nothing
])
def test_auto_on_the_cpu_follows_the_bf16_instructions(monkeypatch, caps, expected):
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: caps)
    run = RunConfig(device="cpu", bf16="auto")
    assert run.use_bf16 is expected
    assert RunConfig(device="cpu", bf16=False).use_bf16 is False  # an explicit choice is never overridden
    assert RunConfig(device="cpu", bf16=True).use_bf16 is True


def test_auto_without_the_capability_probe_stays_fp32(monkeypatch):
    monkeypatch.delattr(torch.cpu, "get_capabilities")
    assert RunConfig(device="cpu", bf16="auto").use_bf16 is False


@pytest.mark.parametrize("supported", [False, True])
def test_auto_on_cuda_follows_the_gpu(monkeypatch, supported):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: supported)
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: AVX2_ONLY)  # the CPU does not decide for a GPU run
    assert RunConfig(device="cuda:0", bf16="auto").use_bf16 is supported
