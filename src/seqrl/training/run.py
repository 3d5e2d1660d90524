"""Run plumbing every trainer shares: the run folder (lock, config, resume), the optimiser and its
schedule, the stop guard, data order. It reads the fields of the torch-free
configs of `seqrl.algos.config` (``run``: a `RunConfig`, ``optim``: an `OptimConfig`) and imports no
algos module: the trainers sit a floor above it.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import json
import math
import os
import shutil
import signal
import sys
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import torch
import yaml

from seqrl.config import ConfigError, dump_yaml, to_dict
from seqrl.utils import dist
from seqrl.utils.checkpoint import (
    CheckpointError,
    NonFiniteWeightsError,
    clean_stale_tmp,
    latest_checkpoint,
    list_checkpoints,
)
from seqrl.utils.metrics import MetricsLogger
from seqrl.utils.seeding import seed_everything

RESUMABLE_CHANGES = ("steps", "finetune_steps", "optim.schedule_steps", "critic.optim.schedule_steps", "eval.every", "run.log_every",
                     "run.log_completions", "run.save_every", "run.keep_last", "run.progress", "run.report_to",
                     "run.threads", "run.resume", "run.on_nonfinite", "online.iterations", "run.device", "iterations",
                     "shared_prompt_forward", "run.name", "run.out_dir", "run.compile", "run.compile_backend",
                     "run.compile_mode")
"""Fields a resumed run may change from its saved config.yaml (length, intervals, display, the device
it continues on, how the same log-probs are computed, compiled or not, where the folder now is: a run folder renamed or
copied elsewhere resumes under its new name); any other change is refused, so the run folder's config
always says what was trained."""


class NonFiniteError(ValueError):
    """A training loss or gradient norm became NaN or infinite (run.on_nonfinite: stop)."""


class RunFolderError(RuntimeError):
    """The run folder cannot be used: another process holds it, it is not writable, or its disk is full."""


class RunInterrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT stopped a run; `message` says which checkpoint holds its work, `exit_code`
    is 128 + the signal number (143 for SIGTERM, 130 for SIGINT)."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum, self.message, self.exit_code = signum, message, 128 + signum


def lr_factor(cfg: Any, update: int, total: int) -> float:
    """The learning rate of optimizer update `update` as a fraction of ``cfg.lr``: linear warm-up, then
    constant or a cosine over `total` updates down to ``cfg.min_lr_ratio`` (held there after `total`)."""
    if update < cfg.warmup_steps:
        return (update + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    progress = min(1.0, (update - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def make_optimizer(model: torch.nn.Module, cfg: Any, total_steps: int, fused: bool = False,
                   updates_per_step: int = 1):
    """AdamW (no decay on biases, norms and embeddings) and its LambdaLR schedule over `total_steps`
    optimizer updates, or over ``cfg.schedule_steps`` trainer steps of `updates_per_step` updates each.

    fused=True asks for PyTorch's fused AdamW kernel, used when every parameter is a floating tensor
    on one CPU or CUDA device: the same update up to float rounding, ≈ 10 % faster per Decision
    Transformer step on one CPU thread at the Pendulum preset size (benchmarks/RESULTS.md). Only the
    DT/BC trainer asks for it: the LM trainers keep the for-loop kernel, because their seed-0
    learning tests move with float rounding (the GRPO e2e gain read +0.005 instead of +0.049 with it).
    """
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 and "embed" not in name else no_decay).append(p)
    params = decay + no_decay
    fused = fused and bool(params) and len({p.device for p in params}) == 1 and all(
        p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=cfg.betas,
        fused=fused or None,
    )

    horizon = cfg.schedule_steps * updates_per_step if cfg.schedule_steps else total_steps
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda update: lr_factor(cfg, update, horizon))


LOCK_FILE = "run.lock"
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG, errno.ENOTDIR)
"""OSError numbers that mean the run folder cannot take the run's writes: reported as one line."""
_locks: dict[str, int] = {}  # resolved run folder → descriptor of its locked run.lock (this process)
_pending_configs: dict[str, Any] = {}  # resolved run folder → config a resume writes once its state loaded


def prepare_run_dir(run: Any, cfg: Any) -> Path | None:
    """Lock and create the run folder, write the resolved config; return the checkpoint to resume from.

    A second process on the same folder is refused (`RunFolderError` naming the holder's PID): the
    folder stays locked until the trainer's `train` returns or raises (`releases_run_folder`) or the
    process ends. A fresh run refuses a folder that already holds checkpoints (pass run.resume=true
    or a new run.name) so earlier work is never overwritten. A resumed run writes its config.yaml
    only once its state has loaded (`load_resume_checkpoint`), so a failed resume leaves it as it was.
    """
    if run.resume and (not run.dir.is_dir() or latest_checkpoint(run.dir) is None):  # before a lock is left there
        what = "no such folder" if not run.dir.is_dir() else \
            "not a run folder" if not (run.dir / "config.yaml").is_file() else "no checkpoint yet"
        raise ValueError(f"run.resume: no checkpoint in {run.dir} to resume from ({what})")
    try:
        run.dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error(e, run.dir) from e
    lock_run_dir(run.dir)
    clean_stale_tmp(run.dir)
    last = latest_checkpoint(run.dir)
    if run.resume and last is None:
        raise ValueError(f"run.resume: no checkpoint in {run.dir} to resume from")
    if not run.resume and last is not None:
        raise ValueError(
            f"{run.dir} already holds {last.name}; resume with --resume (run.resume=true) "
            f"or choose another --run.name"
        )
    if run.resume:
        check_resume_changes(run.dir / "config.yaml", cfg)
        _pending_configs[str(run.dir.resolve())] = cfg
        check_free_space(run.dir, sum(f.stat().st_size for f in last.rglob("*") if f.is_file()))
        return last
    try:
        dump_yaml(cfg, run.dir / "config.yaml")
    except OSError as e:
        raise write_error(e, run.dir) from e
    return None


class RunStart(NamedTuple):
    """What `start_run` set up."""

    device: torch.device
    main: bool
    """Whether this is the process that writes (rank 0; the only one outside torchrun)."""
    dir: Path
    resume_from: Path | None
    """The checkpoint to resume from (run.resume), else None."""
    placement: dict[str, Any]
    """The device and precision as step-0 metrics (`RunConfig.announce`)."""


def start_run(cfg: Any, distributed: bool = True, seed: bool = True) -> RunStart:
    """The set-up every trainer begins with, in this order: the device; the torchrun process group
    (`distributed`; a one-process trainer passes False and is refused under torchrun); torch threads;
    the global seed (`seed`; a trainer that builds its data from the global RNGs first passes False
    and seeds after); the locked run folder with its config.yaml (`prepare_run_dir`, on rank 0; the
    other ranks then find the same checkpoint to resume); the device and precision line.
    """
    run = cfg.run
    if not distributed and dist.world_size() > 1:
        raise ValueError(f"seqrl train {type(cfg).__name__.removesuffix('Config').lower()} runs in one process "
                         f"(WORLD_SIZE={dist.world_size()}); start it without torchrun")
    device = run.torch_device
    if distributed:
        dist.init_distributed(device)
    main = dist.is_main()
    set_threads(run.threads)
    if seed:
        seed_everything(run.seed)  # the same on every process: identical initial weights
    resume_from = prepare_run_dir(run, cfg) if main else None
    if distributed:
        dist.barrier()
        if not main and run.resume:
            resume_from = latest_checkpoint(run.dir)
    return RunStart(device, main, run.dir, resume_from, run.announce())


def lock_run_dir(run_dir: Path) -> None:
    """Hold an exclusive advisory lock on `run_dir/run.lock` (flock: the OS drops it when the process
    dies, SIGKILL included); `RunFolderError` naming the holder's PID when another process has it."""
    key = str(run_dir.resolve())
    unlock_run_dir(run_dir)  # an earlier run of this folder in this process has ended
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise write_error(e, run_dir) from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise RunFolderError(f"{run_dir}: in use by another run (process {holder} holds {run_dir / LOCK_FILE}); "
                             "wait for it to end or choose another --run.name") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _locks[key] = fd


def completion_samples(k: int, problems, texts, totals, scores: dict, reasons: dict,
                       episodes: list | None = None) -> list[dict]:
    """Up to `k` records of one step's completions, spread over its rows (groups share a prompt): what
    ``run.log_completions`` writes to ``completions.jsonl``; with multi-turn `episodes`, each record also
    holds its episode's messages as JSON text (the policy's turns with their calls, the tools' results:
    one column of a table) and end."""
    if k <= 0 or not texts:
        return []
    stride = max(1, len(texts) // k)
    out = []
    for i in list(range(0, len(texts), stride))[:k]:
        rec = {"prompt": problems[i].prompt, "answer": problems[i].answer, "completion": texts[i],
               "reward": float(totals[i])}
        if episodes is not None:
            rec.update(messages=json.dumps(episodes[i].messages, ensure_ascii=False), end=episodes[i].end)
        for name in scores:
            rec[f"reward/{name}"] = float(scores[name][i])
            rec[f"reason/{name}"] = str(reasons[name][i])[:500]
        out.append(rec)
    return out


def releases_run_folder(train: Any) -> Any:
    """Decorate a trainer's ``train(cfg, ...)``: the run folder's lock (taken by `prepare_run_dir`) is
    released when it returns or raises, set-up errors included, so a long-lived process (a notebook)
    never keeps a folder it no longer trains in; the run loop's logs and trackers are closed with it."""

    @functools.wraps(train)
    def wrapper(cfg: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return train(cfg, *args, **kwargs)
        finally:
            from seqrl.training.loop import close_loop  # the loop sits on this module

            close_loop(cfg.run.dir)
            unlock_run_dir(cfg.run.dir)
            _pending_configs.pop(str(cfg.run.dir.resolve()), None)

    return wrapper


def unlock_run_dir(run_dir: Path) -> None:
    """Release this process's lock on `run_dir` (no-op when it holds none)."""
    fd = _locks.pop(str(run_dir.resolve()), None)
    if fd is not None:
        os.close(fd)


def newest_checkpoint_text(run_dir: Path) -> str:
    """'newest complete checkpoint: <path>', or that there is none: the truth for a stopping message."""
    last = latest_checkpoint(run_dir)
    return f"newest complete checkpoint: {last}" if last else f"no complete checkpoint in {run_dir}"


def write_error(e: OSError, run_dir: Path) -> RunFolderError:
    """A `RunFolderError` saying in one line which path could not be written, why, and which checkpoint
    is the newest complete one."""
    cause = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
             errno.EROFS: "read-only file system", errno.EFBIG: "file too large"}.get(
        e.errno, (e.strerror or str(e)).lower())
    return RunFolderError(f"{e.filename or run_dir}: cannot write: {cause}; {newest_checkpoint_text(run_dir)}")


def check_free_space(run_dir: Path, need: int) -> None:
    """`RunFolderError` before any work when `run_dir`'s disk has less than `need` bytes free (the size
    of one checkpoint): the run could never save."""
    free = shutil.disk_usage(run_dir).free
    if free < need:
        raise RunFolderError(f"{run_dir}: {free / 2**20:.1f} MiB free, a checkpoint needs about "
                             f"{need / 2**20:.1f} MiB; free space or choose another --run.out_dir")


def commit_resumed_config(run_dir: Path, resumed_from: Path) -> None:
    """Write the resumed run's config.yaml now that its state has loaded; a changed one keeps the
    previous beside it as ``config.until-<checkpoint>.yaml``."""
    cfg = _pending_configs.pop(str(run_dir.resolve()), None)
    if cfg is None:
        return
    path, new = run_dir / "config.yaml", run_dir / f".config.new-{os.getpid()}.yaml"
    try:
        old = path.read_text(encoding="utf-8") if path.is_file() else None
        dump_yaml(cfg, new)
        if old is not None and new.read_text(encoding="utf-8") != old:
            (run_dir / f"config.until-{resumed_from.name}.yaml").write_text(old, encoding="utf-8")
        os.replace(new, path)
    except OSError as e:
        new.unlink(missing_ok=True)
        raise write_error(e, run_dir) from e


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out or {prefix[:-1]: {}}
    return {prefix[:-1]: data}


def reduce_rank_metrics(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """One record from every process's metrics (GRPO, PPO under torchrun): counts summed (generated
    tokens, reward errors, kept groups), maxima and wall times maxed, the rest averaged, text the first's."""
    if len(per_rank) == 1:
        return per_rank[0]
    out: dict = {}
    for key in dict.fromkeys(k for m in per_rank for k in m):
        values = [m[key] for m in per_rank if key in m]
        if isinstance(values[0], str):  # reward/<fn>/first_error: the first process's
            out[key] = values[0]
        elif key == "perf/gen_tokens" or key.endswith(("/errors", "/not_applicable")) or key == "stats/groups_kept":
            out[key] = float(sum(values))
        elif key.endswith("_max") or key.endswith("_s") or key == "stats/sampling_rounds":
            out[key] = float(max(values))
        else:
            out[key] = float(sum(values) / len(values))
    return out


def check_resume_changes(saved_file: Path, cfg: Any) -> list[str]:
    """Compare a resumed run's config with the one it was trained with; return the applied changes.

    Changes to `RESUMABLE_CHANGES` are applied and printed; any other changed field raises a
    `ConfigError` naming it (start a new run for that). A run folder without config.yaml passes; one
    that is not a YAML mapping is an error naming it (never silently replaced).
    """
    from seqrl.config import RENAMED_KEYS, _Dumper, _yaml_load  # the YAML schema config.yaml was written with

    if not saved_file.is_file():
        return []
    try:
        loaded = _yaml_load(saved_file.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"{saved_file}: not a readable config ({type(e).__name__}); restore it or "
                          "delete it to resume without the check") from e
    if not isinstance(loaded, dict):
        raise ConfigError(f"{saved_file}: not a config (expected a YAML mapping, got {type(loaded).__name__}); "
                          "restore it or delete it to resume without the check")
    renamed = {**RENAMED_KEYS, **getattr(type(cfg), "RENAMED", {})}
    saved = {renamed.get(k, k): v for k, v in _flatten(loaded).items()}  # a run written before a rename
    now = _flatten(_yaml_load(yaml.dump(to_dict(cfg), Dumper=_Dumper, sort_keys=False)))
    # a field added since the run was written is absent from its config.yaml: at its default it is no change
    changed = sorted(k for k in saved.keys() | now.keys() if saved.get(k, "<absent>") != now.get(k, "<absent>")
                     and not (k not in saved and now[k] == _plain_default(cfg, k)))
    refused = [k for k in changed if k not in RESUMABLE_CHANGES]
    if refused:
        key = refused[0]
        raise ConfigError(f"{key}: cannot change on --resume ({saved.get(key, '<absent>')!r} in {saved_file}, "
                          f"now {now.get(key, '<absent>')!r}); a resumed run keeps its config except "
                          f"{', '.join(c for c in RESUMABLE_CHANGES if c != 'run.resume')}; start a new run "
                          f"(another --run.name) to change it")
    applied = [f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in changed if k != "run.resume"]
    if applied:
        print(f"resume: applying changed {'; '.join(applied)}")
    if "steps" in changed and (note := _schedule_note(cfg, saved.get("steps"), saved_file.parent)):
        print(note)
    return applied


def _plain_default(cfg: Any, dotted: str) -> Any:
    """The class default of the config field at `dotted` (``optim.schedule_steps``); a fresh sentinel (equal to
    nothing) for a factory-made default (a list, a section: compared as written) or a path that is no field."""
    import dataclasses

    field, obj = None, cfg
    for name in dotted.split("."):
        field = {f.name: f for f in dataclasses.fields(obj)}.get(name) if dataclasses.is_dataclass(obj) else None
        if field is None:
            return object()
        obj = getattr(obj, name)
    return object() if field.default is dataclasses.MISSING else field.default


def _schedule_note(cfg: Any, old_steps: Any, run_dir: Path) -> str | None:
    """What a changed `steps` does to a cosine schedule that follows it: the line `--resume` prints, with
    the learning rate at the newest checkpoint's step under the old and the new length, and the choice."""
    optim = getattr(cfg, "optim", None)
    if (getattr(optim, "schedule", None) != "cosine" or optim.schedule_steps
            or not isinstance(old_steps, int) or hasattr(cfg, "iterations")):  # STaR: steps per iteration
        return None
    new_steps = cfg.steps
    checkpoints = list_checkpoints(run_dir)
    step = checkpoints[-1][0] if checkpoints else 0
    k = getattr(cfg, "num_iterations", 1) * getattr(cfg, "minibatches", 1)  # optimizer updates per step
    before, after = (optim.lr * lr_factor(optim, step * k, n * k) for n in (old_steps, new_steps))
    return (f"resume: the cosine learning-rate schedule now spans steps={new_steps} (it spanned {old_steps}): the "
            f"learning rate of step {step + 1} goes from {before:.3g} to {after:.3g}. To continue the old schedule "
            f"instead (held at its floor after step {old_steps}), resume with --optim.schedule_steps={old_steps}")


def load_resume_checkpoint(run_dir: Path, load: Any) -> tuple[Path, Any]:
    """Call ``load(path)`` on the newest checkpoint of `run_dir` that loads; return (path, its result).

    A checkpoint that fails with `CheckpointError` (cut-short weights, garbage optimizer state) is
    skipped with a line saying which and why, and the next older one is tried; none → `CheckpointError`.
    """
    errors = []
    for _, path in reversed(list_checkpoints(run_dir)):
        try:
            result = load(path)
        except CheckpointError as e:
            print(f"resume: skipping {path.name}: {e}")
            errors.append(f"{path.name}: {e}")
            continue
        if errors:
            print(f"resume: fell back to {path.name}")
        commit_resumed_config(run_dir, path)
        return path, result
    raise CheckpointError(f"{run_dir}: no checkpoint could be loaded ({'; '.join(errors) or 'none found'})")


def resume_and_open_log(run_dir: Path, resume_from: Path | None, load: Any, main: bool = True, unit: str = "step"
                        ) -> tuple[Path | None, dict, int, MetricsLogger | None]:
    """A run's start: with `resume_from`, ``load(path) -> state`` on the newest checkpoint that loads
    (`load_resume_checkpoint`, reported on the main process; under torchrun every process loads
    `resume_from` itself, so that all of them continue from the same one); then the run's metrics log,
    truncated to the resumed step (None off the main process). Returns (the checkpoint or None, its
    trainer state ({} on a fresh run), the start step, the logger)."""
    start, state = 0, {}
    if resume_from is not None:
        if dist.world_size() == 1:  # one process: fall back past a corrupted newest checkpoint
            resume_from, state = load_resume_checkpoint(run_dir, load)
        else:
            state = load(resume_from)
            if main:
                commit_resumed_config(run_dir, resume_from)
        start = state["step"]
        if main:
            print(f"resumed from {resume_from} at {unit} {start}")
    logger = MetricsLogger(run_dir / "metrics.jsonl", resume_step=start if resume_from else None) if main else None
    return resume_from, state, start, logger


def open_run_trackers(cfg: Any, resume_step: int | None) -> list:
    """The experiment trackers of ``cfg.run.report_to`` for its run folder (main process), with the
    resolved config (`seqrl.utils.trackers`)."""
    from seqrl.utils.trackers import open_trackers

    return open_trackers(cfg.run.report_to, cfg.run.dir, cfg.run.name, to_dict(cfg), resume_step)


def check_finite(step: int, on_nonfinite: str, **values: float) -> bool:
    """True when every value is finite. Else, with ``stop``, raise `NonFiniteError` naming the step;
    with ``skip_step``, print a warning and return False: the caller skips the optimizer update."""
    bad = {k: float(v) for k, v in values.items() if not math.isfinite(float(v))}
    if not bad:
        return True
    what = ", ".join(f"{k} = {v}" for k, v in bad.items())
    if on_nonfinite == "stop":
        raise NonFiniteError(f"step {step}: non-finite {what} (the run diverged; lower optim.lr, or set "
                             "run.on_nonfinite=skip_step to skip such updates)")
    if dist.is_main():
        print(f"WARNING: step {step}: non-finite {what}; update skipped (run.on_nonfinite=skip_step)", file=sys.stderr)
    return False


class FiniteCheck:
    """`check_finite` under one ``run.on_nonfinite`` rule, counting the updates it skipped (`skipped`);
    `label` (which fine-tune of which iteration) prefixes a `NonFiniteError`. The ``check`` every
    `apply_update` calls."""

    def __init__(self, on_nonfinite: str, skipped: int = 0, label: str = "") -> None:
        self.on_nonfinite, self.skipped, self.label = on_nonfinite, int(skipped), label

    def __call__(self, step: int, **values: float) -> bool:
        try:
            ok = check_finite(step, self.on_nonfinite, **values)
        except NonFiniteError as e:
            if not self.label:
                raise
            raise NonFiniteError(f"{self.label}: {e}") from None
        self.skipped += not ok
        return ok


class RunGuard:
    """What a training loop does on signals and bad steps, around its step loop (every process).

    * SIGTERM / SIGINT: the first asks the loop to stop after the current step; `stop_requested` (called
      once per step on every process, so all of them agree) turns true, the loop saves and calls
      `stop`, which raises `RunInterrupted` naming the checkpoint (exit 143 / 130). A second signal stops
      at once, naming the newest complete checkpoint (an interrupted save leaves none half-written).
    * `check_finite` counts the updates `run.on_nonfinite=skip_step` skipped (`skipped`, saved in the
      checkpoint state as ``skipped_updates``).
    * A `NonFiniteError` or `NonFiniteWeightsError` leaving the block gains the newest checkpoint's name.
    * Before the loop, on the main process: refuses a disk without room for one checkpoint of `model`
      (weights + Adam's two moments).

    `unit` names what the loop checkpoints after ("step"; STaR: "iteration"). A loop whose unit is long
    and cannot be saved midway sets `current` to the unit in progress, so that the messages say which
    work a stop at once loses and where ``--resume`` restarts.
    """

    def __init__(self, run: Any, model: torch.nn.Module | None = None, skipped: int = 0,
                 unit: str = "step") -> None:
        self.run, self.dir, self.model, self.unit = run, run.dir, model, unit
        self.check_finite = FiniteCheck(run.on_nonfinite, skipped)
        """`check_finite` with the run's ``on_nonfinite``, counting what it skipped (`skipped`)."""
        self.signum: int | None = None
        self.current: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> RunGuard:
        if dist.is_main() and self.model is not None:
            trainable = sum(p.numel() * p.element_size() for p in self.model.parameters() if p.requires_grad)
            check_free_space(self.dir, 3 * trainable)
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        if dist.is_main():
            if isinstance(exc, (NonFiniteError, NonFiniteWeightsError)) and exc.args:
                exc.args = (f"{exc.args[0]}; {newest_checkpoint_text(self.dir)}", *exc.args[1:])

    def _on_signal(self, signum: int, frame: Any) -> None:
        name, unit, current = signal.Signals(signum).name, self.unit, self.current
        if self.signum is not None:
            if current is None:
                raise RunInterrupted(signum, f"stopped at once by a second {name}; {newest_checkpoint_text(self.dir)}")
            raise RunInterrupted(signum, f"stopped at once by a second {name} during {unit} {current}, whose work is "
                                         f"lost; {newest_checkpoint_text(self.dir)} (--resume restarts {unit} "
                                         f"{current} from it)")
        self.signum = signum
        if dist.is_main():
            lose = f", losing {unit} {current}'s work" if current is not None else ""
            print(f"\n{name}: stopping after the current {unit} and saving a checkpoint "
                  f"(send it again to stop at once{lose})", file=sys.stderr, flush=True)

    def stop_requested(self) -> bool:
        """Whether a signal asked to stop, agreed over processes; call once per step on every process."""
        signum = self.signum or 0
        if dist.world_size() > 1:  # any process's signal stops all of them at the same step
            flags = dist.all_gather_objects(signum)
            signum = max(flags)
            self.signum = signum or None
        return bool(signum)

    def stop(self, step: int) -> None:
        """Raise `RunInterrupted` after the loop saved step (or `unit`) `step`."""
        signum = self.signum or signal.SIGTERM
        raise RunInterrupted(signum, f"stopped by {signal.Signals(signum).name} after {self.unit} {step}; "
                                     f"{newest_checkpoint_text(self.dir)} (resume with --resume)")

    @property
    def skipped(self) -> int:
        """The updates ``run.on_nonfinite=skip_step`` skipped so far (resumed from the checkpoint's count)."""
        return self.check_finite.skipped


def set_threads(n: int) -> None:
    torch.set_num_threads(n)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def stream_indices(start: int, count: int, n: int, seed: int) -> list[int]:
    """Positions start … start+count−1 of an endless stream of per-epoch permutations of range(n).

    The data order of every loop is a pure function of (seed, position), so a resumed run sees
    the same data as an uninterrupted one.
    """
    return [int(_perm(n, seed, i // n)[i % n]) for i in range(start, start + count)]


def batch_indices(step: int, batch_size: int, n: int, seed: int) -> list[int]:
    """Indices of batch `step`: consecutive slots of per-epoch permutations of range(n).

    >>> batch_indices(0, 3, 4, 0) + batch_indices(1, 3, 4, 0)[:1] == _perm(4, 0, 0).tolist()
    True
    """
    return stream_indices(step * batch_size, batch_size, n, seed)


@lru_cache(maxsize=4)
def _perm(n: int, seed: int, epoch: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
