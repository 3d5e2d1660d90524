"""`RewardTrainer(model=…, args=RMConfig(output_dir=…), train_dataset=…, eval_dataset=…).train()`: TRL's call
of a reward-model trainer on the run loop of `seqrl train rm`; and a preference file's own split column."""

from __future__ import annotations

import json
import random

import pytest
import yaml

from seqrl.algos.rm import RewardTrainer, RMConfig
from seqrl.config import ConfigError


def _pairs(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, 49), rng.randint(0, 49)
        rows.append({"prompt": f"{a}+{b}=", "chosen": str(a + b), "rejected": str(a + b + rng.choice([-1, 1, 10]))})
    return rows


def _args(tmp_path, name="rm", **kw) -> RMConfig:
    given = dict(output_dir=str(tmp_path / name), max_steps=4, learning_rate=1e-3, logging_steps=1,
                 center_rewards_coefficient=0.01, batch_size=8, micro_batch_size=8)
    return RMConfig(**{**given, **kw})


def test_rm_config_takes_trl_names():
    cfg = RMConfig(output_dir="out/r", learning_rate=2e-5, max_steps=7, center_rewards_coefficient=0.01, seed=3)
    assert (cfg.run.out_dir, cfg.run.name, cfg.optim.lr, cfg.steps, cfg.center_coef, cfg.run.seed) == \
        ("out", "r", 2e-5, 7, 0.01, 3)
    with pytest.raises(ValueError, match="TRL's num_generations means group_size, which RMConfig does not have"):
        RMConfig(num_generations=4)


def test_the_trainer_runs_on_rows_in_memory_with_their_eval_set_and_resumes(tmp_path):
    trainer = RewardTrainer("tiny", args=_args(tmp_path), train_dataset=_pairs(40, 0), eval_dataset=_pairs(10, 1))
    metrics = trainer.train()
    run = tmp_path / "rm"
    assert metrics["data/heldout_pairs"] == 10 and metrics["data/train_pairs"] == 40
    assert 0 <= metrics["eval/pairwise_accuracy"] <= 1
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["data"]["path"] == str(run / "data" / "pairs.jsonl") and saved["data"]["split_field"] == "seqrl_split"
    rows = [json.loads(line) for line in (run / "data" / "pairs.jsonl").read_text().splitlines()]
    assert [r["seqrl_split"] for r in rows].count("test") == 10
    assert type(trainer.model).__name__.endswith("ForSequenceClassification")
    out = trainer.save_model(str(tmp_path / "saved"))
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    longer = RewardTrainer("tiny", args=_args(tmp_path, max_steps=6), train_dataset=_pairs(40, 0),
                           eval_dataset=_pairs(10, 1))
    longer.train(resume_from_checkpoint=True)
    assert (run / "checkpoint-6").is_dir()


def test_a_preference_file_with_its_own_split_column(tmp_path):
    from seqrl.algos.rm import PreferenceDataConfig, train
    from seqrl.algos.config import OptimConfig, RunConfig
    from seqrl.models import ModelConfig

    data = tmp_path / "prefs.jsonl"
    rows = [{**r, "part": "train"} for r in _pairs(30, 0)] + [{**r, "part": "test"} for r in _pairs(6, 2)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = RMConfig(run=RunConfig(name="s", out_dir=str(tmp_path), progress=False), model=ModelConfig(preset="tiny"),
                   data=PreferenceDataConfig(path=str(data), split_field="part"), optim=OptimConfig(lr=1e-3),
                   steps=2, batch_size=4, micro_batch_size=4)
    metrics = train(cfg)
    assert (metrics["data/train_pairs"], metrics["data/heldout_pairs"]) == (30, 6)
    rows[3]["part"] = "valid"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg.run.name = "s2"
    with pytest.raises(ValueError, match="prefs.jsonl line 4: field 'part' must be 'train' or 'test'"):
        train(cfg)
    with pytest.raises(ValueError, match="data.path must name the preference data"):
        train(RMConfig(run=RunConfig(name="s3", out_dir=str(tmp_path), progress=False)))
    assert not (tmp_path / "s3").exists()
    with pytest.raises(TypeError, match="expected a folder, hub id, catalogue or preset name"):
        RewardTrainer(object(), args=_args(tmp_path), train_dataset=_pairs(4, 0))
    with pytest.raises(ConfigError):
        RMConfig(center_rewards_coefficient=-1.0)


def test_model_is_read_again_after_each_train_and_a_failed_attempts_rows_are_replaced(tmp_path):
    import torch

    run = tmp_path / "rm"
    (run / "data").mkdir(parents=True)
    (run / "data" / "pairs.jsonl").write_text(json.dumps(_pairs(1, 9)[0]) + "\n")  # a first attempt died early
    trainer = RewardTrainer("tiny", args=_args(tmp_path), train_dataset=_pairs(40, 0), eval_dataset=_pairs(10, 1))
    trainer.train()
    assert len((run / "data" / "pairs.jsonl").read_text().splitlines()) == 50
    first = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.args.steps = 6
    trainer.train(resume_from_checkpoint=True)
    after = trainer.model.state_dict()
    assert any(not torch.equal(first[k], after[k]) for k in first)  # checkpoint-6, not the cached checkpoint-4


def test_trackers_and_logs_are_closed_when_a_run_fails_before_its_loop(tmp_path, monkeypatch):
    import seqrl.algos.rm as rm
    from seqrl.training import loop
    from seqrl.utils import trackers

    closed = []
    monkeypatch.setattr(trackers.TensorBoardTracker, "close", lambda self: closed.append(self))

    def broken(*args, **kwargs):
        raise ValueError("evaluation failed")

    monkeypatch.setattr(rm, "evaluate_pairs", broken)  # the step-0 evaluation, between resume and the loop
    trainer = RewardTrainer("tiny", args=_args(tmp_path, report_to="tensorboard"), train_dataset=_pairs(20, 0))
    with pytest.raises(ValueError, match="evaluation failed"):
        trainer.train()
    assert len(closed) == 1 and not loop._OPEN
