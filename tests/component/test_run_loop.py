"""The run loop (`seqrl.training.loop.RunLoop`) on a toy trainer: its cadences, the non-finite rule, the
checkpoint state, and stop-then-resume repeating an uninterrupted run — tested once here for every
trainer that runs on it."""

from __future__ import annotations

import json
import math
import os
import signal
from dataclasses import dataclass, field

import pytest
import torch

from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.training.loop import Cadence, RunLoop
from seqrl.training.run import RunInterrupted, make_optimizer, releases_run_folder
from seqrl.utils.checkpoint import STATE_FILE, list_checkpoints
from seqrl.utils.metrics import read_metrics


@dataclass
class ToyConfig:
    run: RunConfig = field(default_factory=RunConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=0.1, warmup_steps=0, schedule="constant"))
    steps: int = 6
    eval_every: int = 0


@releases_run_folder
def toy_train(cfg: ToyConfig, nan_at: int | None = None, signal_at: int | None = None, calls: list | None = None):
    """A linear regression on the loop: step i fits y = 2x on a batch drawn from (seed, i); `nan_at`
    makes step `nan_at`'s loss NaN, `signal_at` sends SIGTERM during that step."""
    loop = RunLoop(cfg, "toy", distributed=False)
    model = torch.nn.Linear(1, 1)
    optimizer, scheduler = make_optimizer(model, cfg.optim, cfg.steps)
    loop.resume(model, optimizer, scheduler)
    loop.log_start({"model/parameters": 2.0})

    class Toy:  # the method: one class
        def step(self, i: int, log: bool) -> dict[str, float]:
            if calls is not None:
                calls.append(("step", i, log))
            if signal_at == i:
                os.kill(os.getpid(), signal.SIGTERM)
            x = torch.randn(8, 1, generator=torch.Generator().manual_seed(i))
            loss = ((model(x) - 2 * x) ** 2).mean()
            if nan_at == i:
                loss = loss * float("nan")
            loss.backward()
            stepped = loop.update(i, loss.item())
            return {"loss/mse": loss.item(), "stats/grad_norm": stepped.norm, "stats/lr": stepped.lr} if log else {}

        def evaluate(self) -> dict[str, float]:
            if calls is not None:
                calls.append(("eval",))
            return {"eval/weight": float(model.weight.detach())}

        def state(self) -> dict:
            return {"toy": {"note": "kept"}}

        def show(self, m: dict[str, float]) -> dict[str, float]:
            return {"loss": m.get("loss/mse", 0.0)}

    final = loop.run(cfg.steps, Toy(), Cadence(eval_every=cfg.eval_every))
    loop.plot(["loss/mse", "eval/weight"], "toy.png", "toy")
    return final, model


def load_checkpoint_state(path) -> dict:
    return json.loads((path / STATE_FILE).read_text(encoding="utf-8"))


def _cfg(tmp_path, name="toy", **run) -> ToyConfig:
    return ToyConfig(run=RunConfig(name=name, out_dir=str(tmp_path), progress=False, **run))


def test_the_cadences_of_logging_evaluation_and_checkpoints(tmp_path):
    cfg = _cfg(tmp_path, log_every=4, save_every=2, keep_last=10)
    cfg.steps, cfg.eval_every = 7, 3
    calls: list = []
    final, model = toy_train(cfg, calls=calls)
    # log: steps 4 and 7 (the last); eval: 3, 6 and 7; a record, with the step's metrics, wherever either happens
    assert [c[2] for c in calls if c[0] == "step"] == [False, False, True, True, False, True, True]
    assert sum(c[0] == "eval" for c in calls) == 3
    rows = read_metrics(cfg.run.dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 3, 4, 6, 7]
    assert "device" in str(rows[0]) or "precision" in str(rows[0])  # the placement in the step-0 record
    assert "loss/mse" in rows[2] and "eval/weight" not in rows[2] and {"eval/weight", "loss/mse"} <= rows[1].keys()
    assert [s for s, _ in list_checkpoints(cfg.run.dir)] == [2, 4, 6, 7]
    assert final["eval/weight"] == pytest.approx(float(model.weight.detach())) and final["loss/mse"] == rows[-1]["loss/mse"]
    state = load_checkpoint_state(cfg.run.dir / "checkpoint-7")
    assert state["toy"] == {"note": "kept"} and state["skipped_updates"] == 0
    assert (cfg.run.dir / "plots" / "toy.png").is_file()


def test_a_non_finite_step_stops_the_run_or_is_skipped_and_counted(tmp_path):
    from seqrl.training.run import NonFiniteError

    with pytest.raises(NonFiniteError, match="step 3: non-finite loss"):
        toy_train(_cfg(tmp_path, "stop"), nan_at=2)
    clean, clean_model = toy_train(_cfg(tmp_path, "clean", log_every=1))
    final, model = toy_train(_cfg(tmp_path, "skip", log_every=1, on_nonfinite="skip_step"), nan_at=2)
    rows = {r["step"]: r for r in read_metrics(tmp_path / "skip" / "metrics.jsonl")}
    assert rows[3]["loss/mse"] is None and all(  # NaN is written as null
        math.isfinite(rows[s]["loss/mse"]) for s in (1, 2, 4, 5, 6))
    assert load_checkpoint_state(tmp_path / "skip" / "checkpoint-6")["skipped_updates"] == 1
    assert not torch.equal(model.weight, clean_model.weight)  # one update fewer than the clean run
    assert math.isfinite(float(model.weight.detach()))


@pytest.mark.parametrize("on_nonfinite", ["stop", "skip_step"])
def test_a_signal_saves_the_step_reached_and_resume_repeats_the_uninterrupted_run(tmp_path, on_nonfinite):
    whole, whole_model = toy_train(_cfg(tmp_path, "whole", log_every=1, on_nonfinite=on_nonfinite),
                                   nan_at=1 if on_nonfinite == "skip_step" else None)
    cut = _cfg(tmp_path, "cut", log_every=1, on_nonfinite=on_nonfinite)
    with pytest.raises(RunInterrupted) as e:
        toy_train(cut, nan_at=1 if on_nonfinite == "skip_step" else None, signal_at=3)
    assert e.value.exit_code == 143 and "after step 4" in e.value.message
    assert [s for s, _ in list_checkpoints(cut.run.dir)] == [4]
    resumed_cfg = _cfg(tmp_path, "cut", log_every=1, on_nonfinite=on_nonfinite, resume=True)
    resumed, model = toy_train(resumed_cfg)
    assert torch.equal(model.weight, whole_model.weight) and torch.equal(model.bias, whole_model.bias)
    rows = lambda name: [(r["step"], r.get("loss/mse")) for r in read_metrics(tmp_path / name / "metrics.jsonl")
                         if r["step"] > 0]
    assert rows("cut") == rows("whole")
    skipped = load_checkpoint_state(cut.run.dir / "checkpoint-6")["skipped_updates"]
    assert skipped == (1 if on_nonfinite == "skip_step" else 0)  # the count survives the resume
