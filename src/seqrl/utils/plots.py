"""PNG plots of training curves and before/after comparisons.

Figures are drawn with matplotlib's object API (``Figure`` + Agg canvas), never through ``pyplot``,
so no global backend or figure state is touched and nothing needs a display. Files are written
atomically (temp file + ``os.replace``).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from seqrl.config import user_file_mode

__all__ = ["plot_bars", "plot_metrics"]

SMOOTH_MIN_POINTS = 20  # curves with more points get a moving-average line


def _save(fig: Figure, out_png: str | os.PathLike) -> Path:
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, user_file_mode())  # the user's umask, not mkstemp's 0600
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", dpi=100)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def _moving_average(y: np.ndarray, window: int) -> np.ndarray:
    return np.convolve(y, np.ones(window) / window, mode="valid")


def plot_metrics(
    records: Sequence[Mapping[str, Any]], keys: Sequence[str], out_png: str | os.PathLike, title: str = ""
) -> Path:
    """One subplot per metric key against ``step``; returns the PNG path.

    Keys no record holds are skipped (at least one must be present); ``None`` values (NaN/inf in
    the metrics file) are left out of the curve. Curves with more than ``SMOOTH_MIN_POINTS`` points
    are drawn light with a centred moving average (window = 1/10 of the points) on top.
    """
    series = {}
    for key in keys:
        points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
        if points:
            series[key] = np.asarray(points, dtype=np.float64)  # (N, 2): step, value
    if not series:
        raise ValueError(f"plot_metrics: none of the keys {list(keys)} has a value in the records")
    ncols = min(3, len(series))
    nrows = math.ceil(len(series) / ncols)
    fig = Figure(figsize=(4.5 * ncols, 3.2 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (key, xy) in zip(axes, series.items()):
        x, y = xy[:, 0], xy[:, 1]
        if len(x) > SMOOTH_MIN_POINTS:
            window = len(x) // 10
            ax.plot(x, y, color="tab:blue", alpha=0.3, linewidth=1)
            start = (window - 1) // 2  # centre the average on its window
            smooth = _moving_average(y, window)
            ax.plot(x[start : start + len(smooth)], smooth, color="tab:blue", linewidth=1.8)
        else:
            ax.plot(x, y, color="tab:blue", marker="o" if len(x) < 5 else None)
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in axes[len(series) :]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    return _save(fig, out_png)


def plot_bars(
    labels: Sequence[str],
    values: Sequence[float] | Mapping[str, Sequence[float]],
    out_png: str | os.PathLike,
    title: str,
    ylabel: str,
) -> Path:
    """A bar chart, e.g. accuracy before/after training; returns the PNG path.

    `values` is one number per label, or a mapping ``series name → one number per label`` (e.g.
    ``{"before": [...], "after": [...]}``) drawn as grouped bars with a legend. Bars carry their value.
    """
    groups = dict(values) if isinstance(values, Mapping) else {"": values}
    for name, series in groups.items():
        if len(series) != len(labels):
            where = f" series {name!r}" if name else ""
            raise ValueError(f"plot_bars:{where} has {len(series)} values for {len(labels)} labels")
    fig = Figure(figsize=(max(4.0, 1.2 * len(labels) * len(groups) + 1.5), 3.5), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(labels))
    width = 0.8 / len(groups)
    for i, (name, series) in enumerate(groups.items()):
        bars = ax.bar(x + (i - (len(groups) - 1) / 2) * width, series, width, label=name or None)
        ax.bar_label(bars, fmt="%.3g", fontsize=8)
    ax.set_xticks(x, list(labels))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if isinstance(values, Mapping):
        ax.legend()
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, out_png)
