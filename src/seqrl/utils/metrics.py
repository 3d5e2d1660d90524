"""Metrics as JSON lines: ``runs/<name>/metrics.jsonl``, one ``{"step", "time", ...metrics}`` per line.

Keys follow one scheme (``loss/policy``, ``reward/<fn>/mean`` …). NaN and ±inf are not valid
JSON, so they are written as ``null`` with the key kept: a diverged loss stays visible in the file.
Log from the main process only (``seqrl.utils.dist.is_main``).

>>> tmp = tempfile.TemporaryDirectory()
>>> path = Path(tmp.name) / "metrics.jsonl"
>>> with MetricsLogger(path) as logger:
...     logger.log(1, {"loss/policy": 0.5, "stats/kl": float("nan")})
>>> [(r["step"], r["loss/policy"], r["stats/kl"]) for r in read_metrics(path)]
[(1, 0.5, None)]
>>> tmp.cleanup()
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from pathlib import Path
from types import TracebackType
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from seqrl.config import user_file_mode
from seqrl.utils.jsonl import jsonl_rows

__all__ = ["MetricsLogger", "read_metrics"]


def _json_scalar(key: str, value: Any) -> int | float | bool | str | None:
    """A metric value as a JSON-safe scalar (NaN/inf → None)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise TypeError(f"metric {key!r}: expected a scalar tensor, got shape {tuple(value.shape)}")
        value = value.item()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (int, str)) or value is None:  # bool is an int
        return value
    raise TypeError(f"metric {key!r}: expected a number, string or scalar tensor, got {type(value).__name__}")


class MetricsLogger:
    """Appends one JSON line per `log` call to `path` and flushes it at once.

    A fresh run (`resume_step` None) starts `path` empty. A resumed run keeps the records with
    ``step <= resume_step`` (rewriting the file atomically, dropping a torn last line) and appends
    after them, so steps logged after the checkpoint are not duplicated.
    """

    def __init__(self, path: str | os.PathLike, resume_step: int | None = None, trackers: Sequence[Any] = (),
                 table: bool = False) -> None:
        self.path = Path(path)
        self._failed = False
        self.trackers, self.table = list(trackers), table
        """Experiment trackers (`seqrl.utils.trackers`) that receive each record too (they are closed by
        their owner): its numbers, or with `table` (a completions log) each step's records as one table."""
        self._rows: list[dict[str, Any]] = []
        self._rows_step: int | None = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is None:
            self._file = open(self.path, "w", encoding="utf-8")
            return
        kept = [r for r in read_metrics(self.path) if r["step"] <= resume_step] if self.path.exists() else []
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, user_file_mode())  # the user's umask, not mkstemp's 0600
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(record) + "\n" for record in kept)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._file = open(self.path, "a", encoding="utf-8")

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Write ``{"step": step, "time": <unix seconds>, **metrics}`` as one line.

        Values may be Python/NumPy numbers, strings, or one-element tensors.
        """
        if not isinstance(step, int) or isinstance(step, bool):
            raise TypeError(f"MetricsLogger.log: step must be an int (got {step!r})")
        clash = {"step", "time"} & set(metrics)
        if clash:
            raise ValueError(f"MetricsLogger.log: metric names {sorted(clash)} are reserved")
        record = {"step": step, "time": time.time()}
        record.update((key, _json_scalar(key, value)) for key, value in metrics.items())
        try:
            self._file.write(json.dumps(record, allow_nan=False) + "\n")
            self._file.flush()
        except OSError as e:  # a full disk: name the file (a flush error carries no file name)
            self._failed = True
            raise OSError(e.errno, e.strerror, str(self.path)) from e
        if not self.trackers:
            return
        values = {k: v for k, v in record.items() if k not in ("step", "time")}  # JSON-safe: numpy, tensors converted
        if not self.table:
            for tracker in self.trackers:
                tracker.log(step, values)
            return
        if self._rows_step is not None and step != self._rows_step:
            self._flush_rows()
        self._rows_step = step
        self._rows.append(values)

    def _flush_rows(self) -> None:
        if self._rows:
            for tracker in self.trackers:
                tracker.log_samples(self._rows_step, self._rows)
        self._rows = []

    def close(self) -> None:
        """Close the file (idempotent). After a failed write the unwritten rest is dropped: the error
        was raised by `log` already, and a torn last line is skipped by `read_metrics`."""
        if self.table and self.trackers:
            self._flush_rows()
        try:
            self._file.close()
        except OSError:
            if not self._failed:
                raise

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All records of a metrics file, in order.

    A last line without its newline (a write torn by a crash) is skipped; any other line that is not
    a JSON object with an integer ``step`` raises ``ValueError`` naming ``path:line``.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")[:-1]  # the last piece is "" or a torn write
    records = []
    for number, record in jsonl_rows(lines, str(path)):
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise ValueError(f"{path} line {number}: expected an object with an integer 'step'")
        records.append(record)
    return records
