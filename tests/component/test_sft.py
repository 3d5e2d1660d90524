"""SFT plumbing: collation, gradient accumulation, exact save/load, resume, interruption."""

from __future__ import annotations

import pytest
import torch

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.sft import SFTConfig, accumulate_gradients, collate, encode_examples, train
from seqrl.evaluation import EvalConfig
from seqrl.config import ConfigError, from_dict
from seqrl.core.losses import IGNORE_INDEX
from seqrl.data import get_task
from seqrl.models import ModelConfig, load_policy
from seqrl.utils.checkpoint import latest_checkpoint, load_checkpoint
from seqrl.utils.metrics import read_metrics


def test_collate_masks_prompt_and_padding():
    batch = collate([([1, 2], [3, 4, 5]), ([6], [7])], pad_id=0)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5], [6, 7, 0, 0, 0]]
    assert batch["labels"].tolist() == [[IGNORE_INDEX, IGNORE_INDEX, 3, 4, 5], [IGNORE_INDEX, 7] + [IGNORE_INDEX] * 3]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]


def test_examples_end_with_eos_and_too_long_is_an_error(tiny_policy):
    problems = get_task("arith").problems("train", 3, 0)
    examples = encode_examples(tiny_policy, problems)
    assert all(c[-1] == tiny_policy.tokenizer.eos_token_id for _, c in examples)
    assert tiny_policy.tokenizer.decode(examples[0][1][:-1]) == problems[0].target
    short = load_policy(ModelConfig(preset="tiny", max_seq_len=16))
    with pytest.raises(ValueError, match="context of 16"):
        encode_examples(short, problems)


def test_gradient_accumulation_8x1_equals_2x4(tiny_policy):
    problems = get_task("arith_mixed").problems("train", 8, 0)  # uneven lengths
    examples = encode_examples(tiny_policy, problems)
    pad = tiny_policy.tokenizer.pad_token_id
    model = tiny_policy.model.double()

    def grads(chunk_size):
        model.zero_grad()
        chunks = [collate(examples[i : i + chunk_size], pad) for i in range(0, 8, chunk_size)]
        loss, n = accumulate_gradients(model, chunks)
        return loss / n, [p.grad.clone() for p in model.parameters()]

    loss_a, ga = grads(8)
    loss_b, gb = grads(2)
    assert loss_a == pytest.approx(loss_b, rel=1e-10)
    for a, b in zip(ga, gb):
        assert torch.allclose(a, b, atol=1e-10, rtol=0)


def test_policy_save_load_is_exact(tmp_path, tiny_policy):
    tiny_policy.save(tmp_path / "m")
    again = load_policy(ModelConfig(path=str(tmp_path / "m")))
    for (name, a), (_, b) in zip(tiny_policy.model.state_dict().items(), again.model.state_dict().items()):
        assert torch.equal(a, b), name
    ids = torch.tensor([tiny_policy.encode_prompts(["12+34="])[0]])
    with torch.no_grad():
        assert torch.equal(tiny_policy.model(ids).logits, again.model(ids).logits)
    assert again.encode_prompts(["1+2="]) == tiny_policy.encode_prompts(["1+2="])


def test_unknown_model_path_or_preset_lists_valid_ones(tmp_path):
    with pytest.raises(ValueError, match="tiny"):
        load_policy(ModelConfig(path=str(tmp_path / "nowhere")))
    with pytest.raises(ValueError, match="model.preset must be one of"):
        ModelConfig(preset="huge")


def _cfg(tmp_path, name, **kw) -> SFTConfig:
    return SFTConfig(
        run=RunConfig(name=name, out_dir=str(tmp_path), seed=3, save_every=3, log_every=1, progress=False),
        model=ModelConfig(preset="tiny", max_seq_len=64),
        task=TaskConfig(name="arith", n_train=64, n_test=8),
        optim=OptimConfig(lr=1e-3, warmup_steps=2),
        eval=EvalConfig(max_new_tokens=16),
        steps=6,
        batch_size=4,
        **kw,
    )


def test_resume_after_interrupt_equals_uninterrupted_run(tmp_path, monkeypatch):
    full = _cfg(tmp_path, "full")
    train(full)

    import seqrl.algos.sft as sft

    calls = {"n": 0}
    real = sft.accumulate_gradients

    def interrupt_at_step_5(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(sft, "accumulate_gradients", interrupt_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        train(_cfg(tmp_path, "cut"))
    monkeypatch.undo()
    # Ctrl-C left the step-3 checkpoint intact and loadable
    last = latest_checkpoint(tmp_path / "cut")
    assert last is not None and last.name == "checkpoint-3"
    fresh = load_policy(ModelConfig(preset="tiny", max_seq_len=64))
    assert load_checkpoint(last, fresh.model)["step"] == 3

    resumed = _cfg(tmp_path, "cut")
    resumed.run.resume = True
    train(resumed)
    a = load_policy(ModelConfig(path=str(tmp_path / "full" / "checkpoint-6"))).model.state_dict()
    b = load_policy(ModelConfig(path=str(tmp_path / "cut" / "checkpoint-6"))).model.state_dict()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    losses = lambda run: [(r["step"], r["loss/sft"]) for r in read_metrics(tmp_path / run / "metrics.jsonl") if "loss/sft" in r]
    assert losses("full") == losses("cut")  # no duplicated or missing steps either


def test_fresh_run_refuses_to_overwrite_checkpoints(tmp_path):
    cfg = _cfg(tmp_path, "once")
    cfg.steps = 3
    train(cfg)
    with pytest.raises(ValueError, match="already holds checkpoint-3"):
        train(cfg)


@pytest.mark.parametrize(
    "data,match",
    [
        ({"batch_size": 6, "grad_accum": 4}, "divisible by grad_accum"),
        ({"optim": {"lrr": 1.0}}, r"sft\.optim\.lrr: unknown key; did you mean 'lr'"),
        ({"model": {"preset": "huge"}}, "model.preset must be one of"),
        ({"steps": "many"}, r"sft\.steps: expected int"),
    ],
)
def test_config_errors_name_the_field(data, match):
    with pytest.raises(ConfigError, match=match):
        from_dict(SFTConfig, data, path="sft")
