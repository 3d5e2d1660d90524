"""Progress bars (rich) that show the latest training numbers and stay quiet off a terminal.

On a terminal the bar redraws in place; when stderr is not a TTY (CI, redirected logs) a plain line
(``sft run: 40/200 (20%) 12 s loss=0.53``) is written every `PLAIN_EVERY_S` seconds and at the end,
so a redirected log shows progress while it runs. Bars go to stderr so stdout stays clean for
results (benchmarks print their JSON last line there). Pass ``disable=not is_main()`` in
multi-process runs.

>>> with progress_bar(3, "train", disable=True) as bar:
...     for _ in range(3):
...         bar.advance(loss=0.5)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Sized
from contextlib import contextmanager
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["ProgressBar", "progress_bar", "track"]

T = TypeVar("T")
PLAIN_EVERY_S = 10.0
"""Seconds between plain progress lines when stderr is not a terminal."""


def _format_fields(fields: dict[str, Any]) -> str:
    """``loss=0.1235  phase=sft`` — floats to 4 significant digits."""
    return "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in fields.items())


class ProgressBar:
    """Handle yielded by `progress_bar`: ``advance(n=1, **fields)`` moves the bar and shows the
    latest value of each field (``loss=0.1234``)."""

    def __init__(self, progress: Progress, task: TaskID) -> None:
        self._progress = progress
        self._task = task
        self.fields: dict[str, Any] = {}

    def advance(self, n: int = 1, **fields: Any) -> None:
        """Advance by `n` steps (0 just updates the fields) and update the shown fields."""
        self.fields.update(fields)
        self._progress.update(self._task, advance=n, info=_format_fields(self.fields))


class PlainProgress:
    """`ProgressBar` off a terminal: a plain stderr line every `every_s` seconds and at the end."""

    def __init__(self, total: int | None, description: str, every_s: float = PLAIN_EVERY_S, stream: Any = None) -> None:
        self.total, self.description, self.every_s = total, description, every_s
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.fields: dict[str, Any] = {}
        self._t0 = self._last = time.monotonic()
        self._shown: tuple[int, str] | None = None

    def advance(self, n: int = 1, **fields: Any) -> None:
        self.fields.update(fields)
        self.done += n
        now = time.monotonic()
        if n and now - self._last >= self.every_s:
            self._last = now
            self.line()

    def finish(self) -> None:
        """The closing line, unless the last line shown already says the same."""
        if self._shown != (self.done, _format_fields(self.fields)):
            self.line()

    def line(self) -> None:
        of = f"/{self.total} ({100 * self.done / self.total:.0f}%)" if self.total else ""
        info = _format_fields(self.fields)
        self._shown = (self.done, info)
        print(f"{self.description}: {self.done}{of} {time.monotonic() - self._t0:.0f} s"
              + (f" {info}" if info else ""), file=self.stream, flush=True)


@contextmanager
def progress_bar(total: int | None, description: str, disable: bool = False) -> Iterator[ProgressBar]:
    """A rich progress bar for `total` steps (None: unknown) labelled `description`; plain lines
    every `PLAIN_EVERY_S` seconds when stderr is not a terminal.

    An exception leaving the block is marked ``raised_in_loop = True``: the CLI reports those with
    their traceback (a bug in a loop), not as a one-line input error.
    """
    try:
        if not disable and not sys.stderr.isatty():
            plain = PlainProgress(total, description)
            yield plain  # type: ignore[misc]
            plain.finish()
            return
        with _rich(total, description, disable) as bar:
            yield bar
    except Exception as e:
        try:
            e.raised_in_loop = True  # type: ignore[attr-defined]
        except AttributeError:  # pragma: no cover - exceptions without a __dict__
            pass
        raise


@contextmanager
def _rich(total: int | None, description: str, disable: bool) -> Iterator[ProgressBar]:
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
        console=Console(stderr=True),
        disable=disable,
    )
    with progress:
        yield ProgressBar(progress, progress.add_task(description, total=total, info=""))


def track(
    iterable: Iterable[T], description: str, total: int | None = None, disable: bool = False
) -> Iterator[T]:
    """Iterate over `iterable` with a progress bar (`total` defaults to ``len(iterable)``)."""
    if total is None and isinstance(iterable, Sized):
        total = len(iterable)
    with progress_bar(total, description, disable=disable) as bar:
        for item in iterable:
            yield item
            bar.advance()
