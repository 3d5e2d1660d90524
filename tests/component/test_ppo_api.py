"""`PPOTrainer(model=…, reward_funcs=…, args=PPOConfig(...), train_dataset=…, value_model=…).train()`: PPO with a
critic from Python, on the run loop of `seqrl train ppo`, sharing GRPOTrainer's model, reward and data handling."""

from __future__ import annotations

import pytest
import yaml

from seqrl import PPOConfig, PPOTrainer
from seqrl.utils.metrics import read_metrics


def reward_len(completions, **kwargs):
    return [-abs(12 - len(c)) / 12 for c in completions]


def _rows(n: int, offset: int = 0) -> list[dict]:
    return [{"prompt": f"{a}+{a + 1}=", "answer": str(2 * a + 1)} for a in range(offset, offset + n)]


def _args(tmp_path, name: str = "ppo", **kw) -> PPOConfig:
    given = dict(output_dir=str(tmp_path / name), max_steps=2, num_generations=2, batch_size=4, micro_batch_size=4,
                 max_completion_length=8, learning_rate=1e-3, logging_steps=1)
    return PPOConfig(**{**given, **kw})


def test_ppo_trainer_with_a_function_reward_rows_in_memory_and_a_value_model(tmp_path):
    from seqrl.models import ModelConfig, load_policy

    start = tmp_path / "start"
    load_policy(ModelConfig(preset="tiny")).save(start)  # the policy's and the critic's starting weights
    trainer = PPOTrainer(model=str(start), reward_funcs=[reward_len], args=_args(tmp_path), train_dataset=_rows(24),
                         eval_dataset=_rows(4, offset=50), value_model=str(start))
    metrics = trainer.train()
    run = tmp_path / "ppo"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["critic"]["path"] == str(start) and saved["rewards"] == []
    assert saved["task"]["name"] == f"jsonl:{run / 'data' / 'train.jsonl'}"
    records = [r for r in read_metrics(run / "metrics.jsonl") if "reward/reward_len/mean" in r]
    assert [r["step"] for r in records] == [1, 2] and all("loss/value" in r for r in records)
    assert "reward/verifier/mean" in metrics  # no verifier among the rewards: true accuracy logged beside them
    assert (run / "critic" / "checkpoint-2").is_dir()  # the critic, checkpointed beside the policy
    assert type(trainer.model).__name__ == "LlamaForCausalLM"

    longer = PPOTrainer(model=str(start), reward_funcs=[reward_len], args=_args(tmp_path, max_steps=3),
                        train_dataset=_rows(24), eval_dataset=_rows(4, offset=50), value_model=str(start))
    longer.train(resume_from_checkpoint=True)
    assert (run / "checkpoint-3").is_dir()


def test_ppo_trainer_refusals(tmp_path):
    from seqrl.models import ModelConfig, load_policy

    with pytest.raises(ValueError, match="rewards: no reward function"):
        PPOTrainer(model="tiny", args=_args(tmp_path, "none", rewards=[]), train_dataset=_rows(8)).train()
    policy = load_policy(ModelConfig(preset="tiny"))  # built in memory: no folder to start a critic from
    with pytest.raises(ValueError, match="critic.path: the policy was given in memory"):
        PPOTrainer(model=policy.model, processing_class=policy.tokenizer, reward_funcs=reward_len,
                   args=_args(tmp_path, "mem"), train_dataset=_rows(8)).train()
    assert not (tmp_path / "mem").exists()  # refused before the run folder is made
    with pytest.raises(TypeError, match="value_model=...\\): expected the folder"):
        PPOTrainer(model="tiny", reward_funcs=reward_len, args=_args(tmp_path), value_model=policy.model)
