"""Experiment trackers beside metrics.jsonl (``run.report_to``): TensorBoard and Weights & Biases.

metrics.jsonl stays the record (resume truncates it to the checkpoint); a tracker receives the same
numbers as they are logged, and the completions of ``run.log_completions`` as a table (wandb) or
text (TensorBoard). Each library is imported only when named; a missing one is one line naming the
install that brings it.

* ``tensorboard``: event files in ``<run>/tensorboard`` (``tensorboard --logdir runs``); a resumed run
  purges the events after its checkpoint's step, so its curves continue without a fork.
* ``wandb``: a run under ``<run>/wandb``, project ``$WANDB_PROJECT`` (default ``seqrl``), named after
  the run folder, with the resolved config. ``WANDB_MODE`` is respected; without it and without
  credentials (``WANDB_API_KEY`` or a ``wandb login``) it runs offline, saying so (``wandb sync`` uploads
  later). A resumed run is a new wandb run in the same group, since wandb's history cannot be cut back
  to the checkpoint.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from pathlib import Path
from typing import Any

TRACKERS = ("tensorboard", "wandb")
_PACKAGE = {"tensorboard": "tensorboard", "wandb": "wandb"}


class TrackerError(ValueError):
    """A tracker named in run.report_to that cannot run here (its package missing)."""


def check_trackers(names: list[str]) -> None:
    """Unknown names and missing packages, cheaply (nothing imported): a ValueError naming the fix."""
    for name in names:
        if name not in TRACKERS:
            raise ValueError(f"run.report_to: unknown tracker {name!r}; one of {', '.join(TRACKERS)} (or none)")
        if importlib.util.find_spec(_PACKAGE[name]) is None:
            raise TrackerError(f"run.report_to: {name} is not installed; pip install 'seqrl[trackers]' (or "
                               f"pip install {_PACKAGE[name]})")


def _scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a record (texts and nulls stay in metrics.jsonl only)."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(float(value)):
            out[key] = float(value)
    return out


class TensorBoardTracker:
    def __init__(self, run_dir: Path, resume_step: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"),
                                    purge_step=None if resume_step is None else resume_step + 1)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        for key, value in _scalars(metrics).items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        cells = lambda r: " | ".join(str(v).replace("|", "\\|").replace("\n", " ")[:300] for v in r.values())  # noqa: E731
        head = " | ".join(rows[0])
        text = "\n".join([f"| {head} |", "|" + " --- |" * len(rows[0]), *(f"| {cells(r)} |" for r in rows)])
        self.writer.add_text("completions", text, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def _wandb_mode() -> str:
    """WANDB_MODE when set; else online with credentials, offline without them."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    try:
        import netrc

        if netrc.netrc().authenticators("api.wandb.ai"):
            return "online"
    except (OSError, netrc.NetrcParseError):
        pass
    return "offline"


class WandbTracker:
    def __init__(self, run_dir: Path, name: str, config: dict[str, Any], resume_step: int | None) -> None:
        import wandb

        mode = _wandb_mode()
        if mode == "offline" and not os.environ.get("WANDB_MODE"):
            print(f"wandb: no credentials (WANDB_API_KEY, wandb login): logging offline to {run_dir / 'wandb'} "
                  f"(wandb sync uploads it)", file=sys.stderr)
        self._wandb = wandb
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "seqrl"), dir=str(run_dir), mode=mode,
                              name=name if resume_step is None else f"{name} (resumed at step {resume_step})",
                              group=name, config=config, reinit="create_new",
                              settings=wandb.Settings(console="off", silent=True))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        scalars = _scalars(metrics)
        if scalars:
            self.run.log(scalars, step=step)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        columns = list(dict.fromkeys(k for r in rows for k in r))
        table = self._wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in rows])
        self.run.log({"completions": table}, step=step)

    def close(self) -> None:
        self.run.finish()


def open_trackers(names: list[str], run_dir: Path, name: str, config: dict[str, Any],
                  resume_step: int | None) -> list:
    """The trackers `names` for the run in `run_dir` (main process only)."""
    check_trackers(names)
    out: list = []
    for tracker in names:
        out.append(TensorBoardTracker(run_dir, resume_step) if tracker == "tensorboard"
                   else WandbTracker(run_dir, name, config, resume_step))
    return out
