"""`run.compile`: the trained model's forward under `torch.compile` learns what the eager model learns,
keeps its checkpoint names, resumes, and logs the compilation time. The tests use the "eager" backend:
dynamo's capture (guards, graph breaks, dynamic shapes) in seconds, without AOT autograd or generated
kernels; inductor's parity on the same step is `benchmarks/compile_probe.py`'s."""

from __future__ import annotations

import pytest
import torch

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.sft import SFTConfig, train
from seqrl.evaluation import EvalConfig
from seqrl.models import ModelConfig
from seqrl.utils.checkpoint import latest_checkpoint
from seqrl.utils.compiling import is_compiled
from seqrl.utils.metrics import read_metrics


def _cfg(tmp_path, name, compile_: bool, steps=4, resume=False) -> SFTConfig:
    return SFTConfig(
        run=RunConfig(name=name, out_dir=str(tmp_path), seed=3, save_every=2, log_every=1, progress=False,
                      compile=compile_, compile_backend="eager", resume=resume),
        model=ModelConfig(preset="tiny", max_seq_len=64),
        task=TaskConfig(name="arith_mixed", n_train=64, n_test=8),  # rows of several lengths: dynamic shapes
        optim=OptimConfig(lr=1e-3, warmup_steps=1),
        eval=EvalConfig(max_new_tokens=8, every=0),
        steps=steps,
        batch_size=4,
    )


def test_a_compiled_sft_run_learns_what_the_eager_run_learns(tmp_path):
    import seqrl.algos.sft as sft

    seen = []
    real = sft.accumulate_gradients

    def spy(model, *args, **kwargs):
        seen.append(is_compiled(model))
        return real(model, *args, **kwargs)

    sft.accumulate_gradients = spy
    try:
        train(_cfg(tmp_path, "eager", False))
        train(_cfg(tmp_path, "compiled", True))
    finally:
        sft.accumulate_gradients = real
    assert seen == [False] * 4 + [True] * 4
    records = {run: [r for r in read_metrics(tmp_path / run / "metrics.jsonl") if "loss/sft" in r]
               for run in ("eager", "compiled")}
    eager = [r["loss/sft"] for r in records["eager"]]
    compiled = [r["loss/sft"] for r in records["compiled"]]
    assert len(eager) == len(compiled) == 4 and compiled == pytest.approx(eager, rel=1e-5, abs=1e-6)
    assert all("time/compile_s" not in r and "run/compile_fallback" not in r for r in records["eager"])
    assert all(r["run/compile_fallback"] == 0.0 for r in records["compiled"])
    assert records["compiled"][0]["time/compile_s"] > 0  # the first step compiled
    assert records["compiled"][-1]["time/compile_s"] >= records["compiled"][0]["time/compile_s"]
    from safetensors.torch import load_file

    ea = load_file(str(latest_checkpoint(tmp_path / "eager") / "model.safetensors"))
    ca = load_file(str(latest_checkpoint(tmp_path / "compiled") / "model.safetensors"))
    assert ea.keys() == ca.keys()  # no _orig_mod. prefix: a checkpoint loads with or without compile
    assert all(torch.allclose(ea[k], ca[k], atol=1e-5) for k in ea)


def test_a_compiled_run_resumes_from_its_checkpoint_compiled_or_not(tmp_path):
    train(_cfg(tmp_path, "run", True, steps=2))
    train(_cfg(tmp_path, "run", True, steps=4, resume=True))
    train(_cfg(tmp_path, "run", False, steps=6, resume=True))  # the same arithmetic: compile may change on resume
    steps = [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "loss/sft" in r]
    assert steps == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("kw,match", [({"compile": "yes"}, "run.compile must be"),
                                      ({"compile_mode": "fast"}, "run.compile_mode must be"),
                                      ({"compile": True, "compile_backend": "nope"}, "run.compile_backend 'nope'")])
def test_compile_settings_are_validated(kw, match):
    with pytest.raises(ValueError, match=match):
        RunConfig(**kw)


def test_trl_torch_compile_names_set_the_run_fields():
    from seqrl import GRPOConfig
    from seqrl.algos.config import trl_overrides

    cfg = GRPOConfig(output_dir="runs/x", torch_compile=True, torch_compile_backend="aot_eager",
                     torch_compile_mode="max-autotune")
    assert (cfg.run.compile, cfg.run.compile_backend, cfg.run.compile_mode) == (True, "aot_eager", "max-autotune")
    assert trl_overrides(["--torch_compile", "true"], {"run"}) == ["--run.compile=true"]


def test_a_compiled_reward_model_run_compiles_its_backbone_and_learns_what_eager_learns(tmp_path):
    """A scalar model runs as base_model + head (`token_scores`): its backbone is compiled too, so the
    compiled run traces frames, logs its compile time and matches eager's losses."""
    from torch._dynamo.utils import counters

    import seqrl.algos.rm as rm_algo
    from tests.component.test_rm import arith_pairs, rm_config, write

    data = write(tmp_path / "prefs.jsonl", arith_pairs(40))
    records, frames = {}, {}
    for compiled in (False, True):
        cfg = rm_config(tmp_path / str(compiled), data, 2)
        cfg.run.compile, cfg.run.compile_backend = compiled, "eager"
        before = counters["frames"]["ok"]
        rm_algo.train(cfg)
        frames[compiled] = counters["frames"]["ok"] - before
        records[compiled] = [r for r in read_metrics(tmp_path / str(compiled) / "rm" / "metrics.jsonl") if "loss/bt" in r]
    assert frames[False] == 0 and frames[True] > 0
    loss = {k: [r["loss/bt"] for r in v] for k, v in records.items()}
    assert len(loss[True]) == 2 and loss[True] == pytest.approx(loss[False], rel=1e-5, abs=1e-6)
    assert records[True][0]["time/compile_s"] > 0


def _failing_backend(gm, example_inputs):
    raise RuntimeError("boom: this backend cannot lower the graph")


def test_a_model_that_fails_to_compile_runs_eager_with_one_warning():
    from seqrl.models import load_policy
    from seqrl.utils.compiling import compile_failure, compile_model

    torch.manual_seed(0)
    model = load_policy(ModelConfig(preset="tiny", max_seq_len=32)).model.eval()
    ids = torch.randint(3, 100, (2, 12))
    with torch.no_grad():
        want = model(input_ids=ids).logits
        compile_model(model, backend=_failing_backend)
        assert is_compiled(model) and compile_failure(model) is None
        with pytest.warns(RuntimeWarning, match=r"run.compile: \w+ did not compile .*boom.*runs eager"):
            got = model(input_ids=ids).logits
        assert torch.equal(got, want)
        assert not is_compiled(model) and "boom" in compile_failure(model)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the fallback warns once: later calls are plain eager
            assert torch.equal(model(input_ids=ids).logits, want)


def test_a_run_whose_model_fails_to_compile_trains_as_the_eager_run(tmp_path):
    from torch._dynamo import list_backends, register_backend

    if "seqrl_test_fails" not in list_backends(exclude_tags=()):
        register_backend(_failing_backend, name="seqrl_test_fails")
    train(_cfg(tmp_path, "eager", False, steps=2))
    cfg = _cfg(tmp_path, "fails", True, steps=2)
    cfg.run.compile_backend = "seqrl_test_fails"
    with pytest.warns(RuntimeWarning, match="did not compile"):
        train(cfg)
    loss = {run: [r["loss/sft"] for r in read_metrics(tmp_path / run / "metrics.jsonl") if "loss/sft" in r]
            for run in ("eager", "fails")}
    assert len(loss["fails"]) == 2 and loss["fails"] == pytest.approx(loss["eager"], rel=1e-6, abs=1e-7)
    fallback = [r["run/compile_fallback"] for r in read_metrics(tmp_path / "fails" / "metrics.jsonl") if "loss/sft" in r]
    assert fallback == [1.0, 1.0]


def test_a_backward_that_fails_to_compile_falls_back_before_any_gradient_is_taken():
    from torch._dynamo.backends.common import aot_autograd

    from seqrl.models import load_policy
    from seqrl.utils.compiling import compile_failure, compile_model

    backend = aot_autograd(fw_compiler=lambda gm, example_inputs: gm, bw_compiler=_failing_backend)
    torch.manual_seed(0)
    model = load_policy(ModelConfig(preset="tiny", max_seq_len=32)).model.train()
    twin = load_policy(ModelConfig(preset="tiny", max_seq_len=32)).model.train()
    twin.load_state_dict(model.state_dict())
    for m in (model, twin):
        m.config.attention_dropout = 0.0
    ids = torch.randint(3, 100, (2, 12))
    compile_model(model, backend=backend)
    with pytest.warns(RuntimeWarning, match="did not compile .*boom"):
        model(input_ids=ids, labels=ids).loss.backward()  # the backward's failure surfaced in the forward
    twin(input_ids=ids, labels=ids).loss.backward()
    assert "boom" in compile_failure(model) and not is_compiled(model)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-6), name
