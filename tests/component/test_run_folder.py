"""A run folder loses nothing: no non-finite checkpoint, one process per folder, a save on SIGTERM/SIGINT,
verified checkpoints, one-line disk errors, a resume that writes only once validated.

Every run is a few steps of a tiny preset through `seqrl.cli.main` (in-process; signals are sent to this
process, so the real handlers run); only the lock test starts a second process.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import safetensors.torch
import torch

from seqrl.cli import main
from seqrl.utils.checkpoint import list_checkpoints, verify_checkpoint
from seqrl.utils.metrics import read_metrics

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _argv(algo: str, out, *extra: str) -> list[str]:
    common = [f"--run.out_dir={out}", "--run.name=r", "--run.progress=false", "--optim.warmup_steps=0",
              "--run.save_every=1", "--run.keep_last=10"]
    if algo == "sft":
        return ["train", "sft", "--config", "arith_tiny", *common, "--task.n_train=32", "--task.n_test=2",
                "--eval.every=0", "--eval.max_new_tokens=2", "--batch_size=4", *extra]
    if algo == "grpo":
        return ["train", "grpo", "--config", "arith_tiny_grpo", "--model.path=null", *common, "--task.n_train=32",
                "--task.n_test=2", "--eval.every=0", "--eval.samples=0", "--eval.max_new_tokens=2",
                "--sampling.max_new_tokens=4", "--batch_size=8", "--micro_batch_size=8", "--group_size=4", *extra]
    if algo == "odt":
        return ["train", "odt", "--config", "pendulum_medium", "--data.quick_steps=2000", *common, "--batch_size=4",
                "--model.hidden_size=16", "--model.n_layer=1", "--eval.episodes=0", "--pretrain_steps=2",
                "--online.rollouts=1", "--online.updates=2", "--online.max_steps=20", *extra]
    assert algo == "dt"
    return ["train", "dt", "--config", "pendulum_medium_expert", "--data.quick_steps=2000", *common, "--batch_size=4",
            "--model.hidden_size=16", "--model.n_layer=1", "--eval.episodes=0", *extra]


def _weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return safetensors.torch.load_file(checkpoint / "model.safetensors")


def _losses(run: Path) -> list[tuple[int, list]]:
    keys = ("loss/sft", "loss/action", "loss/policy")
    return [(r["step"], [r.get(k) for k in keys]) for r in read_metrics(run / "metrics.jsonl") if any(k in r for k in keys)]


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("seqrl:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# 1. non-finite ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("algo", ["sft", "grpo", "dt"])
def test_a_diverging_run_stops_naming_the_step_and_keeps_its_last_finite_checkpoint(tmp_path, capsys, algo):
    # keep_last=1: a diverged checkpoint, had it been written, would have pruned the finite one
    assert main(_argv(algo, tmp_path, "--steps=8", "--optim.lr=1e6", "--optim.grad_clip=0", "--run.keep_last=1")) == 2
    line = _one_line(capsys.readouterr().err)
    found = list_checkpoints(tmp_path / "r")
    assert len(found) == 1, found
    step, last = found[0]
    assert f"step {step + 1}: non-finite" in line and f"newest complete checkpoint: {last}" in line
    assert "run.on_nonfinite=skip_step" in line
    assert all(bool(torch.isfinite(t).all()) for t in _weights(last).values())
    verify_checkpoint(last)


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")
def test_weights_that_turn_non_finite_under_a_finite_loss_are_never_saved(tmp_path, capsys, monkeypatch):
    import seqrl.algos.sft as sft

    real = sft.make_optimizer

    def poisoned(model, *args, **kwargs):
        optimizer, scheduler = real(model, *args, **kwargs)
        step = optimizer.step

        def step_then_poison(*a, **k):
            out = step(*a, **k)
            if scheduler.last_epoch == 2:  # the third update: the loss it followed was finite
                with torch.no_grad():
                    next(model.parameters()).view(-1)[0] = float("inf")
            return out

        optimizer.step = step_then_poison
        return optimizer, scheduler

    monkeypatch.setattr(sft, "make_optimizer", poisoned)
    assert main(_argv("sft", tmp_path, "--steps=5", "--run.keep_last=1")) == 2
    line = _one_line(capsys.readouterr().err)
    assert "checkpoint-3 not written: 1 of" in line and "weights are NaN or infinite" in line
    assert f"newest complete checkpoint: {tmp_path / 'r' / 'checkpoint-2'}" in line
    assert [s for s, _ in list_checkpoints(tmp_path / "r")] == [2]


def test_skip_step_skips_the_update_and_counts_it(tmp_path, monkeypatch):
    import seqrl.algos.sft as sft

    real, calls = sft.accumulate_gradients, []

    def nan_on_second(model, chunks, *args, **kwargs):
        loss, tokens = real(model, chunks, *args, **kwargs)
        calls.append(1)
        return (float("nan"), tokens) if len(calls) == 2 else (loss, tokens)

    monkeypatch.setattr(sft, "accumulate_gradients", nan_on_second)
    assert main(_argv("sft", tmp_path, "--steps=3", "--run.on_nonfinite=skip_step", "--run.log_every=1")) == 0
    run = tmp_path / "r"
    skipped = {r["step"]: r["stats/skipped_updates"] for r in read_metrics(run / "metrics.jsonl") if "stats/skipped_updates" in r}
    assert skipped == {1: 0, 2: 1, 3: 1}
    first, second = _weights(run / "checkpoint-1"), _weights(run / "checkpoint-2")
    assert all(torch.equal(first[k], second[k]) for k in first)  # the skipped update changed nothing
    assert json.loads((run / "checkpoint-3" / "trainer_state.json").read_text())["skipped_updates"] == 1


def test_grpo_skip_step_skips_the_update_and_counts_it(tmp_path, monkeypatch):
    import seqrl.algos.grpo as grpo

    real, calls = grpo.grpo_loss, []

    def nan_on_second(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        calls.append(1)
        return (loss * float("nan"), stats) if len(calls) == 2 else (loss, stats)

    monkeypatch.setattr(grpo, "grpo_loss", nan_on_second)
    assert main(_argv("grpo", tmp_path, "--steps=3", "--run.on_nonfinite=skip_step", "--run.log_every=1")) == 0
    assert len(calls) == 3  # one update per step here
    run = tmp_path / "r"
    skipped = {r["step"]: r["stats/skipped_updates"] for r in read_metrics(run / "metrics.jsonl") if "stats/skipped_updates" in r}
    assert skipped == {1: 0, 2: 1, 3: 1}
    first, second, third = (_weights(run / f"checkpoint-{s}") for s in (1, 2, 3))
    assert all(torch.equal(first[k], second[k]) for k in first)  # the skipped update changed nothing
    assert not all(torch.equal(second[k], third[k]) for k in first)  # the next one did


def test_warn_is_refused_naming_its_replacement(tmp_path, capsys):
    assert main(_argv("sft", tmp_path, "--steps=1", "--run.on_nonfinite=warn")) == 2
    assert "run.on_nonfinite: expected one of 'stop', 'skip_step'" in _one_line(capsys.readouterr().err)


def test_resume_on_a_folder_that_is_not_a_run_leaves_it_untouched(tmp_path, capsys):
    """It once created the folder, or left a run.lock in someone's folder, before saying there was nothing."""
    other = tmp_path / "r"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(_argv("sft", tmp_path, "--steps=1", "--resume")) == 2
    assert "(not a run folder)" in _one_line(capsys.readouterr().err)
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    assert main(_argv("sft", tmp_path / "none", "--steps=1", "--resume")) == 2
    assert "(no such folder)" in _one_line(capsys.readouterr().err) and not (tmp_path / "none").exists()


# 2. one process per run folder ------------------------------------------------------------------------

def test_a_second_process_on_a_run_folder_is_refused_naming_the_holder(tmp_path, capsys):
    assert main(_argv("sft", tmp_path, "--steps=2")) == 0
    run = tmp_path / "r"
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from pathlib import Path
            from seqrl.training.run import lock_run_dir
            lock_run_dir(Path({str(run)!r}))
            print("locked", flush=True)
            time.sleep(120)
        """)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": SRC})
    try:
        assert holder.stdout.readline().strip() == "locked"
        capsys.readouterr()
        assert main(_argv("sft", tmp_path, "--steps=3", "--resume")) == 2
        line = _one_line(capsys.readouterr().err)
        assert f"in use by another run (process {holder.pid} holds" in line
        assert main(_argv("sft", tmp_path, "--steps=3", "--run.name=r")) == 2  # a fresh run too, before any check
        assert f"process {holder.pid}" in _one_line(capsys.readouterr().err)
        after = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
        assert after == {**before, "run.lock": after["run.lock"]}  # config and metrics untouched
        assert [s for s, _ in list_checkpoints(run)] == [1, 2]
    finally:
        holder.kill()  # SIGKILL: the OS drops the lock, no stale lock file blocks the next run
        holder.wait()
    assert main(_argv("sft", tmp_path, "--steps=3", "--resume")) == 0
    assert (run / "checkpoint-3").is_dir()


# 3. pre-emption -------------------------------------------------------------------------------------

def _signal_at(on_nth_call, patch, algo: str, at: int, *signums: int) -> None:
    """Send `signums` to this process during step `at` (1-based) of the next run."""
    import seqrl.algos.dt as dt
    import seqrl.algos.grpo as grpo
    import seqrl.algos.sft as sft

    owner, name = {"sft": (sft, "accumulate_gradients"), "dt": (dt, "action_loss"),
                   "grpo": (grpo.GRPOLearner, "train_step")}[algo]
    on_nth_call(owner, name, at, lambda: [os.kill(os.getpid(), signum) for signum in signums], patch)


@pytest.mark.parametrize("algo,signum,code", [("sft", signal.SIGTERM, 143), ("sft", signal.SIGINT, 130),
                                              ("grpo", signal.SIGTERM, 143), ("dt", signal.SIGTERM, 143)])
def test_a_signal_saves_the_step_reached_and_resume_repeats_an_uninterrupted_run(tmp_path, capsys, monkeypatch,
                                                                                 on_nth_call, algo, signum, code):
    steps = ["--steps=4", "--run.save_every=0", "--run.log_every=1"]
    assert main(_argv(algo, tmp_path / "whole", *steps)) == 0
    with monkeypatch.context() as patch:
        _signal_at(on_nth_call, patch, algo, 2, signum)
        capsys.readouterr()
        assert main(_argv(algo, tmp_path / "cut", *steps)) == code
    run = tmp_path / "cut" / "r"
    line = _one_line(capsys.readouterr().err)
    assert f"stopped by {signal.Signals(signum).name} after step 2; newest complete checkpoint: {run / 'checkpoint-2'}" in line
    assert [s for s, _ in list_checkpoints(run)] == [2]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    assert main(_argv(algo, tmp_path / "cut", *steps, "--resume")) == 0
    whole, resumed = _weights(tmp_path / "whole" / "r" / "checkpoint-4"), _weights(run / "checkpoint-4")
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
    assert _losses(run) == _losses(tmp_path / "whole" / "r") and len(_losses(run)) == 4


def test_a_signal_during_online_odt_saves_after_that_iteration_and_resume_repeats_the_run(tmp_path, capsys,
                                                                                         monkeypatch, on_nth_call):
    import seqrl.algos.odt as odt

    steps = ["--online.iterations=3", "--run.save_every=0", "--run.log_every=1"]
    assert main(_argv("odt", tmp_path / "whole", *steps)) == 0
    with monkeypatch.context() as patch:
        # during online iteration 2: it finishes (step 2 + 2·2), then the run stops
        on_nth_call(odt, "collect_rollouts", 2, lambda: os.kill(os.getpid(), signal.SIGTERM), patch)
        capsys.readouterr()
        assert main(_argv("odt", tmp_path / "cut", *steps)) == 143
    run = tmp_path / "cut" / "r"
    assert f"stopped by SIGTERM after step 6; newest complete checkpoint: {run / 'checkpoint-6'}" in _one_line(
        capsys.readouterr().err)
    assert main(_argv("odt", tmp_path / "cut", *steps, "--resume")) == 0
    whole, resumed = _weights(tmp_path / "whole" / "r" / "checkpoint-8"), _weights(run / "checkpoint-8")
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
    assert _losses(run) == _losses(tmp_path / "whole" / "r")


def _stop_worker(rank: int, world: int, port: int, out: str) -> None:
    """One torchrun-like process of a 4-step SFT run; only rank 1 gets SIGTERM, during step 2."""
    import seqrl.algos.sft as sft
    from seqrl.training.run import RunInterrupted
    from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
    from seqrl.models import ModelConfig

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    real, calls = sft.accumulate_gradients, []

    def hooked(*args, **kwargs):
        calls.append(1)
        if rank == 1 and len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    sft.accumulate_gradients = hooked
    cfg = sft.SFTConfig(run=RunConfig(name="r", out_dir=out, progress=False, device="cpu", bf16=False),
                        model=ModelConfig(preset="tiny", max_seq_len=64), task=TaskConfig(n_train=32, n_test=2),
                        optim=OptimConfig(warmup_steps=0), eval=sft.EvalConfig(max_new_tokens=2), steps=4, batch_size=4)
    try:
        sft.train(cfg)
        result = "finished"
    except RunInterrupted as e:
        result = f"{e.exit_code} {e.message}"
    Path(out, f"rank{rank}.txt").write_text(result)


def test_under_torchrun_a_signal_to_one_process_stops_every_process_at_the_same_step(tmp_path):
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_stop_worker, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    results = [(tmp_path / f"rank{r}.txt").read_text() for r in (0, 1)]
    for result in results:
        assert result.startswith("143 stopped by SIGTERM after step 2; newest complete checkpoint:"), results
    assert [s for s, _ in list_checkpoints(tmp_path / "r")] == [2]
    verify_checkpoint(tmp_path / "r" / "checkpoint-2")


def test_a_second_signal_stops_at_once_and_says_no_checkpoint_exists(tmp_path, capsys, monkeypatch, on_nth_call):
    _signal_at(on_nth_call, monkeypatch, "sft", 2, signal.SIGTERM, signal.SIGTERM)
    assert main(_argv("sft", tmp_path, "--steps=4", "--run.save_every=0")) == 143
    line = _one_line(capsys.readouterr().err)
    assert "stopped at once by a second SIGTERM; no complete checkpoint in" in line
    assert not [p for p in (tmp_path / "r").iterdir() if p.name.startswith("checkpoint")]  # nothing half-written


# 4. verified checkpoints ----------------------------------------------------------------------------

def _flip(file: Path) -> None:
    data = bytearray(file.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 4096] = bytes(b ^ 0x5A for b in data[middle:middle + 4096])  # same length, other bytes
    file.write_bytes(bytes(data))


def test_flipped_bytes_are_detected_on_resume_and_on_eval(tmp_path, capsys):
    assert main(_argv("sft", tmp_path, "--steps=2")) == 0
    run = tmp_path / "r"
    _flip(run / "checkpoint-2" / "model.safetensors")
    capsys.readouterr()
    assert main(["eval", str(run / "checkpoint-2"), "--task", "arith", "--n", "2", "--max-new-tokens", "2"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "checkpoint-2/model.safetensors: checksum mismatch" in line
    assert main(_argv("sft", tmp_path, "--steps=3", "--resume")) == 0
    out = capsys.readouterr().out
    assert "skipping checkpoint-2" in out and "checksum mismatch" in out and "checkpoint-1 at step 1" in out


def test_an_unrecorded_file_in_a_checkpoint_is_refused_on_resume_and_on_eval(tmp_path, capsys):
    """An added shard and index would make checkpoint-2 resume with checkpoint-1's weights."""
    assert main(_argv("sft", tmp_path, "--steps=2")) == 0
    run = tmp_path / "r"
    weights = _weights(run / "checkpoint-1")
    safetensors.torch.save_file(weights, str(run / "checkpoint-2" / "model-00001-of-00001.safetensors"))
    index = {"weight_map": dict.fromkeys(weights, "model-00001-of-00001.safetensors")}
    (run / "checkpoint-2" / "model.safetensors.index.json").write_text(json.dumps(index))
    capsys.readouterr()
    assert main(["eval", str(run / "checkpoint-2"), "--task", "arith", "--n", "2", "--max-new-tokens", "2"]) == 2
    assert "checkpoint-2/model-00001-of-00001.safetensors: not recorded" in _one_line(capsys.readouterr().err)
    assert main(_argv("sft", tmp_path, "--steps=3", "--resume")) == 0
    out = capsys.readouterr().out
    assert "skipping checkpoint-2" in out and "not recorded" in out and "checkpoint-1 at step 1" in out


def test_a_run_starting_from_a_changed_checkpoint_is_refused(tmp_path, capsys):
    assert main(_argv("sft", tmp_path / "sft", "--steps=1")) == 0
    checkpoint = tmp_path / "sft" / "r" / "checkpoint-1"
    _flip(checkpoint / "model.safetensors")
    capsys.readouterr()
    argv = _argv("grpo", tmp_path / "grpo", "--steps=1")
    argv[argv.index("--model.path=null")] = f"--model.path={checkpoint}"
    assert main(argv) == 2
    assert "checkpoint-1/model.safetensors: checksum mismatch" in _one_line(capsys.readouterr().err)


def test_flipped_bytes_in_a_dt_checkpoint_are_detected_on_eval(tmp_path, capsys):
    assert main(_argv("dt", tmp_path, "--steps=1")) == 0
    checkpoint = tmp_path / "r" / "checkpoint-1"
    _flip(checkpoint / "optimizer.pt")
    capsys.readouterr()
    assert main(["eval", "dt", "--checkpoint", str(checkpoint), "--episodes", "1"]) == 2
    assert "optimizer.pt: checksum mismatch" in _one_line(capsys.readouterr().err)


# 5. disk and permissions ----------------------------------------------------------------------------

@pytest.fixture
def tmpfs(tmp_path):
    """Mount a small tmpfs (root only); yields a function that mounts it with the given options."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mounted = []

    def mount(options: str) -> Path:
        command = ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)]
        if mounted:
            command = ["mount", "-o", f"remount,{options}", str(mnt)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(True)
        return mnt

    yield mount
    if mounted:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_is_one_line_and_keeps_the_checkpoints_and_resume_repeats_the_run(tmp_path, tmpfs, capsys):
    mnt = tmpfs("size=16m")  # room for one tiny-SFT checkpoint (10.5 MB), not two
    steps = ["--steps=3", "--run.log_every=1"]
    assert main(_argv("sft", mnt, *steps)) == 2
    line = _one_line(capsys.readouterr().err)
    run = mnt / "r"
    assert "no space left on device" in line and f"newest complete checkpoint: {run / 'checkpoint-1'}" in line
    assert [p.name for p in run.iterdir() if p.name.startswith("checkpoint")] == ["checkpoint-1"]  # no temporary left
    verify_checkpoint(run / "checkpoint-1")
    tmpfs("size=64m")  # space freed
    assert main(_argv("sft", mnt, *steps, "--resume")) == 0
    assert main(_argv("sft", tmp_path / "whole", *steps)) == 0
    whole, resumed = _weights(tmp_path / "whole" / "r" / "checkpoint-3"), _weights(run / "checkpoint-3")
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)


def test_a_disk_without_room_for_one_checkpoint_is_refused_before_training(tmpfs, capsys):
    mnt = tmpfs("size=4m")
    assert main(_argv("sft", mnt, "--steps=3")) == 2
    line = _one_line(capsys.readouterr().err)
    assert "MiB free, a checkpoint needs about 9.9 MiB" in line
    assert not [r for r in read_metrics(mnt / "r" / "metrics.jsonl") if r["step"] > 0]  # no step was taken


def test_a_read_only_or_unusable_output_folder_is_one_line(tmp_path, tmpfs, capsys):
    mnt = tmpfs("size=1m,ro")
    assert main(_argv("sft", mnt, "--steps=1")) == 2
    assert f"{mnt / 'r'}: cannot write: read-only file system; no complete checkpoint" in _one_line(capsys.readouterr().err)
    (tmp_path / "file").write_text("")
    assert main(_argv("sft", tmp_path / "file", "--steps=1")) == 2
    assert "cannot write: not a directory" in _one_line(capsys.readouterr().err)


def test_an_evaluation_onto_a_full_disk_is_one_line(tmp_path, tmpfs, capsys):
    assert main(_argv("sft", tmp_path, "--steps=1")) == 0
    mnt = tmpfs("size=64k")
    with open(mnt / "filler", "wb", buffering=0) as f, pytest.raises(OSError):
        while True:
            f.write(b"\0" * 4096)
    capsys.readouterr()
    argv = ["eval", str(tmp_path / "r" / "checkpoint-1"), "--task", "arith", "--n", "2", "--max-new-tokens", "2"]
    assert main([*argv, "--out", str(mnt / "e.json")]) == 2
    assert f"{mnt / 'e.json'}: cannot write: No space left on device" in _one_line(capsys.readouterr().err)
    assert not (mnt / "e.json").exists()  # no empty file left behind


def test_the_metrics_logger_names_its_file_on_a_full_disk(tmpfs):
    from seqrl.utils.metrics import MetricsLogger

    mnt = tmpfs("size=1m")
    logger = MetricsLogger(mnt / "metrics.jsonl")
    with open(mnt / "filler", "wb", buffering=0) as f, pytest.raises(OSError):
        while True:
            f.write(b"\0" * 65536)
    with pytest.raises(OSError) as raised:
        for step in range(10_000):
            logger.log(step, {"loss": 1.0})
    assert raised.value.filename == str(mnt / "metrics.jsonl") and "No space left" in raised.value.strerror
    logger.close()  # the unwritten rest is dropped; no second error


# 6. a resume writes nothing until validated ---------------------------------------------------------

def test_a_failed_resume_leaves_config_yaml_unchanged_and_a_good_one_keeps_the_previous(tmp_path, capsys):
    assert main(_argv("sft", tmp_path, "--steps=2")) == 0
    run = tmp_path / "r"
    saved = (run / "config.yaml").read_text()
    for _, path in list_checkpoints(run):
        (path / "optimizer.pt").write_bytes(b"garbage")
    assert main(_argv("sft", tmp_path, "--steps=3", "--resume")) == 2
    assert "no checkpoint could be loaded" in _one_line(capsys.readouterr().err)
    assert (run / "config.yaml").read_text() == saved and not list(run.glob("config.*.yaml"))
    with open(run / "run.lock") as f:  # the failed run released the folder (flock conflicts across descriptors)
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)

    assert main(_argv("sft", tmp_path / "b", "--steps=2")) == 0
    run = tmp_path / "b" / "r"
    saved = (run / "config.yaml").read_text()
    assert main(_argv("sft", tmp_path / "b", "--steps=3", "--resume")) == 0
    assert "steps: 3" in (run / "config.yaml").read_text()
    assert (run / "config.until-checkpoint-2.yaml").read_text() == saved


def test_a_garbage_config_yaml_is_named_not_overwritten(tmp_path, capsys):
    assert main(_argv("sft", tmp_path, "--steps=1")) == 0
    config = tmp_path / "r" / "config.yaml"
    config.write_text("just a sentence, not a config\n")
    capsys.readouterr()
    assert main(_argv("sft", tmp_path, "--steps=2", "--resume")) == 2
    assert f"{config}: not a config" in _one_line(capsys.readouterr().err)
    assert config.read_text() == "just a sentence, not a config\n"
