"""seqrl train vla / seqrl eval vla: checkpoints, exact resume, held-out evaluation, bad input named."""

from __future__ import annotations

import json

import numpy as np
import pytest
import safetensors.torch
import torch

from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.algos.vla import VLAConfig, VLADaggerConfig, VLADataConfig, VLAEvalConfig, load_demos, train
from seqrl.config import load_config
from seqrl.envs.babyai import evaluate_babyai, random_act
from seqrl.models.vla import VLAModelConfig

TINY = VLAModelConfig(hidden_size=16, n_layer=1, n_head=2, context_len=3, n_fusion=1, dropout=0.1)


def _cfg(tmp_path, steps: int, name: str = "r", resume: bool = False, episodes: int = 0) -> VLAConfig:
    return VLAConfig(run=RunConfig(name=name, out_dir=str(tmp_path), seed=1, log_every=2, save_every=3,
                                   progress=False, resume=resume),
                     data=VLADataConfig(dataset="quick:GoToRedBallGrey", quick_episodes=12),
                     model=TINY, optim=OptimConfig(lr=3e-3, warmup_steps=2),
                     eval=VLAEvalConfig(episodes=episodes, strip=True), steps=steps, batch_size=8)


def _interrupt_at_step(on_nth_call, vla, n: int, run) -> None:
    """`run()` with a KeyboardInterrupt raised in the loss of its `n`-th step."""

    def interrupt():
        raise KeyboardInterrupt

    with on_nth_call.monkeypatch.context() as patch:
        on_nth_call(vla, "action_loss", n, interrupt, patch)
        with pytest.raises(KeyboardInterrupt):
            run()


def test_resume_after_interrupt_repeats_an_uninterrupted_run_exactly(tmp_path, on_nth_call):
    import seqrl.algos.vla as vla
    from seqrl.utils.checkpoint import latest_checkpoint
    from seqrl.utils.metrics import read_metrics

    train(_cfg(tmp_path, 6, "straight"))
    _interrupt_at_step(on_nth_call, vla, 5, lambda: train(_cfg(tmp_path, 6, "cut")))
    assert latest_checkpoint(tmp_path / "cut").name == "checkpoint-3"
    train(_cfg(tmp_path, 6, "cut", resume=True))
    a = safetensors.torch.load_file(tmp_path / "straight" / "checkpoint-6" / "model.safetensors")
    b = safetensors.torch.load_file(tmp_path / "cut" / "checkpoint-6" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    first = safetensors.torch.load_file(tmp_path / "cut" / "checkpoint-3" / "model.safetensors")
    assert any(not torch.equal(a[k], first[k]) for k in a)  # training moved the weights after the resume
    losses = lambda run: [(r["step"], r["loss/action"]) for r in read_metrics(tmp_path / run / "metrics.jsonl")
                          if "loss/action" in r]
    assert losses("straight") == losses("cut")


def test_training_writes_metrics_plots_strip_and_evaluates_held_out(tmp_path, capsys):
    from seqrl.cli import main
    from seqrl.utils.metrics import read_metrics

    final = train(_cfg(tmp_path, 4, "ev", episodes=6))
    run = tmp_path / "ev"
    records = read_metrics(run / "metrics.jsonl")
    assert 0 <= records[0]["eval/random_success_rate"] <= 1 and records[0]["data/episodes"] == 12
    assert 0 <= final["eval/success_rate"] <= 1 and final["eval/episodes"] == 6
    assert (run / "plots" / "vla.png").stat().st_size > 0 and (run / "plots" / "episode.png").stat().st_size > 0
    assert main(["eval", "vla", "--checkpoint", str(run / "checkpoint-4"), "--episodes", "6", "--strip",
                 "--device", "cpu", "--out", str(tmp_path / "out.json")]) == 0
    saved = json.loads((tmp_path / "out.json").read_text())
    assert saved["metrics"]["eval/success_rate"] == final["eval/success_rate"]  # same held-out layouts, greedy
    assert saved["device"] == "cpu" and saved["temperature"] == 0
    sampled = []
    for k in range(2):  # sampled actions: reproducible from --seed
        assert main(["eval", "vla", "--checkpoint", str(run / "checkpoint-4"), "--episodes", "6", "--temperature", "1",
                     "--device", "cpu", "--out", str(tmp_path / f"t{k}.json")]) == 0
        sampled.append(json.loads((tmp_path / f"t{k}.json").read_text()))
    assert sampled[0]["metrics"] == {**sampled[1]["metrics"], "perf/eval_s": sampled[0]["metrics"]["perf/eval_s"]}
    assert sampled[0]["temperature"] == 1.0
    with pytest.raises(ValueError, match="eval.temperature"):
        VLAEvalConfig(temperature=-0.5)
    assert main(["eval", "vla", "--checkpoint", str(run / "checkpoint-4"), "--device", "tpu"]) == 2
    assert "--device" in capsys.readouterr().err
    assert (tmp_path / "out.png").is_file()
    assert main(["eval", "vla", "--checkpoint", str(tmp_path / "nope")]) == 2
    assert "--checkpoint" in capsys.readouterr().err


def test_evaluation_layouts_are_never_demonstration_layouts():
    demos = load_demos(VLADataConfig(dataset="quick:GoToRedBallGrey", quick_episodes=30))
    result, _ = evaluate_babyai(random_act(0), "GoToRedBallGrey", episodes=30, seed=0)
    assert not set(result.reset_seeds) & set(demos.metadata["reset_seeds"])
    again, _ = evaluate_babyai(random_act(0), "GoToRedBallGrey", episodes=30, seed=0)
    assert np.array_equal(result.success, again.success) and result.reset_seeds == again.reset_seeds


def test_cli_train_vla_and_config_errors(tmp_path, capsys, monkeypatch):
    from seqrl.cli import main

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))  # the preset's dataset is not there

    args = ["train", "vla", "--config", "vla/gotoredballgrey", "--data.dataset=quick:GoToRedBallGrey",
            "--data.quick_episodes=8", "--steps=2", "--batch_size=4", "--model.hidden_size=16", "--model.n_layer=1",
            "--eval.episodes=0", f"--run.out_dir={tmp_path}", "--run.progress=false"]
    assert main(args) == 0
    assert (tmp_path / "vla_gotoredballgrey_s0" / "checkpoint-2" / "model.safetensors").is_file()
    assert main([*args, "--model.fusion=concat"]) == 2
    assert "model.fusion" in capsys.readouterr().err
    assert main([*args[:4], f"--run.out_dir={tmp_path / 'x'}"]) == 2
    assert "seqrl data babyai" in capsys.readouterr().err  # the preset's dataset is not built here
    with pytest.raises(ValueError, match="data.max_episodes"):
        load_demos(VLADataConfig(dataset="quick:GoToRedBallGrey", quick_episodes=3, max_episodes=5))
    from seqrl.cli import resolve_config

    gotolocal = load_config(VLAConfig, resolve_config("gotolocal", "vla"))
    assert gotolocal.data.dataset.startswith("seqrl/babyai/GoToLocal")


def test_datasets_that_are_not_babyai_demonstrations_are_refused_by_name(tmp_path):
    from seqrl.data.offline import DatasetError, OfflineDataset

    demos = load_demos(VLADataConfig(dataset="quick:GoToRedBallGrey", quick_episodes=3))
    bare = OfflineDataset(demos.episodes, env_id=demos.env_id, discrete=True, action_dim=7, name="bare")
    with pytest.raises(DatasetError, match="bare: no mission list"):
        train(_cfg(tmp_path, 1, "bare"), bare)
    other = OfflineDataset(demos.episodes, env_id="Pendulum-v1", discrete=True, action_dim=7, name="pend")
    with pytest.raises(DatasetError, match="pend: not a BabyAI dataset"):
        train(_cfg(tmp_path, 1, "pend"), other)


def _dagger_cfg(tmp_path, name: str, resume: bool = False) -> VLAConfig:
    cfg = _cfg(tmp_path, 8, name, resume)
    cfg.dagger = VLADaggerConfig(every=3, episodes=4)  # rounds after steps 3 and 6
    cfg.run.save_every = 4
    return cfg


def test_dagger_rounds_add_bot_labelled_states_and_resume_trains_on_the_same_data(tmp_path, on_nth_call):
    import seqrl.algos.vla as vla
    from seqrl.data.babyai import load_episodes
    from seqrl.utils.metrics import read_metrics

    train(_dagger_cfg(tmp_path, "straight"))
    run = tmp_path / "straight"
    rounds = sorted(p.name for p in (run / "dagger").iterdir())
    assert rounds == ["round-0000003.npz", "round-0000006.npz"]
    records = [r for r in read_metrics(run / "metrics.jsonl") if "dagger/episodes" in r]
    assert [r["step"] for r in records] == [4, 7]  # logged with the first step trained on the round
    first = records[0]
    base = read_metrics(run / "metrics.jsonl")[0]["data/steps"]
    added = sum(len(e.labels) for e in load_episodes(run / "dagger" / rounds[0]))
    assert first["dagger/round_steps"] == added > 0 and first["data/steps"] == base + added
    assert records[1]["data/steps"] > first["data/steps"] and records[1]["dagger/episodes"] == 8
    assert 0 <= first["dagger/disagreement"] <= 1 and 0 <= first["dagger/success_rate"] <= 1

    # interrupted in step 7: after the checkpoint at 4 and the round at 6
    _interrupt_at_step(on_nth_call, vla, 7, lambda: train(_dagger_cfg(tmp_path, "cut")))
    cut = tmp_path / "cut"
    (cut / "dagger" / "round-0000006.npz").unlink()  # collected after the checkpoint: the resume collects it again
    train(_dagger_cfg(tmp_path, "cut", resume=True))
    a = safetensors.torch.load_file(run / "checkpoint-8" / "model.safetensors")
    b = safetensors.torch.load_file(cut / "checkpoint-8" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for name in rounds:
        x, y = load_episodes(run / "dagger" / name), load_episodes(cut / "dagger" / name)
        assert [e.labels.tolist() for e in x] == [e.labels.tolist() for e in y]

    # a round before the resumed checkpoint cannot be collected again: its loss is named
    (cut / "dagger" / "round-0000003.npz").unlink()
    cfg = _dagger_cfg(tmp_path, "cut", resume=True)
    cfg.steps = 8
    import shutil

    shutil.rmtree(cut / "checkpoint-8")
    with pytest.raises(ValueError, match="round-0000003.npz"):
        train(cfg)
    with pytest.raises(ValueError, match="dagger.beta"):
        VLADaggerConfig(beta=2.0)
