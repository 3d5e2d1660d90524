"""`SFTTrainer(model=…, args=SFTConfig(output_dir=…), train_dataset=…).train()`: TRL's SFT call, learning each
row's reply as written (prompt–completion rows and conversations), on the run loop of `seqrl train sft`."""

from __future__ import annotations

import json

import pytest
import yaml

from seqrl import RewardConfig, SFTConfig, SFTTrainer
from seqrl.utils.metrics import read_metrics


def _args(tmp_path, name="sft", **kw) -> SFTConfig:
    given = dict(output_dir=str(tmp_path / name), max_steps=30, learning_rate=3e-3, logging_steps=1, batch_size=8)
    return SFTConfig(**{**given, **kw})


def test_prompt_completion_rows_are_learned_as_written(tmp_path):
    rows = [{"prompt": f"{a} plus one is", "completion": f" {a + 1}."} for a in range(10, 30)]
    trainer = SFTTrainer("tiny", args=_args(tmp_path), train_dataset=rows[:16], eval_dataset=rows[16:])
    trainer.train()
    run = tmp_path / "sft"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["target"] == "completion" and saved["task"]["kwargs"] == {"split_field": "seqrl_split"}
    losses = [r["loss/sft"] for r in read_metrics(run / "metrics.jsonl") if "loss/sft" in r]
    assert len(losses) == 30 and losses[-1] < 0.5 * losses[0]  # the completions' tokens, prompt masked
    assert type(trainer.model).__name__ == "LlamaForCausalLM" and (trainer.save_model() / "model.safetensors").is_file()


def test_conversations_train_on_the_last_assistant_turn(tmp_path):
    from seqrl.training.finetune import row_completion
    from seqrl.data.jsonl import JsonlTask

    rows = [{"messages": [{"role": "user", "content": f"say {w}"}, {"role": "assistant", "content": w}]}
            for w in ("red", "green", "blue", "cyan", "pink", "gold", "gray", "navy", "teal", "lime")]
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = JsonlTask(data, answer_field=None, test_fraction=0.3).problems("train", -1)
    assert {row_completion(p) for p in problems} <= {r["messages"][1]["content"] for r in rows}
    trainer = SFTTrainer("tiny", args=_args(tmp_path, "chat", max_steps=2, task={"kwargs": {"test_fraction": 0.3}}),
                         train_dataset=str(data))
    trainer.train()
    assert yaml.safe_load((tmp_path / "chat" / "config.yaml").read_text())["task"]["name"] == f"jsonl:{data}"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "x", "text": "y"}) + "\n" + json.dumps({"prompt": "z", "text": "w"}) + "\n")
    with pytest.raises(ValueError, match="target completion needs a 'completion' column"):
        SFTTrainer("tiny", args=_args(tmp_path, "bad", task={"kwargs": {"test_fraction": 0.5}}),
                   train_dataset=str(bad)).train()
    assert RewardConfig(output_dir="x/y").run.name == "y"  # TRL's RewardConfig name is seqrl's RMConfig
