"""Progress bars (rich) that show the latest training numbers and stay quiet off a terminal.

On a terminal the bar redraws in place; when stderr is not a TTY (CI, redirected logs) rich draws
nothing while running and prints the final state once. Bars go to stderr so stdout stays clean for
results (benchmarks print their JSON last line there). Pass ``disable=not is_main()`` in
multi-process runs.

>>> with progress_bar(3, "train", disable=True) as bar:
...     for _ in range(3):
...         bar.advance(loss=0.5)
"""

from __future__ import annotations

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


@contextmanager
def progress_bar(total: int | None, description: str, disable: bool = False) -> Iterator[ProgressBar]:
    """A rich progress bar for `total` steps (None: unknown) labelled `description`."""
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
