"""The one JSONL line reader: every file of one JSON value per line (datasets, step labels, PRM labels,
metrics, task sets) is read through `jsonl_rows`, so a bad line is reported the same way everywhere."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any


def jsonl_rows(lines: str | Iterable[str], where: str, error: type[Exception] = ValueError) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of every non-blank line (`lines`: the text, or its lines); a line that is not
    JSON raises `error` as ``"<where> line <n>: invalid JSON (<why>)"``.

    >>> list(jsonl_rows('{"a": 1}\\n\\n[2]\\n', "x.jsonl"))
    [(1, {'a': 1}), (3, [2])]
    >>> next(jsonl_rows('{"a": ', "x.jsonl"))
    Traceback (most recent call last):
    ...
    ValueError: x.jsonl line 1: invalid JSON (Expecting value)
    """
    for number, line in enumerate(lines.splitlines() if isinstance(lines, str) else lines, start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as e:
            raise error(f"{where} line {number}: invalid JSON ({e.msg})") from None
