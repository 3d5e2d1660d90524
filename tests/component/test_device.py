"""One device path: run.device / run.bf16 resolution, explicit CPU placement, and clear device-mismatch errors."""

from __future__ import annotations

import pytest
import torch

from seqrl.algos.config import RunConfig
from seqrl.rollout import sequence_logprobs
from seqrl.algos.sft import accumulate_gradients, collate, encode_examples
from seqrl.config import from_dict
from seqrl.data import get_task
from seqrl.models import ModelConfig, load_policy
from seqrl.models.lm import model_device
from seqrl.rollout.engine import SamplingParams, generate
from seqrl.utils import dist


def _no_cuda(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_device_specs_resolve_and_bad_ones_name_the_field(monkeypatch):
    _no_cuda(monkeypatch)
    assert dist.resolve_device("cpu") == torch.device("cpu")
    assert dist.resolve_device("auto") == torch.device("cpu")  # auto falls back to the CPU without CUDA
    for bad in ("gpu", "cuda:", "cuda:x", "cpu:0", ""):
        with pytest.raises(ValueError, match="run.device must be auto, cpu, cuda or cuda:N"):
            dist.resolve_device(bad)
    for spec in ("cuda", "cuda:0"):
        with pytest.raises(ValueError, match="run.device .* CUDA is not available"):
            dist.resolve_device(spec)
    with pytest.raises(ValueError, match="run.device"):
        RunConfig(device="cuda")  # at config time, not at the first forward pass
    assert RunConfig(device="auto").torch_device == torch.device("cpu")


@pytest.mark.real_bf16_probe
def test_bf16_auto_follows_the_hardware_and_booleans_stay_as_given(monkeypatch):
    caps = {"avx512_bf16": False, "amx_bf16": False, "avx2": True}
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: caps)
    cpu = torch.device("cpu")
    assert dist.resolve_bf16("auto", cpu) is False  # AVX2 only: bf16 is emulated, many times slower
    caps["avx512_bf16"] = True
    assert dist.resolve_bf16("auto", cpu) is True
    caps.update(avx512_bf16=False, amx_bf16=True)
    assert dist.resolve_bf16("auto", cpu) is True
    assert dist.resolve_bf16(False, cpu) is False and dist.resolve_bf16(True, cpu) is True
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert dist.resolve_bf16("auto", torch.device("cuda", 0)) is False
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert dist.resolve_bf16("auto", torch.device("cuda", 0)) is True
    with pytest.raises(ValueError, match="run.bf16 must be true, false or auto"):
        dist.resolve_bf16("maybe", cpu)


def test_torch_reports_the_cpu_bf16_flags_this_code_reads():
    caps = torch.cpu.get_capabilities()
    assert "avx512_bf16" in caps and "amx_bf16" in caps


def test_run_config_reads_bf16_as_a_boolean_or_auto_and_logs_the_choice(capsys, monkeypatch):
    _no_cuda(monkeypatch)
    assert from_dict(RunConfig, {"bf16": True}).bf16 is True  # the old boolean field keeps working
    run = from_dict(RunConfig, {"bf16": "auto", "device": "cpu"})
    assert run.bf16 == "auto" and run.use_bf16 == dist.bf16_fast(torch.device("cpu"))
    with pytest.raises(Exception, match="run.bf16|bf16"):
        from_dict(RunConfig, {"bf16": "sometimes"})
    assert RunConfig(bf16=False).announce() == {"run/device": "cpu", "run/bf16": 0.0, "run/compile": 0.0}
    assert "device: cpu (1 process(es)), precision: fp32" in capsys.readouterr().out


def test_init_distributed_picks_gloo_for_the_cpu(monkeypatch):
    chosen = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda backend: chosen.append(backend))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # CUDA present, yet the run asked for the CPU
    dist.init_distributed(torch.device("cpu"))
    assert chosen == ["gloo"]
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: chosen.append(str(d)))
    dist.init_distributed(torch.device("cuda", 1))
    assert chosen == ["gloo", "cuda:1", "nccl"]


def test_explicit_cpu_placement_generates_on_the_cpu():
    torch.manual_seed(0)
    policy = load_policy(ModelConfig(preset="tiny", max_seq_len=64), device="cpu")
    assert model_device(policy.model) == torch.device("cpu")
    ro = generate(policy, policy.encode_prompts(["12+34="]), n=2, params=SamplingParams(max_new_tokens=6, seed=1))
    assert ro.completion_ids.device.type == "cpu" and ro.logprobs.device.type == "cpu"
    assert ro.completion_ids.shape[0] == 2


def test_a_batch_on_another_device_is_a_clear_error():
    torch.manual_seed(0)
    policy = load_policy(ModelConfig(preset="tiny", max_seq_len=64), device="cpu")
    examples = encode_examples(policy, get_task("arith").problems("train", 2, 0))
    chunk = {k: v.to("meta") for k, v in collate(examples, policy.tokenizer.pad_token_id).items()}
    with pytest.raises(ValueError, match="batch input_ids is on device meta, the model on cpu"):
        accumulate_gradients(policy.model, [chunk])
    with pytest.raises(ValueError, match="completion_ids is on device meta, the model on cpu"):
        sequence_logprobs(policy.model, [[1, 2]], torch.zeros((1, 3), dtype=torch.long, device="meta"), 0)


def test_a_model_spread_over_devices_is_a_clear_error():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2, device="meta"))
    with pytest.raises(ValueError, match="several devices.*run.device"):
        model_device(model)
    assert model_device(torch.nn.ReLU()) == torch.device("cpu")  # no parameters: the CPU


def test_loaded_models_are_not_swapped_for_hub_kernels(tmp_path):
    """transformers turns `use_kernels` on for every `from_pretrained` when the `kernels` package is
    installed (on a GPU it then fetches code from the hub, offline it fails, and a loaded model is
    kernelized in inference mode); seqrl loads with it off unless `model.hub_kernels` asks."""
    from seqrl.models import ModelConfig, load_policy
    from seqrl.models.heads import load_scalar_model
    from seqrl.models.prm import ProcessRewardModel

    policy = load_policy(ModelConfig(preset="tiny", max_seq_len=32))
    policy.model.save_pretrained(tmp_path / "lm")
    policy.tokenizer.save_pretrained(tmp_path / "lm")
    assert load_policy(ModelConfig(path=str(tmp_path / "lm"))).model.use_kernels is False
    model, _ = load_scalar_model(ModelConfig(path=str(tmp_path / "lm")))
    assert model.use_kernels is False
    prm = ProcessRewardModel.build(ModelConfig(path=str(tmp_path / "lm")), kind="prm")
    assert prm.model.use_kernels is False
    prm.save(tmp_path / "prm")
    assert ProcessRewardModel.load(tmp_path / "prm").model.use_kernels is False
    opted_in = ModelConfig(path=str(tmp_path / "lm"), hub_kernels=True)  # nothing to swap on a CPU: loads offline
    assert load_policy(opted_in).model.use_kernels is True
    assert load_scalar_model(opted_in)[0].use_kernels is True
    assert ProcessRewardModel.build(opted_in, kind="prm").model.use_kernels is True
