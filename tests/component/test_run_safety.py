"""What a run does with interruptions and bad turns: resume overrides, corrupted checkpoints, divergence,
bugs in a loop, progress off a terminal."""

from __future__ import annotations

import io

import pytest
import yaml

from seqrl.cli import main


def _sft(tmp_path, *extra):
    return ["train", "sft", "--config", "arith_tiny", f"--run.out_dir={tmp_path}", "--run.name=r",
            "--run.progress=false", "--task.n_train=32", "--task.n_test=2", "--eval.every=0",
            "--eval.max_new_tokens=2", "--batch_size=4", "--optim.warmup_steps=1", "--run.save_every=1",
            "--run.keep_last=3", *extra]


def test_resume_applies_a_longer_run_and_refuses_a_changed_lr(tmp_path, capsys):
    assert main(_sft(tmp_path, "--steps=2")) == 0
    saved = (tmp_path / "r" / "config.yaml").read_text()
    capsys.readouterr()
    assert main(_sft(tmp_path, "--steps=2", "--optim.lr=5e-4", "--resume")) == 2
    err = capsys.readouterr().err
    assert "optim.lr: cannot change on --resume" in err and err.count("\n") == 1
    assert (tmp_path / "r" / "config.yaml").read_text() == saved  # the file still says what was trained
    assert main(_sft(tmp_path, "--steps=3", "--run.log_every=5", "--run.device=cpu", "--resume")) == 0
    out = capsys.readouterr().out
    assert "applying changed" in out and "steps: 2 -> 3" in out and "run.log_every: 10 -> 5" in out
    assert "run.device: 'auto' -> 'cpu'" in out  # a run may continue on another device
    cfg = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())
    assert cfg["steps"] == 3 and cfg["run"]["log_every"] == 5 and cfg["optim"]["lr"] == 3e-3
    assert (tmp_path / "r" / "checkpoint-3").is_dir()


def test_a_longer_resumed_run_says_what_happens_to_its_cosine_schedule_and_can_continue_it(tmp_path, capsys):
    """arith_tiny: lr 3e-3, cosine to 0.1 of it, warm-up 1 here; step s takes update s − 1. Step 4 of 4
    ran at 0.1 + 0.45·(1 + cos(2π/3)) = 0.325 (9.75e-4) and a fifth would sit at the floor, 3e-4; resumed
    with --steps=8 the cosine spans 8 (stretched): step 5 runs at 0.1 + 0.45·(1 + cos(3π/7)) = 0.650
    (1.95e-3) — the line says so and names the other choice, --optim.schedule_steps=4, which continues
    the old schedule at its floor."""
    import json
    import math

    def lrs(name):
        rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        return {r["step"]: r["stats/lr"] for r in rows if "stats/lr" in r}

    stretched = 3e-3 * (0.1 + 0.45 * (1 + math.cos(3 * math.pi / 7)))
    for name, extra in (("stretch", []), ("keep", ["--optim.schedule_steps=4"])):
        args = [a.replace("--run.name=r", f"--run.name={name}") for a in _sft(tmp_path, "--run.log_every=1")]
        assert main([*args, "--steps=4"]) == 0
        assert lrs(name)[4] == pytest.approx(9.75e-4, rel=1e-9)
        capsys.readouterr()
        assert main([*args, "--steps=8", "--resume", *extra]) == 0
        out = " ".join(capsys.readouterr().out.split())
        if name == "stretch":
            assert (f"the learning rate of step 5 goes from 0.0003 to {stretched:.3g}" in out
                    and "--optim.schedule_steps=4" in out)
            assert lrs(name)[5] == pytest.approx(stretched, rel=1e-9)
        else:
            assert "learning rate goes from" not in out and "optim.schedule_steps: 0 -> 4" in out
            assert all(lrs(name)[s] == pytest.approx(3e-4, rel=1e-9) for s in (5, 6, 7, 8))


def test_resume_falls_back_from_a_corrupted_newest_checkpoint(tmp_path, capsys):
    assert main(_sft(tmp_path, "--steps=2")) == 0
    weights = tmp_path / "r" / "checkpoint-2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # cut short
    capsys.readouterr()
    assert main(_sft(tmp_path, "--steps=3", "--resume")) == 0
    out = capsys.readouterr().out
    assert "skipping checkpoint-2" in out and "model.safetensors" in out
    assert "resumed from" in out and "checkpoint-1 at step 1" in out
    assert (tmp_path / "r" / "checkpoint-3").is_dir()


def test_resume_with_every_checkpoint_corrupted_is_a_one_line_error(tmp_path, capsys):
    assert main(_sft(tmp_path, "--steps=1")) == 0
    (tmp_path / "r" / "checkpoint-1" / "optimizer.pt").write_bytes(b"garbage")
    capsys.readouterr()
    assert main(_sft(tmp_path, "--steps=2", "--resume")) == 2
    assert "no checkpoint could be loaded" in capsys.readouterr().err


def test_non_finite_stops_or_skips():
    from seqrl.training.run import NonFiniteError, check_finite

    assert check_finite(3, "stop", loss=1.0, grad_norm=2.0)
    with pytest.raises(NonFiniteError, match="step 7: non-finite loss = nan"):
        check_finite(7, "stop", loss=float("nan"), grad_norm=1.0)
    assert not check_finite(7, "skip_step", loss=1.0, grad_norm=float("inf"))
    from seqrl.algos.config import RunConfig

    with pytest.raises(ValueError, match="'stop' or 'skip_step' \\(got 'warn'\\) \\(warn was removed"):
        RunConfig(on_nonfinite="warn")


def test_a_value_error_inside_a_training_loop_keeps_its_traceback(tmp_path, monkeypatch):
    import seqrl.algos.sft as sft

    def broken(*args, **kwargs):
        raise ValueError("a bug in the loop")

    monkeypatch.setattr(sft, "accumulate_gradients", broken)
    with pytest.raises(ValueError, match="a bug in the loop"):
        main(_sft(tmp_path, "--steps=1"))


def test_plain_progress_lines_off_a_terminal():
    from seqrl.utils.progress import PlainProgress

    stream = io.StringIO()
    bar = PlainProgress(10, "sft r", every_s=0.0, stream=stream)
    bar.advance(1, loss=0.5)
    bar.advance(0, loss=0.25)  # a field update alone writes nothing
    bar.advance(1)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("sft r: 1/10 (10%)") and "loss=0.5" in lines[0]
    assert lines[1].startswith("sft r: 2/10 (20%)") and "loss=0.25" in lines[1]
    bar.finish()  # the closing line would repeat the last one: not written
    assert len(stream.getvalue().splitlines()) == 2
    bar.advance(0, acc=0.85)  # an evaluation after the last step: the closing line shows it
    bar.finish()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3 and lines[2].startswith("sft r: 2/10 (20%)") and "acc=0.85" in lines[2]


@pytest.mark.parametrize("algo,preset", [("sft", "arith_tiny"), ("grpo", "arith_tiny_dapo"), ("dt", "pendulum_medium_expert"),
                                         ("odt", "pendulum_medium"), ("prm", "arith_tiny_prm"), ("rm", "arith_tiny_rm"),
                                         ("ppo", "arith_tiny_ppo"), ("star", "arith_tiny_star"), ("vla", "gotoredballgrey")])
def test_an_unchanged_preset_resumes_without_a_reported_change(tmp_path, algo, preset):
    from seqrl.training.run import check_resume_changes
    from seqrl.cli import _config_class, resolve_config
    from seqrl.config import dump_yaml, load_config

    cls = _config_class(algo)
    cfg = load_config(cls, resolve_config(preset, algo), [], root=algo)
    dump_yaml(cfg, tmp_path / "config.yaml")
    assert check_resume_changes(tmp_path / "config.yaml", cfg) == []


def test_a_renamed_or_copied_run_folder_resumes_under_its_new_name(tmp_path, capsys):
    import shutil

    assert main(_sft(tmp_path, "--steps=2")) == 0
    shutil.copytree(tmp_path / "r", tmp_path / "elsewhere" / "copy")
    (tmp_path / "r").rename(tmp_path / "renamed")
    capsys.readouterr()
    renamed = [a.replace("--run.name=r", "--run.name=renamed") for a in _sft(tmp_path, "--steps=3", "--resume")]
    assert main(renamed) == 0
    out = capsys.readouterr().out
    assert "run.name: 'r' -> 'renamed'" in out and "checkpoint-2" in out
    assert (tmp_path / "renamed" / "checkpoint-3").is_dir()
    assert yaml.safe_load((tmp_path / "renamed" / "config.yaml").read_text())["run"]["name"] == "renamed"
    copied = [a.replace(f"--run.out_dir={tmp_path}", f"--run.out_dir={tmp_path / 'elsewhere'}")
              .replace("--run.name=r", "--run.name=copy") for a in _sft(tmp_path, "--steps=3", "--resume")]
    assert main(copied) == 0
    assert (tmp_path / "elsewhere" / "copy" / "checkpoint-3").is_dir()
    # both continued the same run: the same weights at step 3
    a = (tmp_path / "renamed" / "checkpoint-3" / "model.safetensors").read_bytes()
    b = (tmp_path / "elsewhere" / "copy" / "checkpoint-3" / "model.safetensors").read_bytes()
    assert a == b
