"""The Python API a TRL user expects: `GRPOConfig` with TRL's names and `GRPOTrainer(model=…, reward_funcs=…,
args=…, train_dataset=…, eval_dataset=…).train()` on the run loop of `seqrl train grpo`."""

from __future__ import annotations

import json

import pytest
import yaml

from seqrl import GRPOConfig, GRPOTrainer
from seqrl.config import ConfigError
from seqrl.utils.metrics import read_metrics


def reward_len(completions, **kwargs):
    return [-abs(12 - len(c)) / 12 for c in completions]


def _rows(n: int, offset: int = 0) -> list[dict]:
    return [{"prompt": f"{a}+{a + 1}=", "answer": str(2 * a + 1)} for a in range(offset, offset + n)]


def _args(tmp_path, name: str = "api", **kw) -> GRPOConfig:
    given = dict(output_dir=str(tmp_path / name), max_steps=2, num_generations=2, batch_size=4,
                 max_completion_length=8, learning_rate=1e-3, logging_steps=1)
    return GRPOConfig(**{**given, **kw})


def test_grpo_config_takes_trl_names_and_refuses_the_ones_that_mean_something_else(tmp_path):
    cfg = GRPOConfig(output_dir=str(tmp_path / "out" / "my_run"), learning_rate=2e-5, num_generations=4,
                     max_completion_length=48, beta=0.04, epsilon_high=0.28, seed=3, save_steps=5, batch_size=16)
    assert (cfg.run.out_dir, cfg.run.name) == (str(tmp_path / "out"), "my_run")
    assert (cfg.optim.lr, cfg.group_size, cfg.sampling.max_new_tokens, cfg.loss.beta) == (2e-5, 4, 48, 0.04)
    assert (cfg.loss.clip_eps_high, cfg.run.seed, cfg.run.save_every, cfg.batch_size) == (0.28, 3, 5, 16)
    with pytest.raises(ValueError, match="per_device_train_batch_size has no single seqrl counterpart; set batch_size"):
        GRPOConfig(per_device_train_batch_size=8)
    with pytest.raises(ConfigError, match="must be divisible by group_size"):  # checked again after the names apply
        GRPOConfig(num_generations=3)
    with pytest.raises(TypeError):
        GRPOConfig(not_a_field=1)
    # TRL's bf16: None (its default) is "where the hardware has it", True/False as given
    assert [GRPOConfig(bf16=v).run.bf16 for v in (None, True, False)] == ["auto", True, False]


def test_the_trainer_runs_on_rows_in_memory_and_the_run_folder_records_them(tmp_path):
    trainer = GRPOTrainer(model="tiny", reward_funcs=[reward_len], args=_args(tmp_path),
                          train_dataset=_rows(24), eval_dataset=_rows(4, offset=50))
    metrics = trainer.train()
    run = tmp_path / "api"
    assert metrics["reward/reward_len/mean"] <= 0 and "eval/accuracy" in metrics
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["task"]["name"] == f"jsonl:{run / 'data' / 'train.jsonl'}"
    assert saved["task"]["kwargs"] == {"split_field": "seqrl_split"} and saved["rewards"] == []
    rows = [json.loads(line) for line in (run / "data" / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 28 and sum(r["seqrl_split"] == "test" for r in rows) == 4
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl") if "reward/reward_len/mean" in r] == [1, 2]
    # the trained model, from the last checkpoint, saved where TRL saves it
    from transformers import AutoModelForCausalLM

    assert type(trainer.model).__name__ == "LlamaForCausalLM"
    trainer.save_model()
    assert AutoModelForCausalLM.from_pretrained(run).config.vocab_size == trainer.model.config.vocab_size

    # resume: the same rows continue the run; other rows are refused
    longer = GRPOTrainer(model="tiny", reward_funcs=[reward_len], args=_args(tmp_path, max_steps=3),
                         train_dataset=_rows(24), eval_dataset=_rows(4, offset=50))
    longer.train(resume_from_checkpoint=True)
    assert (run / "checkpoint-3").is_dir()
    other = GRPOTrainer(model="tiny", reward_funcs=[reward_len], args=_args(tmp_path), train_dataset=_rows(24, 1),
                        eval_dataset=_rows(4, offset=50))
    with pytest.raises(ValueError, match="holds other rows than the dataset given"):
        other.train(resume_from_checkpoint=True)


def test_a_datasets_dataset_a_loaded_model_and_an_import_path_reward(tmp_path, monkeypatch, capsys):
    from datasets import Dataset

    from seqrl.models import ModelConfig, load_policy

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "my_rewards.py").write_text("def short(completions, **kw):\n    return [-len(c) for c in completions]\n")
    policy = load_policy(ModelConfig(preset="tiny"))
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    trainer = GRPOTrainer(model=policy.model, processing_class=policy.tokenizer,
                          reward_funcs=["my_rewards:short", reward_len], args=_args(tmp_path, "ds"),
                          train_dataset=Dataset.from_list(_rows(30)))
    metrics = trainer.train()
    assert "reward/short/mean" in metrics and "reward/reward_len/mean" in metrics  # an import path: its name
    assert "no eval_dataset; holding out ≈ 10% of the prompts" in capsys.readouterr().err
    assert trainer.model is policy.model  # trained in place
    assert any(not (v == before[k]).all() for k, v in policy.model.state_dict().items())


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(TypeError, match="GRPOTrainer\\(model=...\\): expected a path"):
        GRPOTrainer(model=3, reward_funcs=[reward_len], args=_args(tmp_path))
    with pytest.raises(TypeError, match="reward_funcs: expected a function"):
        GRPOTrainer(model="tiny", reward_funcs=[3], args=_args(tmp_path))
    with pytest.raises(ValueError, match="needs a train_dataset too"):
        GRPOTrainer(model="tiny", args=_args(tmp_path), eval_dataset=_rows(2))
    trainer = GRPOTrainer(model="tiny", reward_funcs=[reward_len], args=_args(tmp_path, "bad"),
                          train_dataset=[{"prompt": "1+1=", "blob": object()}])
    with pytest.raises(ValueError, match="train_dataset row 1: column 'blob' is not JSON-serialisable"):
        trainer.train()
    args = _args(tmp_path, "none")
    args.rewards = []
    with pytest.raises(ValueError, match="rewards: no reward function"):
        GRPOTrainer(model="tiny", args=args, train_dataset=_rows(8)).train()
    assert not (tmp_path / "none" / "checkpoint-1").exists()
