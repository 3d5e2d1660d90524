"""`PRMTrainer(model=…, args=PRMConfig(output_dir=…), train_dataset=…, eval_dataset=…).train()`: TRL's call of a
process-reward-model trainer on the run loop of `seqrl train prm`; and a stepwise file's own split column."""

from __future__ import annotations

import json

import pytest
import yaml

from seqrl.algos.prm import PRMConfig, PRMTrainer
from seqrl.data import get_task
from seqrl.data.stepwise import corrupted_arith_examples


def _rows(split: str, n: int, seed: int) -> list[dict]:
    problems = get_task("arith", digits=2).problems(split, n, 0)
    return [ex.to_json() for ex in corrupted_arith_examples(problems, seed=seed)]


def test_the_trainer_runs_on_stepwise_rows_in_memory_and_scores_steps(tmp_path):
    args = PRMConfig(output_dir=str(tmp_path / "p"), max_steps=3, learning_rate=1e-3, logging_steps=1, batch_size=4)
    assert (args.steps, args.optim.lr, args.run.name) == (3, 1e-3, "p")
    trainer = PRMTrainer("tiny", args=args, train_dataset=_rows("train", 24, 0), eval_dataset=_rows("test", 6, 1))
    metrics = trainer.train()
    run = tmp_path / "p"
    first = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert first["data/test_examples"] == 6 and first["data/train_examples"] == 24 and "eval/auc" in metrics
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["data"]["path"] == str(run / "data" / "steps.jsonl") and saved["data"]["split_field"] == "seqrl_split"
    scores = trainer.model.score_steps("12+30=", ["2+0=2", "1+3=4", "42"])
    assert len(scores) == 3 and all(0 <= s <= 1 for s in scores)
    out = trainer.save_model(str(tmp_path / "saved"))
    from seqrl.models.prm import ProcessRewardModel

    assert ProcessRewardModel.load(out).score_steps("12+30=", ["2+0=2"]) == pytest.approx(scores[:1], abs=1e-5)


def test_a_stepwise_file_with_its_own_split_column(tmp_path):
    from seqrl.algos.config import OptimConfig, RunConfig
    from seqrl.algos.prm import PRMDataConfig, train
    from seqrl.models import ModelConfig

    rows = [{**r, "part": "train"} for r in _rows("train", 12, 0)] + [{**r, "part": "test"} for r in _rows("test", 4, 1)]
    data = tmp_path / "steps.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = PRMConfig(run=RunConfig(name="s", out_dir=str(tmp_path), progress=False), model=ModelConfig(preset="tiny"),
                    data=PRMDataConfig(path=str(data), split_field="part"), optim=OptimConfig(lr=1e-3), steps=2,
                    batch_size=4)
    train(cfg)
    first = json.loads((tmp_path / "s" / "metrics.jsonl").read_text().splitlines()[0])
    assert (first["data/train_examples"], first["data/test_examples"]) == (12, 4)
    rows[2]["part"] = "dev"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg.run.name = "s2"
    with pytest.raises(ValueError, match="steps.jsonl line 3: field 'part' must be 'train' or 'test'"):
        train(cfg)
    with pytest.raises(TypeError, match="expected a folder, hub id, catalogue or preset name"):
        PRMTrainer(object(), train_dataset=rows)
