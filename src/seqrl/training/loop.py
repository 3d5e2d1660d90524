"""The run loop: the life of one run, written once for every trainer.

A trainer supplies only what its method defines — how to build its data and model, one optimizer
step, its evaluation, what its checkpoint state holds — and the loop does the rest, in this order:

    loop = RunLoop(cfg, "sft")               # device, torchrun group, threads, seed, locked run folder
    ...                                      # the trainer builds data, model, optimizer, scheduler
    loop.resume(model, optimizer, scheduler, tokenizer)   # newest checkpoint that loads; the metrics log
    loop.log_start({...})                    # step-0 record of a fresh run, with device and precision
    final = loop.run(cfg.steps, SFT(...), Cadence(eval_every=cfg.eval.every))   # the method: one class
    loop.plot([...], "sft.png", "SFT ...")   # on the main process

A method (`Method`) is one class: ``step(i, log)`` (collect, learn), and where it has them
``evaluate``, ``state``, ``show``, ``record``, ``on_stop``. `run` calls ``step(i, log)`` for i = start …
total−1 (``log``: whether this step's metrics are recorded, every ``run.log_every`` steps and the
last), evaluates at the `Cadence`'s rule and at the end, writes the record, saves a checkpoint every
``run.save_every`` steps, at the end and when a signal asks to stop (`RunGuard`), and advances the
progress bar. A step ends its update with
`RunLoop.update` (`seqrl.training.update`: the all-reduce, clip, the non-finite rule of
``run.on_nonfinite``, optimizers and schedules, for one group of parameters or several).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from seqrl.training.run import RunGuard, open_run_trackers, resume_and_open_log, start_run
from seqrl.training.update import OptimGroup, Stepped, apply_update
from seqrl.utils import dist
from seqrl.utils.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from seqrl.utils.compiling import compile_failure, compile_seconds
from seqrl.utils.metrics import MetricsLogger, read_metrics
from seqrl.utils.plots import plot_metrics
from seqrl.utils.progress import progress_bar

Metrics = dict[str, float]
_OPEN: dict[str, RunLoop] = {}  # resolved run folder → its loop with logs or trackers open (this process)


class Method(Protocol):
    """One algorithm on the run loop, as one class: ``step(i, log)`` collects and learns from unit `i` (a
    step, or an iteration of several) and returns its metrics (those due when `log`, else {} or what
    must not wait). Optional members, read when present:

    - ``evaluate() -> Metrics``: the held-out evaluation (on every process: it may gather);
    - ``state() -> Mapping``: the method's part of each checkpoint's state (every process);
    - ``show(metrics) -> Mapping``: the progress bar's fields from the metrics as last recorded;
    - ``record(step) -> Mapping``: texts that join the record of `step` only (main process);
    - ``on_stop(step)``: called before a signal ends the run at `step`.

    A member set to None counts as absent (a method with no held-out evaluation in this run).
    """

    def step(self, i: int, log: bool) -> Metrics: ...


@dataclass(frozen=True)
class Cadence:
    """When the loop records, evaluates and checkpoints, counted in units done.

    Default: a record every ``run.log_every`` units and at the last, the evaluation every `eval_every`
    units (0: only at the end) and after the last, a checkpoint every ``run.save_every`` steps and at the
    end. A method whose unit is not one step (ODT's online iterations, STaR's iterations) gives `at`
    (units done → the global step that records, checkpoints and the bar use), `start` (the first unit;
    default the resumed step), and `log_due` / `eval_due` (replacing the rules above) and `save_due`
    (added to ``run.save_every``), each of the units done."""

    eval_every: int = 0
    start: int | None = None
    at: Callable[[int], int] | None = None
    log_due: Callable[[int], bool] | None = None
    eval_due: Callable[[int], bool] | None = None
    save_due: Callable[[int], bool] | None = None


class _Files:
    """The tokenizer and the loop's `RunLoop.files` as the one object a checkpoint's ``save_pretrained`` takes."""

    def __init__(self, objects: list[Any]) -> None:
        self.objects = [o for o in objects if o is not None]

    def save_pretrained(self, directory) -> None:
        for o in self.objects:
            o.save_pretrained(directory)


def close_loop(run_dir: Path) -> None:
    """Close the logs and trackers a loop of `run_dir` left open (an error between `resume` and the end
    of `run`); `releases_run_folder` calls it when a trainer's ``train`` returns or raises."""
    loop = _OPEN.pop(str(Path(run_dir).resolve()), None)
    if loop is not None:
        loop.close()


class RunLoop:
    """One run of a trainer; every trainer runs on it: SFT, GRPO and its variants, PPO, RM, PRM/ORM, DT/BC,
    the VLA, ODT (its online phase in iterations of several steps) and STaR (in iterations).

    `label` names the run in the progress bar ("sft", "rm", "prm", …). `distributed`: whether the
    trainer runs under torchrun (False refuses it); `seed`: seed the global RNGs now (a trainer whose
    data building draws from them seeds after it, itself); `unit`: what a checkpoint's number counts in
    messages ("iteration" for STaR).
    """

    def __init__(self, cfg: Any, label: str, *, distributed: bool = True, seed: bool = True, unit: str = "step") -> None:
        self.cfg, self.label, self.distributed, self.unit = cfg, label, distributed, unit
        started = start_run(cfg, distributed=distributed, seed=seed)
        self.device, self.main, self.dir = started.device, started.main, started.dir
        self.resume_from, self.placement = started.resume_from, started.placement
        self.start = 0
        """The first step this process runs (the resumed checkpoint's step, else 0)."""
        self.state: dict[str, Any] = {}
        """The trainer state saved with the resumed checkpoint ({} on a fresh run)."""
        self.logger = None
        self.model: torch.nn.Module | None = None
        self.optimizer = self.scheduler = self.tokenizer = None
        self.guard: RunGuard | None = None
        self.bar = None
        """The progress bar while `run` runs (a step may add a field: ``loop.bar.advance(0, dagger=...)``)."""
        self._side_logs: list[MetricsLogger] = []
        self._compile_base = 0.0
        self._companions: list[tuple[str, torch.nn.Module, Any, Any]] = []
        self.files: list[Any] = []
        """Objects with ``save_pretrained(dir)`` written into each checkpoint beside the tokenizer (ODT's
        replay buffer in its online phase); the method reads them back from `resume_from` itself."""
        self.trackers: list = []
        """The experiment trackers of ``run.report_to`` (main process), opened by `resume`."""

    def add_companion(self, name: str, model: torch.nn.Module, optimizer, scheduler) -> None:
        """A second model trained beside the main one (PPO's critic): checkpointed under ``name/checkpoint-N``
        before each main checkpoint (which marks the step complete) and restored with it. Before `resume`."""
        self._companions.append((name, model, optimizer, scheduler))

    def _load(self, path: Path) -> dict[str, Any]:
        state = load_checkpoint(path, self.model, self.optimizer, self.scheduler, restore_rng=self._restore_rng)
        for name, model, optimizer, scheduler in self._companions:
            own = self.dir / name / path.name
            if not own.is_dir():
                raise CheckpointError(f"{path}: no {name} checkpoint {own}")
            load_checkpoint(own, model, optimizer, scheduler, restore_rng=False)
        return state

    def _trained_models(self) -> list[torch.nn.Module]:
        """The run's model and its companions' (what `run.compile` compiles)."""
        return [self.model, *(c[1] for c in self._companions)]

    def resume(self, model: torch.nn.Module, optimizer, scheduler, tokenizer: Any = None,
               restore_rng: bool = True) -> dict[str, Any]:
        """Load the newest checkpoint that loads into `model`, `optimizer` and `scheduler` (and the
        companions) when the run resumes (falling back past corrupt ones), open the metrics log
        (truncated to the resumed step) and arm the stop guard. Returns the saved trainer state ({} on
        a fresh run). `optimizer` and `scheduler` may be None (a trainer that fine-tunes afresh in
        each unit); `restore_rng` False leaves the global RNGs as they are (a trainer seeding each unit)."""
        self.model, self.optimizer, self.scheduler, self.tokenizer = model, optimizer, scheduler, tokenizer
        self._restore_rng = restore_rng
        run = self.cfg.run
        if getattr(run, "compile", False):  # in place: the checkpoints' names stay as they are
            from seqrl.utils.compiling import compile_model

            for m in self._trained_models():
                compile_model(m, run.compile_backend, run.compile_mode)
            self._compile_base = compile_seconds() or 0.0  # this run's share of the process's compile time
        self.resume_from, self.state, self.start, self.logger = resume_and_open_log(
            self.dir, self.resume_from, self._load, self.main, unit=self.unit)
        # the free-space check counts Adam's two moments: only where there is an optimizer to save
        self.guard = RunGuard(self.cfg.run, model if optimizer is not None else None,
                              self.state.get("skipped_updates", 0), unit=self.unit)
        _OPEN[str(self.dir.resolve())] = self
        if self.main and self.cfg.run.report_to:
            self.trackers = open_run_trackers(self.cfg, self.start if self.resume_from else None)
            self.logger.trackers = self.trackers
        return self.state

    def close(self) -> None:
        """Close the metrics log, the side logs and the trackers (idempotent)."""
        for log in [self.logger, *self._side_logs]:
            if log is not None:
                log.close()
        trackers, self.trackers = self.trackers, []
        for tracker in trackers:
            tracker.close()

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """One record of metrics.jsonl (main process only)."""
        if self.main and self.logger is not None:
            self.logger.log(step, dict(metrics))

    def open_log(self, filename: str) -> MetricsLogger | None:
        """A second JSONL log of the run folder (main process; None elsewhere), truncated like
        metrics.jsonl to the resumed step and closed when `run` ends; its records reach the trackers
        as one table per step (the completions of ``run.log_completions``)."""
        if not self.main:
            return None
        log = MetricsLogger(self.dir / filename, resume_step=self.start if self.resume_from else None,
                            trackers=self.trackers, table=True)
        self._side_logs.append(log)
        return log

    def log_start(self, metrics: Mapping[str, float]) -> None:
        """The step-0 record of a fresh run (the data and model sizes), with device and precision."""
        if self.start == 0:
            self.log(0, {**metrics, **self.placement})

    def group(self) -> OptimGroup:
        """The run's model with its optimizer, schedule and ``optim.grad_clip``, as one `OptimGroup`."""
        return OptimGroup("model", self.model, self.optimizer, self.scheduler, self.cfg.optim.grad_clip)

    def update(self, step: int, loss: float, groups: Sequence[OptimGroup] | None = None, **values: float) -> Stepped:
        """End step `step` (0-based) with `apply_update`: the gradients of `groups` (default: the run's
        model, `group`) summed over processes and clipped, the loss, the norms and `values` checked
        (``run.on_nonfinite``: stop, or skip this update — counted in the checkpoint's
        ``skipped_updates``), every optimizer and schedule stepped, the gradients zeroed."""
        return apply_update(list(groups) if groups is not None else [self.group()], step, self.guard.check_finite,
                            loss, **values)

    def save(self, step: int, state: Mapping[str, Any] | None = None) -> None:
        """A checkpoint of step `step` (main process; the others wait for it): weights, tokenizer,
        optimizer, schedule, RNGs, and `state` with the count of skipped updates (unless `state` has its own)."""
        if self.main:
            for name, model, optimizer, scheduler in self._companions:  # first: the main checkpoint marks them done
                save_checkpoint(self.dir / name, step, model, None, optimizer, scheduler,
                                keep_last=self.cfg.run.keep_last)
            files = _Files([self.tokenizer, *self.files]) if self.files else self.tokenizer
            save_checkpoint(self.dir, step, self.model, files, self.optimizer, self.scheduler,
                            keep_last=self.cfg.run.keep_last,
                            state={"skipped_updates": self.guard.skipped, **(state or {})})
        if self.distributed:
            dist.barrier()

    def run(self, total: int, method: Method, cadence: Cadence | None = None) -> Metrics:
        """Units start … `total`−1 of `method` (`Method`) at `cadence` (`Cadence`; default: every step a
        unit, the held-out evaluation only at the end); returns every metric as last recorded.

        Each unit: ``method.step(i, log)`` — ``log`` whether its record is due (every ``run.log_every``
        units, the last, and where it evaluates); with `log` its metrics gain ``stats/skipped_updates``
        (the updates skipped so far) — then, where due, ``method.evaluate()``, the record (with
        ``method.record(step)``'s texts, main process), a checkpoint (``method.state()`` in its state) and
        on a signal ``method.on_stop(step)`` before the run ends. The progress bar is `self.bar` meanwhile
        and shows ``method.show(metrics as last recorded)``."""
        run, guard, c = self.cfg.run, self.guard, cadence or Cadence()
        evaluate, state = getattr(method, "evaluate", None), getattr(method, "state", None)
        show, record, on_stop = (getattr(method, n, None) for n in ("show", "record", "on_stop"))
        at = c.at or (lambda units: units)
        first = self.start if c.start is None else c.start
        final: Metrics = {}
        with progress_bar(at(total), f"{self.label} {run.name}", disable=not (run.progress and self.main)) as bar, guard:
            self.bar = bar
            bar.advance(at(first))
            try:
                for i in range(first, total):
                    done = i + 1
                    evaluated = evaluate is not None and (
                        c.eval_due(done) if c.eval_due else bool((c.eval_every and done % c.eval_every == 0) or done == total))
                    log = (c.log_due(done) if c.log_due else done % run.log_every == 0 or done == total) or evaluated
                    metrics = method.step(i, log)
                    if log and metrics:
                        metrics = {"stats/skipped_updates": guard.skipped, **metrics}  # run.on_nonfinite=skip_step
                        if getattr(run, "compile", False):
                            if compile_seconds() is not None:
                                metrics["time/compile_s"] = compile_seconds() - self._compile_base  # in the step times so far
                            metrics["run/compile_fallback"] = float(any(  # 1: a backend failed, the model runs eager
                                compile_failure(m) for m in self._trained_models()))
                    if evaluated:
                        metrics = {**metrics, **evaluate()}
                    if metrics:
                        self.log(at(done), {**metrics, **(record(at(done)) if record and self.main else {})})
                        final.update(metrics)
                    stopping = guard.stop_requested() and done < total
                    scheduled = bool(run.save_every and at(done) // run.save_every > at(i) // run.save_every)
                    if scheduled or done == total or stopping or (c.save_due is not None and c.save_due(done)):
                        self.save(at(done), state() if state else None)
                    if stopping:
                        if on_stop is not None:
                            on_stop(at(done))
                        guard.stop(at(done))
                    bar.advance(at(done) - at(i), **(show(final) if show else {}))
            finally:
                self.close()
        return final

    def plot(self, keys: list[str], filename: str, title: str) -> Path | None:
        """plots/`filename` from metrics.jsonl, one panel per key (main process)."""
        if not self.main:
            return None
        return plot_metrics(read_metrics(self.dir / "metrics.jsonl"), keys, self.dir / "plots" / filename, title=title)
