"""Question/answer datasets from files or the Hugging Face hub (`JsonlTask`).

Local files: ``.jsonl`` (one JSON object a line), ``.json`` (JSON lines, or one JSON array),
``.parquet`` and ``.csv`` (read with `datasets`). Any other path (a hub dataset name, a local
dataset folder) goes to ``datasets.load_dataset(path, config_name)``, and its own "train" and
"test" splits are used.

GSM8K answers (``"Natalia sold 48/2 = <<48/2=24>>24 clips ...\\n#### 72"``) become the gold answer
after ``####`` and one step per line before it, calculator annotations ``<<...>>`` removed.

Every other column of a row lands in ``problem.metadata`` under its own name (the answer column too,
as written, so a TRL-style reward gets every column), JSON-serialisable values only; ``source`` says
where the row came from unless a column has that name. A prompt that is a list of ``{"role",
"content"}`` messages is a conversational row: the messages go to the chat template as they are.

A malformed row raises `DatasetFormatError` naming the file, the row (1-based line for JSON lines)
and the field: ``data.jsonl line 3: missing field 'answer'``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from seqrl.answers import FormattedAnswers, check_answer_format, compare_answers, find_answer, verdict
from seqrl.data.splits import check_split, seeded_rng, split_of
from seqrl.types import Problem, RewardResult, Task
from seqrl.utils.jsonl import jsonl_rows

MAX_ANSWER_CHARS = 1000
LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
_CALCULATOR_RE = re.compile(r"<<[^>]*>>")


PROMPT_FIELDS = ("question", "prompt", "problem", "messages")
"""Columns `JsonlTask` takes as the prompt when none is named, in this order (TRL's formats included)."""
ANSWER_FIELDS = ("answer", "solution", "completion")
"""Columns it takes as the gold answer when none is named."""


class DatasetFormatError(ValueError):
    """A dataset row that cannot become a problem; the message names file, row and field."""


def parse_gsm8k_answer(text: str) -> tuple[str, tuple[str, ...]]:
    """``(gold answer, steps)`` of a GSM8K-style answer; plain answers have no steps.

    >>> parse_gsm8k_answer("48/2 = <<48/2=24>>24 in May.\\n48+24 = <<48+24=72>>72\\n#### 72")
    ('72', ('48/2 = 24 in May.', '48+24 = 72'))
    >>> parse_gsm8k_answer(" 7 ")
    ('7', ())
    """
    if "####" not in text:
        return text.strip(), ()
    work, _, gold = text.rpartition("####")
    lines = (_CALCULATOR_RE.sub("", line).strip() for line in work.splitlines())
    return gold.strip(), tuple(line for line in lines if line)


def answers_match(gold: str, pred: str) -> bool:
    """Whether `pred` states the gold answer: the comparison the math reward uses
    (`seqrl.answers.compare_answers`: exact numbers, text for words, math-verify otherwise;
    hedges and bare equations never match).

    >>> answers_match("1,000", "1000.0"), answers_match("Paris", " paris "), answers_match("3", "4")
    (True, True, False)
    """
    return compare_answers(gold, pred)[0]


class JsonlTask(FormattedAnswers, Task):
    """Problems read from a dataset file (or hub dataset) with a question and an answer field.

    prompt_field: the question's column; "auto" (the default) takes the first of `PROMPT_FIELDS`
                 present in the first row — ``question``, TRL's ``prompt`` (text or conversational
                 messages), ``problem``, ``messages`` (the turns before the last assistant reply).
    answer_field: the gold answer's column; "auto" takes the first of `ANSWER_FIELDS` present
                 (``answer``, ``solution``, ``completion``), none when the rows have none (the user's
                 rewards score them). Every column, the prompt's included, keeps its own name in
                 templates (``{prompt}``) and rewards.
    split_field: a field holding "train" or "test"; without it a stable hash of the prompt text
                 assigns rows to splits (~10% test), so equal prompts share a split. A hub dataset
                 with no ``test`` split gets its held-out rows by the same rule, and says so.
    test_fraction: the share of distinct prompts the hash rule holds out (None: ≈ 10%); a problem-
                 disjoint split, the same in every run. Only where the rule applies (no split_field,
                 no ``test`` split of its own).
    config_name: the hub dataset's configuration (e.g. "main" for "openai/gsm8k").
    name:        defaults to the file's stem (or the hub name).
                 None for a dataset without gold answers (e.g. code with a ``tests`` column): the
                 task's verifier then scores 0 ("no gold answer"); rewards read the columns.

    Answer fields may hold strings or numbers; prompts are strings or lists of messages.
    """

    def __init__(
        self,
        path: str | Path,
        prompt_field: str = "auto",
        answer_field: str | None = "auto",
        split_field: str | None = None,
        name: str | None = None,
        config_name: str | None = None,
        answer_format: str = "answer_tag",
        test_fraction: float | None = None,
    ):
        self.answer_format = check_answer_format(answer_format)
        if test_fraction is not None and (isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float))
                                          or not 0 < test_fraction < 1):
            raise ValueError(f"task.kwargs.test_fraction must be a number in (0, 1) (got {test_fraction!r})")
        if test_fraction is not None and split_field is not None:
            raise ValueError("task.kwargs.test_fraction and split_field exclude each other: the split column "
                             "already says which rows are held out")
        self.test_fraction = test_fraction
        self.path, self.prompt_field, self.answer_field = str(path), prompt_field, answer_field
        self._auto_no_answer = False
        self.split_field = split_field
        local = Path(path)
        self.name = name or (local.stem if local.suffix in LOCAL_SUFFIXES else self.path)
        self._rows: dict[str, list[Problem]] = {"train": [], "test": []}
        self._own_split = False  # a hub dataset's own test split (else split_field or the hash rule)
        if local.suffix in LOCAL_SUFFIXES:
            for number, where, row in _read_local(local):
                self._resolve_fields(row, where)
                problem, split = self._problem(row, number, where)
                self._rows[split].append(problem)
        else:
            self._load_hub(config_name)

    def _resolve_fields(self, row, where: str) -> None:
        """Fix "auto" prompt/answer fields from the first row (`PROMPT_FIELDS`, `ANSWER_FIELDS`)."""
        if not isinstance(row, dict):
            return  # `_problem` names the row
        if self.prompt_field == "auto":
            found = next((f for f in PROMPT_FIELDS if f in row), None)
            if found is None:
                raise DatasetFormatError(f"{where}: no prompt column (looked for {', '.join(PROMPT_FIELDS)}; the row "
                                         f"has {', '.join(map(str, row)) or 'none'}); name it in task.kwargs.prompt_field")
            self.prompt_field = found
        if self.answer_field == "auto":
            self.answer_field = next((f for f in ANSWER_FIELDS if f in row and f != self.prompt_field), None)
            if self.answer_field is None:  # said once: every verdict would be 0 otherwise, silently
                print(f"{where}: no gold-answer column ({', '.join(ANSWER_FIELDS)}): the task's verifier scores 0 "
                      "and your rewards score the rows; name the column in task.kwargs.answer_field, or set it to "
                      "null to silence this", file=sys.stderr)
                self._auto_no_answer = True

    def _load_hub(self, config_name: str | None) -> None:
        import datasets

        loaded = datasets.load_dataset(self.path, config_name)
        if "train" not in loaded:
            raise DatasetFormatError(f"{self.path}: no 'train' split (splits: {', '.join(loaded)})")
        own_test = self._own_split = "test" in loaded
        if not own_test:
            print(f"{self.path}: no 'test' split; {self._rule()}", file=sys.stderr)
        elif self.test_fraction is not None:
            raise ValueError(f"task.kwargs.test_fraction: {self.path} has a 'test' split of its own, which is used")
        for split in self._rows if own_test else ("train",):
            for i, row in enumerate(loaded[split], start=1):
                where = f"{self.path} {split} row {i}"
                self._resolve_fields(row, where)
                problem, assigned = self._problem(row, i, where, split if own_test else None)
                self._rows[assigned].append(problem)

    def _problem(
        self, row, number: int, where: str, split: str | None = None
    ) -> tuple[Problem, str]:
        """The problem in `row` (line or row `number`, described by `where`) and its split."""
        if not isinstance(row, dict):
            raise DatasetFormatError(f"{where}: expected an object, got {type(row).__name__}")
        prompt = _field(row, self.prompt_field, where, (str, list))
        messages: tuple[dict, ...] = ()
        if isinstance(prompt, list):
            messages = _messages(prompt, self.prompt_field, where)
            if self.prompt_field == "messages" and len(messages) > 1 and messages[-1]["role"] == "assistant":
                messages = messages[:-1]  # a chat row: the prompt is every turn before the reply
            prompt = next((m["content"] for m in reversed(messages) if m["role"] == "user"), messages[-1]["content"])
        if self.answer_field is not None and isinstance(row.get(self.answer_field), list):
            answer = _messages(row[self.answer_field], self.answer_field, where)[-1]["content"]  # TRL's chat reply
        else:
            answer = "" if self.answer_field is None else _field(row, self.answer_field, where, (str, int, float))
        if split is None and self.split_field is not None:
            split = _field(row, self.split_field, where, (str,))
            if split not in ("train", "test"):
                raise DatasetFormatError(
                    f"{where}: field {self.split_field!r} must be 'train' or 'test' (got {split!r})"
                )
        gold, steps = parse_gsm8k_answer(str(answer))
        metadata = {"source": where}
        for column, value in row.items():
            if column == self.split_field:
                continue
            try:
                json.dumps(value)
            except (TypeError, ValueError) as e:
                raise DatasetFormatError(f"{where}: column {column!r} is not JSON-serialisable "
                                         f"({type(value).__name__}: {e})") from None
            metadata[str(column)] = value
        problem = Problem(prompt, gold, steps, metadata, f"{self.name}/{number}", messages)
        return problem, split or split_of(prompt, self.test_fraction)

    def _rule(self) -> str:
        share = "≈ 10%" if self.test_fraction is None else f"{self.test_fraction:.0%}"
        return (f"holding out {share} of the prompts by a stable hash of each (equal prompts share a split; "
                "task.kwargs.test_fraction sets the share)")

    def problems(self, split: str, n: int, seed: int = 0) -> list[Problem]:
        """`n` rows of `split` in a seeded shuffle (``n=-1``: all of them).

        Raises ValueError when the split has fewer than `n` rows.
        """
        check_split(split)
        rows = self._rows[split]
        if n == -1:
            n = len(rows)
        if not 0 <= n <= len(rows):
            raise ValueError(
                f"{self.name}: asked for {n} {split} problems but there are {len(rows)}"
            )
        order = list(range(len(rows)))
        seeded_rng(self.name, split, seed).shuffle(order)
        return [rows[i] for i in order[:n]]

    def empty_split_reason(self, split: str) -> str:
        """Why `split` holds no rows, in the terms of how this dataset is split (for an error message)."""
        if self.split_field is not None:
            return f"{self.path}: its split column {self.split_field!r} marks no row '{split}'"
        if self._own_split:
            return f"{self.path}: its own '{split}' split is empty"
        other = "train" if split == "test" else "test"
        return (f"{self.path}: the stable hash put all {len(self._rows[other])} of its prompts in '{other}'; set "
                f"task.kwargs.test_fraction, or mark rows with a split column (task.kwargs.split_field)")

    def verify(self, problem: Problem, completion: str) -> RewardResult:
        """1.0 when the ``<answer>`` matches the gold answer (see `answers_match`)."""
        if self.answer_field is None:
            why = ("no gold-answer column found (task.kwargs.answer_field names it)" if self._auto_no_answer
                   else "no gold answer (task.kwargs.answer_field is null)")
            return RewardResult(0.0, why)
        answer, why = find_answer(completion, self.answer_format)
        if answer is None:
            return RewardResult(0.0, why)
        return verdict(problem.answer, answer, MAX_ANSWER_CHARS)


def _field(row: dict, field: str, where: str, types: tuple[type, ...]):
    """``row[field]``, checked to be one of `types` (bools are not numbers here)."""
    if field not in row:
        raise DatasetFormatError(f"{where}: missing field {field!r}")
    value = row[field]
    if isinstance(value, bool) or not isinstance(value, types):
        wanted = " or ".join(t.__name__ for t in types)
        raise DatasetFormatError(
            f"{where}: field {field!r} must be {wanted} (got {type(value).__name__})"
        )
    return value


def _messages(value: list, field: str, where: str) -> tuple[dict, ...]:
    """A conversational prompt checked: non-empty, each item ``{"role": str, "content": str}``."""
    if not value:
        raise DatasetFormatError(f"{where}: field {field!r} is an empty list of messages")
    out = []
    for i, m in enumerate(value):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise DatasetFormatError(f"{where}: field {field!r} item {i} must be {{'role': str, 'content': str}} "
                                     f"(got {str(m)[:80]!r})")
        out.append({"role": m["role"], "content": m["content"]})
    return tuple(out)


def _read_local(path: Path):
    """``(number, where, row)`` for each row of a local file: its 1-based line (JSON lines) or row
    number, and `where` naming both, e.g. ``"data.jsonl line 3"``."""
    if not path.exists():
        raise FileNotFoundError(f"no such dataset file: {path}")
    if path.suffix in (".parquet", ".csv"):
        import datasets

        loaded = datasets.load_dataset(path.suffix[1:], data_files=str(path), split="train")
        for i, row in enumerate(loaded, start=1):
            yield i, f"{path} row {i}", row
        return
    if path.suffix not in (".jsonl", ".json"):
        raise ValueError(f"unsupported dataset file type {path.suffix!r}; use {LOCAL_SUFFIXES}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err})") from err
    if not text.strip():
        raise ValueError(f"{path}: the file is empty (no rows)")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as err:
            where = f"{path} line {err.lineno}"
            raise DatasetFormatError(f"{where}: invalid JSON ({err.msg})") from None
        for i, row in enumerate(rows, start=1):
            yield i, f"{path} item {i}", row
        return
    for lineno, row in jsonl_rows(text, str(path), DatasetFormatError):
        yield lineno, f"{path} line {lineno}", row


SPLIT_COLUMN = "seqrl_split"
"""The column `write_rows` adds to say which rows are held out (``train`` / ``test``)."""


def _rows_of(data, what: str):
    """(where, row) of a dataset given as a `datasets.Dataset`, an iterable of dicts, or a local file."""
    if isinstance(data, (str, os.PathLike)):
        for _, where, row in _read_local(Path(data)):
            yield where, row
        return
    if isinstance(data, dict):
        raise DatasetFormatError(f"{what}: a mapping, not rows (a DatasetDict? pass one split, e.g. dataset['train'])")
    for i, row in enumerate(data, start=1):
        yield f"{what} row {i}", row


def write_rows(train, test, out: str | Path, keep: bool = True) -> Path:
    """The rows of `train` and of `test` (None: no held-out set) as one JSON-lines file at `out`, each
    with `SPLIT_COLUMN` when `test` is given; rows may be a `datasets.Dataset`, a list of dicts or a
    local file. A row that is not a JSON object of JSON values is a `DatasetFormatError` naming it.
    With `keep` (a resumed run) an existing `out` must hold the same rows (a run folder's data stays
    what the run trained on), else it is replaced. Written atomically, each process through its own
    temporary file, so processes writing the same rows at once (torchrun) never see a torn file."""
    lines = []
    for data, split, what in ((train, "train", "train_dataset"), (test, "test", "eval_dataset")):
        if data is None:
            continue
        for where, row in _rows_of(data, what):
            if not isinstance(row, dict):
                raise DatasetFormatError(f"{where}: expected an object, got {type(row).__name__}")
            if test is not None and SPLIT_COLUMN in row:
                raise DatasetFormatError(f"{where}: column {SPLIT_COLUMN!r} is reserved (it marks the held-out rows)")
            record = {**row, SPLIT_COLUMN: split} if test is not None else dict(row)
            try:
                lines.append(json.dumps(record, ensure_ascii=False))
            except (TypeError, ValueError) as e:
                bad = next((k for k, v in row.items() if not _json_ok(v)), "?")
                raise DatasetFormatError(f"{where}: column {bad!r} is not JSON-serialisable ({e})") from None
    if not lines:
        raise DatasetFormatError("train_dataset: no rows")
    text = "\n".join(lines) + "\n"
    out = Path(out)
    if out.exists() and keep:
        if out.read_text(encoding="utf-8") != text:
            raise ValueError(f"{out} holds other rows than the dataset given: a run's data cannot change "
                             "(start a new run, another output_dir / run.name)")
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    return out


def _json_ok(value) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
