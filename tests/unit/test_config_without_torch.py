"""A config is built and checked before torch is imported: the command line's errors come in well under a
second instead of after the 5–8 s of importing torch and transformers."""

from __future__ import annotations

import subprocess
import sys
from typing import get_args

import pytest

HEAVY = ("torch", "transformers", "numpy", "gymnasium")


def _heavy_modules_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint('loaded:', *(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return out.splitlines()[-1].split()[1:]


def test_every_config_class_imports_without_torch():
    code = ("import seqrl.cli, seqrl.config, seqrl.models, seqrl.envs, seqrl.evaluation\n"
            "from seqrl.algos.sft_config import SFTConfig\nfrom seqrl.algos.grpo_config import GRPOConfig\n"
            "from seqrl.algos.dt_config import DTConfig, BCConfig\nfrom seqrl.algos.odt_config import ODTConfig\n"
            "from seqrl.algos.prm_config import PRMConfig\nfrom seqrl.algos.ppo_config import PPOConfig\n"
            "from seqrl.algos.star_config import STaRConfig\nfrom seqrl.algos.vla_config import VLAConfig\n"
            "from seqrl.algos.rm_config import PreferenceDataConfig, RMConfig\nfrom seqrl.models import ModelConfig\n"
            "from seqrl.models.config import VLAModelConfig\n"
            "for cls in (SFTConfig, GRPOConfig, DTConfig, BCConfig, ODTConfig, PRMConfig, PPOConfig, STaRConfig, VLAConfig,"
            " VLAModelConfig): cls()\n"
            "RMConfig(data=PreferenceDataConfig(path='prefs.jsonl'))")
    assert _heavy_modules_after(code) == []


@pytest.mark.parametrize("algo,preset", [("sft", "arith_tiny"), ("grpo", "arith_tiny_dapo"),
                                         ("dt", "pendulum_medium_expert"), ("bc", "dt/pendulum_medium_expert"),
                                         ("odt", "pendulum_medium"), ("prm", "arith_tiny_prm"), ("orm", "arith_tiny_prm"),
                                         ("rm", "arith_tiny_rm"), ("ppo", "arith_tiny_ppo"), ("star", "arith_tiny_star"),
                                         ("vla", "gotoredballgrey")])
def test_a_preset_loads_and_a_bad_field_is_refused_without_torch(algo, preset):
    code = ("from seqrl.cli import main\n"
            f"assert main(['train', '{algo}', '--config', '{preset}', '--print-config']) == 0\n"
            f"assert main(['train', '{algo}', '--config', '{preset}', '--optim.lr=abc']) == 2")
    assert _heavy_modules_after(code) == []


def test_the_trainers_still_export_their_configs():
    from seqrl.algos import grpo, grpo_config, ppo, ppo_config, prm, prm_config, rm, rm_config, sft, sft_config
    from seqrl.algos import star, star_config, vla, vla_config
    from seqrl.algos.config import RunConfig
    from seqrl.models import config, lm
    from seqrl.models import vla as vla_model
    from seqrl.models.config import ModelConfig

    assert sft.SFTConfig is sft_config.SFTConfig and grpo.LossConfig is grpo_config.LossConfig
    assert sft.RunConfig is RunConfig and lm.ModelConfig is ModelConfig
    assert prm.PRMConfig is prm_config.PRMConfig and prm.PRMDataConfig is prm_config.PRMDataConfig
    assert rm.RMConfig is rm_config.RMConfig and rm.PreferenceDataConfig is rm_config.PreferenceDataConfig
    for name in ("PPOConfig", "PPOLossConfig", "CriticConfig", "SamplingConfig"):
        assert getattr(ppo, name) is getattr(ppo_config, name)
    assert star.STaRConfig is star_config.STaRConfig and star.BaseConfig is star_config.BaseConfig
    assert star.hint_words is star_config.hint_words
    for name in ("VLAConfig", "VLADataConfig", "VLAEvalConfig", "VLADaggerConfig"):
        assert getattr(vla, name) is getattr(vla_config, name)
    assert vla_model.VLAModelConfig is config.VLAModelConfig


def test_star_sampling_ranges_are_checked_as_sampling_params_checks_them():
    from seqrl.algos.star_config import STaRConfig
    from seqrl.rollout import SamplingParams

    for bad in ({"temperature": -0.5}, {"top_p": 0.0}, {"top_p": 1.5}):
        with pytest.raises(ValueError) as star_error:
            STaRConfig(**bad)
        with pytest.raises(ValueError) as sampling_error:
            SamplingParams(**bad)
        assert str(star_error.value) == str(sampling_error.value)


def test_the_loss_aggregations_match_the_core_implementation():
    from seqrl.algos.grpo_config import Agg
    from seqrl.core.policy_loss import AGG_MODES

    assert tuple(get_args(Agg)) == tuple(AGG_MODES)


def test_run_config_checks_a_cuda_device_at_config_time(monkeypatch):
    import torch

    from seqrl.algos.config import RunConfig

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="CUDA is not available"):
        RunConfig(device="cuda:0")
    with pytest.raises(ValueError, match="run.device must be auto, cpu, cuda or cuda:N"):
        RunConfig(device="gpu")
    with pytest.raises(ValueError, match="run.bf16 must be true, false or auto"):
        RunConfig(bf16="yes")


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:x", "cpu:0", ""])
def test_a_malformed_device_is_refused_without_torch(spec):
    code = ("from seqrl.algos.config import RunConfig\ntry:\n"
            f"    RunConfig(device={spec!r})\nexcept ValueError as e:\n    assert 'run.device must be' in str(e)\n"
            "else:\n    raise AssertionError('accepted')")
    assert _heavy_modules_after(code) == []
