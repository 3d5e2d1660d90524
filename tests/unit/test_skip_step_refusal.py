"""Trainers whose loop cannot skip a non-finite update refuse run.on_nonfinite=skip_step by name,
before any work, rather than silently applying the update."""

import importlib

import pytest

from seqrl.algos.config import RunConfig


@pytest.mark.parametrize("algo,config", [("star", "STaRConfig"), ("ppo", "PPOConfig")])
def test_skip_step_is_refused_by_trainers_without_it(algo, config, tmp_path):
    module = importlib.import_module(f"seqrl.algos.{algo}")
    cfg = getattr(module, config)()
    cfg.run = RunConfig(name="x", out_dir=str(tmp_path), on_nonfinite="skip_step")
    with pytest.raises(ValueError, match=f"skip_step is not implemented for {algo}"):
        module.train(cfg)
    assert not (tmp_path / "x").exists()  # refused before the run folder was made
