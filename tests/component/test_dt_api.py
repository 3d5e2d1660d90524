"""`DTTrainer(args=DTConfig(...), train_dataset=...).train()`: the Decision Transformer (and BC) from Python, on
the run loop of `seqrl train dt`, with TRL's config names."""

from __future__ import annotations

import pytest
import torch
import yaml

from seqrl import BCConfig, DTConfig, DTTrainer
from seqrl.models.dt import DecisionTransformer, MLPPolicy
from seqrl.utils.metrics import read_metrics

SMALL = dict(model={"hidden_size": 16, "n_layer": 1, "n_head": 1, "context_len": 3, "max_ep_len": 16},
             bc={"hidden_size": 16}, eval={"episodes": 1, "target_returns": [5.0]}, batch_size=4)


def _minari(tmp_path, drift):
    from seqrl.data.minari_data import write_minari

    return write_minari("test/drift-v0", drift.dataset(16).episodes, drift.env_id, root=tmp_path / "minari",
                        ref_min_score=-float(drift.H), ref_max_score=float(drift.H))


def test_dt_config_takes_trl_names():
    cfg = DTConfig(output_dir="out/dt_run", learning_rate=3e-4, max_steps=7, seed=2, logging_steps=3)
    assert (cfg.run.out_dir, cfg.run.name, cfg.optim.lr, cfg.steps, cfg.run.seed, cfg.run.log_every) == \
        ("out", "dt_run", 3e-4, 7, 2, 3)
    assert BCConfig(max_steps=5).method == "bc"
    with pytest.raises(ValueError, match="num_generations=...\\): TRL's num_generations means group_size, which "
                                         "DTConfig does not have"):
        DTConfig(num_generations=4)


def test_dt_trainer_on_a_minari_dataset_object_then_resume_and_save(tmp_path, drift):
    import minari

    path = _minari(tmp_path, drift)
    dataset = minari.MinariDataset(path / "data")
    args = DTConfig(output_dir=str(tmp_path / "dt"), max_steps=3, logging_steps=1, **SMALL)
    trainer = DTTrainer(args=args, train_dataset=dataset)
    metrics = trainer.train()
    run = tmp_path / "dt"
    assert "eval/return/5" in metrics
    assert yaml.safe_load((run / "config.yaml").read_text())["data"]["dataset"] == str(path)
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl") if "loss/action" in r] == [1, 2, 3]
    assert isinstance(trainer.model, DecisionTransformer)

    # resume from Python, as --resume: the run goes on from checkpoint-3
    longer = DTTrainer(args=DTConfig(output_dir=str(run), max_steps=5, logging_steps=1, **SMALL), train_dataset=str(path))
    longer.train(resume_from_checkpoint=True)
    assert (run / "checkpoint-5").is_dir()

    # save_model writes what `seqrl eval dt --checkpoint` loads: the last checkpoint's weights
    from seqrl.models.loading import load_policy_checkpoint

    out = longer.save_model(str(tmp_path / "saved"))
    loaded, info = load_policy_checkpoint(out)
    assert info["method"] == "dt"
    for a, b in zip(loaded.state_dict().values(), longer.model.state_dict().values()):
        assert torch.equal(a, b)


def test_bc_trainer_names_an_auto_run_after_the_dataset_given(tmp_path, drift):
    path = _minari(tmp_path, drift)
    args = BCConfig(max_steps=2, **SMALL)
    args.run.out_dir = str(tmp_path)
    trainer = DTTrainer(args=args, train_dataset=str(path))
    assert trainer.args.run.name == f"bc_{str(path).strip('/').replace('/', '-').replace('_', '-')}_s0"
    trainer.train()
    assert isinstance(trainer.model, MLPPolicy)


def test_dt_trainer_refuses_what_it_cannot_record():
    from seqrl.data.minari_data import quick_dataset

    with pytest.raises(TypeError, match="write_minari"):
        DTTrainer(train_dataset=quick_dataset(n_steps=400))
