"""Preference pairs for reward models, in TRL's preference format.

A row is ``{"prompt", "chosen", "rejected"}`` (explicit prompt) or ``{"chosen", "rejected"}``
(implicit prompt: each side is the whole text, or the whole conversation). Each field is a string
(standard) or a list of ``{"role", "content"}`` messages (conversational; the chosen / rejected side
then ends with the assistant's turn). An optional numeric ``margin`` column feeds the loss's margin.
Rows come from local files (``.jsonl``, ``.json``, ``.parquet``, ``.csv``) or anything
``datasets.load_dataset`` opens (a hub name or a dataset folder, its "train" split). A malformed row
raises `DatasetFormatError` naming the file, the row and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from seqrl.data.jsonl import LOCAL_SUFFIXES, DatasetFormatError, _field, _messages, _read_local

Messages = tuple[dict, ...]


@dataclass(frozen=True)
class PreferencePair:
    """One comparison: `chosen` is preferred to `rejected` as an answer to `prompt`.

    Standard rows hold strings (`prompt` "" for an implicit prompt); conversational rows hold the
    prompt's messages and the answer's text (the final assistant turn)."""

    prompt: str | Messages
    chosen: str
    rejected: str
    margin: float | None = None
    where: str = ""
    split: str | None = None
    """"train" or "test" from the row's split column (`load_preferences`'s split_field); None without one."""


def _common_prefix(a: Messages, b: Messages) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _answer(messages: Messages, field: str, where: str) -> str:
    if len(messages) != 1 or messages[0]["role"] != "assistant":
        raise DatasetFormatError(f"{where}: field {field!r} must end in exactly one assistant message after the "
                                 f"prompt (got roles {[m['role'] for m in messages]})")
    return messages[0]["content"]


def parse_preference_row(row: object, where: str, split_field: str | None = None) -> PreferencePair:
    """One row of TRL's preference format as a `PreferencePair` (see the module docstring); with
    `split_field`, that column says "train" or "test"."""
    if not isinstance(row, dict):
        raise DatasetFormatError(f"{where}: a row must be a JSON object (got {type(row).__name__})")
    if split_field is not None:
        split = _field(row, split_field, where, (str,))
        if split not in ("train", "test"):
            raise DatasetFormatError(f"{where}: field {split_field!r} must be 'train' or 'test' (got {split!r})")
        return replace(parse_preference_row({k: v for k, v in row.items() if k != split_field}, where), split=split)
    chosen = _field(row, "chosen", where, (str, list))
    rejected = _field(row, "rejected", where, (str, list))
    prompt = _field(row, "prompt", where, (str, list)) if "prompt" in row and row["prompt"] is not None else None
    margin = None
    if row.get("margin") is not None:
        margin = float(_field(row, "margin", where, (int, float)))
    conversational = [isinstance(v, list) for v in (chosen, rejected) + ((prompt,) if prompt is not None else ())]
    if any(conversational) and not all(conversational):
        raise DatasetFormatError(f"{where}: fields prompt / chosen / rejected mix strings and message lists; "
                                 f"use one form for all")
    if not all(conversational):  # an empty answer is an answer (a policy that stopped at once)
        return PreferencePair(prompt or "", chosen, rejected, margin, where)
    c, r = _messages(chosen, "chosen", where), _messages(rejected, "rejected", where)
    if prompt is None:  # implicit prompt: the shared leading messages
        n = _common_prefix(c, r)
        if n == 0:
            raise DatasetFormatError(f"{where}: fields 'chosen' and 'rejected' share no leading message, so no "
                                     f"prompt can be extracted; add a 'prompt' field")
        p, c, r = c[:n], c[n:], r[n:]
    else:
        p = _messages(prompt, "prompt", where)
    return PreferencePair(p, _answer(c, "chosen", where), _answer(r, "rejected", where), margin, where)


def load_preferences(source: str | Path, limit: int = -1, split_field: str | None = None) -> list[PreferencePair]:
    """Every row of `source` (a local file or a `datasets` name / folder) as preference pairs; at most
    `limit` (-1: all); `split_field` names a column saying "train" or "test". An empty source is an
    error."""
    path = Path(source)
    pairs: list[PreferencePair] = []
    if path.suffix in LOCAL_SUFFIXES:
        for _, where, row in _read_local(path):
            pairs.append(parse_preference_row(row, where, split_field))
            if 0 <= limit == len(pairs):
                break
    else:
        import datasets

        try:
            loaded = datasets.load_dataset(str(source), split="train")
        except Exception as e:  # noqa: BLE001 — a missing dataset or no network: one line naming it
            raise ValueError(f"preference data {str(source)!r}: not a local {'/'.join(LOCAL_SUFFIXES)} file and "
                             f"datasets.load_dataset failed ({type(e).__name__}: {e})") from None
        for i, row in enumerate(loaded, start=1):
            pairs.append(parse_preference_row(dict(row), f"{source} row {i}", split_field))
            if 0 <= limit == len(pairs):
                break
    if not pairs:
        raise ValueError(f"preference data {str(source)!r} has no rows")
    return pairs
