"""Step-labelled solutions for process reward models: splitting, reading, writing, exact arithmetic truth.

A completion in the house format ``<think>s1\\n\\ns2</think><answer>a</answer>`` has the steps
``["s1", "s2", "<answer>a</answer>"]``: the `STEP_SEP`-separated parts inside ``<think>``, then the
final answer as the last step (`split_steps`). The stepwise file format is TRL's, one JSON object a
line (or any file `datasets` reads: ``.json``, ``.parquet``, ``.csv``)::

    {"prompt": "47+85=", "completions": ["7+5=12", "4+8+1=13", "<answer>132</answer>"],
     "labels": [true, true, true]}

Labels are booleans (hard) or floats in [0, 1] (soft: the fraction of rollouts from that step's
prefix that reached the gold answer, Math-Shepherd). A malformed row raises `StepwiseFormatError`
naming the file, the line and the field.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from seqrl.data.jsonl import DatasetFormatError
from seqrl.types import ANSWER_CLOSE, ANSWER_OPEN, STEP_SEP, THINK_CLOSE, THINK_OPEN, Problem, extract_answer
from seqrl.utils.jsonl import jsonl_rows

STEPWISE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
_INT_RE = re.compile(r"[+-]?[0-9]+")


class StepwiseFormatError(DatasetFormatError):
    """A stepwise row that cannot be used; the message names file, line and field."""


@dataclass(frozen=True)
class StepExample:
    """One solution as steps with a label per step (TRL's stepwise row).

    prompt:      the question as plain text.
    completions: the steps, in order (the final answer is the last step).
    labels:      one per step: 1.0/0.0 (hard) or a fraction in [0, 1] (soft).
    """

    prompt: str
    completions: tuple[str, ...]
    labels: tuple[float, ...]

    def to_json(self) -> dict:
        hard = all(x in (0.0, 1.0) for x in self.labels)
        return {"prompt": self.prompt, "completions": list(self.completions),
                "labels": [bool(x) for x in self.labels] if hard else list(self.labels)}


def split_steps(completion: str) -> list[str]:
    """The steps of a house-format completion: the think steps, then ``<answer>…</answer>`` if any.

    An unclosed ``<think>`` (a truncated completion) gives its steps so far; empty parts are dropped;
    a completion without ``<think>`` has only its answer step (or no step at all).

    >>> split_steps("<think>7+5=12\\n\\n4+8+1=13</think><answer>132</answer>")
    ['7+5=12', '4+8+1=13', '<answer>132</answer>']
    >>> split_steps("<answer>7</answer>"), split_steps("<think>1+1=2\\n\\n"), split_steps("junk")
    (['<answer>7</answer>'], ['1+1=2'], [])
    """
    steps: list[str] = []
    start = completion.find(THINK_OPEN)
    rest = completion
    if start >= 0:
        body = completion[start + len(THINK_OPEN):]
        end = body.find(THINK_CLOSE)
        think, rest = (body[:end], body[end + len(THINK_CLOSE):]) if end >= 0 else (body, "")
        steps = [s.strip() for s in think.split(STEP_SEP) if s.strip()]
    answer = extract_answer(rest)
    if answer is not None:
        steps.append(f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}")
    return steps


def prefix_text(steps: list[str] | tuple[str, ...]) -> str:
    """The house-format text of a solution's first steps, ready for the policy to continue: think steps
    end with `STEP_SEP` so the next token starts a new step.

    >>> prefix_text(["7+5=12"])
    '<think>7+5=12\\n\\n'
    >>> prefix_text(["7+5=12", "<answer>12</answer>"])
    '<think>7+5=12</think><answer>12</answer>'
    """
    think = [s for s in steps if not s.startswith(ANSWER_OPEN)]
    answer = [s for s in steps if s.startswith(ANSWER_OPEN)]
    if answer:
        return (f"{THINK_OPEN}{STEP_SEP.join(think)}{THINK_CLOSE}" if think else "") + answer[0]
    return f"{THINK_OPEN}{STEP_SEP.join(think)}{STEP_SEP}" if think else THINK_OPEN


def step_pieces(steps: list[str] | tuple[str, ...]) -> list[str]:
    """The text of each step as a reward model reads it: the pieces concatenate to the house-format
    text of the solution (`prefix_text`), and each piece ends where its step ends — at the separator
    after a think step, ``</think>`` after the last one, ``</answer>`` after the answer.

    >>> step_pieces(["7+5=12", "4+8+1=13", "<answer>132</answer>"])
    ['<think>7+5=12\\n\\n', '4+8+1=13</think>', '<answer>132</answer>']
    >>> step_pieces(["a", "b"])  # no answer step (a prefix, or plain stepwise data)
    ['<think>a\\n\\n', 'b\\n\\n']
    >>> "".join(step_pieces(["a", "<answer>1</answer>"])) == prefix_text(["a", "<answer>1</answer>"])
    True
    """
    think = [s for s in steps if not s.startswith(ANSWER_OPEN)]
    answered = len(think) < len(steps)
    pieces = []
    for i, s in enumerate(steps):
        if s.startswith(ANSWER_OPEN):
            pieces.append(s)
            continue
        k = len(pieces)
        end = THINK_CLOSE if answered and k == len(think) - 1 else STEP_SEP
        pieces.append((THINK_OPEN if k == 0 else "") + s + end)
    return pieces


def _where(file: str, line: int) -> str:
    return f"{file} line {line}"


def parse_row(row: object, file: str, line: int) -> StepExample:
    """A `StepExample` from one decoded row; `StepwiseFormatError` names file, line and field."""
    where = _where(file, line)
    if not isinstance(row, dict):
        raise StepwiseFormatError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for name in ("prompt", "completions", "labels"):
        if name not in row:
            raise StepwiseFormatError(f"{where}: missing field {name!r}")
    prompt, steps, labels = row["prompt"], row["completions"], row["labels"]
    if not isinstance(prompt, str):
        raise StepwiseFormatError(f"{where}: field 'prompt' must be a string (got {type(prompt).__name__})")
    if not isinstance(steps, (list, tuple)) or not steps:
        raise StepwiseFormatError(f"{where}: field 'completions' must be a non-empty list of step strings")
    for i, s in enumerate(steps):
        if not isinstance(s, str) or not s.strip():
            raise StepwiseFormatError(f"{where}: field 'completions'[{i}] must be a non-empty string (got {s!r})")
    if not isinstance(labels, (list, tuple)) or len(labels) != len(steps):
        got = len(labels) if isinstance(labels, (list, tuple)) else type(labels).__name__
        raise StepwiseFormatError(f"{where}: field 'labels' must be a list with one label per step "
                                  f"({len(steps)} steps, got {got})")
    values = []
    for i, x in enumerate(labels):
        if isinstance(x, bool):
            values.append(float(x))
        elif isinstance(x, (int, float)) and math.isfinite(x) and 0.0 <= x <= 1.0:
            values.append(float(x))
        else:
            raise StepwiseFormatError(f"{where}: field 'labels'[{i}] must be a bool or a number in [0, 1] (got {x!r})")
    return StepExample(prompt, tuple(steps), tuple(values))


def read_stepwise(path: str | os.PathLike, split_field: str | None = None) -> list[StepExample]:
    """Every row of a stepwise file (``.jsonl``/``.json`` lines read here; other formats with `datasets`);
    `split_field`, a column saying "train" or "test", is checked and left out of the rows."""
    return [ex for ex, _ in _stepwise_rows(path, split_field)]


def read_stepwise_split(path: str | os.PathLike, split_field: str) -> tuple[list[StepExample], list[StepExample]]:
    """(train rows, test rows) of a stepwise file whose column `split_field` says "train" or "test"."""
    rows = _stepwise_rows(path, split_field)
    return [ex for ex, split in rows if split == "train"], [ex for ex, split in rows if split == "test"]


def _stepwise_rows(path: str | os.PathLike, split_field: str | None) -> list[tuple[StepExample, str | None]]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"stepwise data {path}: no such file")
    if path.suffix not in STEPWISE_SUFFIXES:
        raise StepwiseFormatError(f"{path}: unknown format {path.suffix!r}; use one of {STEPWISE_SUFFIXES}")

    def parsed(row: object, number: int) -> tuple[StepExample, str | None]:
        if split_field is None or not isinstance(row, dict):
            return parse_row(row, str(path), number), None
        split = row.get(split_field)
        if split not in ("train", "test"):
            raise StepwiseFormatError(f"{_where(str(path), number)}: field {split_field!r} must be 'train' or 'test' "
                                      f"(got {split!r})")
        return parse_row({k: v for k, v in row.items() if k != split_field}, str(path), number), split

    out = []
    if path.suffix in (".jsonl", ".json"):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json" and text.lstrip().startswith("["):
            try:
                rows = json.loads(text)
            except json.JSONDecodeError as e:
                raise StepwiseFormatError(f"{path}: not valid JSON: {e}") from e
            return [parsed(r, i + 1) for i, r in enumerate(rows)]
        for i, row in jsonl_rows(text, str(path), StepwiseFormatError):
            out.append(parsed(row, i))
    else:
        import datasets

        table = datasets.load_dataset(path.suffix[1:], data_files=str(path), split="train")
        out = [parsed(dict(r), i + 1) for i, r in enumerate(table)]
    if not out:
        raise StepwiseFormatError(f"{path}: no rows")
    return out


def write_stepwise(path: str | os.PathLike, examples: list[StepExample], append: bool = False) -> Path:
    """Write (or append) examples as JSON lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        for ex in examples:
            f.write(json.dumps(ex.to_json()) + "\n")
    return path


def step_value(step: str) -> int | None:
    """The integer a step states: after the last ``=`` of an equation, or inside ``<answer>``.

    >>> step_value("4+8+1=13"), step_value("<answer>-38</answer>"), step_value("hmm")
    (13, -38, None)
    """
    text = extract_answer(step) if step.startswith(ANSWER_OPEN) else step.rpartition("=")[2] if "=" in step else ""
    text = (text or "").strip()
    return int(text) if _INT_RE.fullmatch(text) and len(text) <= 40 else None


def arith_step_truth(problem: Problem, steps: list[str] | tuple[str, ...]) -> list[bool]:
    """Exact truth of each step of an arithmetic solution: a think step is right iff it states the value
    of the gold step at the same position; the answer step iff it states the gold answer.

    >>> p = Problem("47+85=", "132", steps=("7+5=12", "4+8+1=13"))
    >>> arith_step_truth(p, ["7+5=12", "4+8+1=14", "<answer>132</answer>"])
    [True, False, True]
    >>> arith_step_truth(p, ["7+5=12", "4+8+1=13", "1=1", "<answer>131</answer>"])
    [True, True, False, False]
    """
    gold = [step_value(s) for s in problem.steps]
    answer = step_value(f"{ANSWER_OPEN}{problem.answer}{ANSWER_CLOSE}")
    truth, k = [], 0
    for s in steps:
        value = step_value(s)
        if s.startswith(ANSWER_OPEN):
            truth.append(value is not None and value == answer)
        else:
            truth.append(k < len(gold) and value is not None and value == gold[k])
            k += 1
    return truth


def corrupted_arith_examples(problems: list[Problem], seed: int = 0, p_clean: float = 0.34) -> list[StepExample]:
    """Exactly labelled solutions built from arithmetic problems' gold steps: with probability
    `p_clean` the gold solution (every label true), else the gold solution with one step's stated
    value moved by ±1…±10 (that step labelled false, the others true by `arith_step_truth`).

    >>> ex = corrupted_arith_examples([Problem("47+85=", "132", steps=("7+5=12", "4+8+1=13"))], seed=1)[0]
    >>> len(ex.completions) == len(ex.labels) == 3, ex.labels.count(0.0) <= 1
    (True, True)
    """
    import random

    rng = random.Random(seed)
    out = []
    for p in problems:
        steps = [*p.steps, f"{ANSWER_OPEN}{p.answer}{ANSWER_CLOSE}"]
        if rng.random() >= p_clean:
            k = rng.randrange(len(steps))
            delta = rng.choice([d for d in range(-10, 11) if d])
            if steps[k].startswith(ANSWER_OPEN):
                steps[k] = f"{ANSWER_OPEN}{int(p.answer) + delta}{ANSWER_CLOSE}"
            else:
                lhs, _, value = steps[k].rpartition("=")
                steps[k] = f"{lhs}={int(value) + delta}"
        labels = tuple(float(t) for t in arith_step_truth(p, steps))
        out.append(StepExample(p.prompt, tuple(steps), labels))
    return out


def cumulative_truth(truth: list[bool] | tuple[bool, ...]) -> list[bool]:
    """Math-Shepherd step labels under a perfect verifier: a step is good iff it and every step before
    it are right, so every step after the first wrong one is bad — the answer step included, even a
    step that is right on its own.

    >>> cumulative_truth([True, False, True, True])
    [True, False, False, False]
    """
    out, ok = [], True
    for t in truth:
        ok = ok and bool(t)
        out.append(ok)
    return out


def policy_arith_examples(problems: list[Problem], solutions: list[list[str]]) -> list[StepExample]:
    """Exactly labelled rows from a policy's own solutions to arithmetic problems: `solutions[i]` holds
    the completions sampled for `problems[i]`; each becomes one row of its `split_steps`, labelled by
    `cumulative_truth` of `arith_step_truth`. A completion with no step is dropped.

    >>> p = Problem("18+90=", "108", steps=("8+0=8", "1+9=10"))
    >>> [ex.labels for ex in policy_arith_examples([p], [["<think>8+0=8\\n\\n1+9=11</think><answer>119</answer>", "x"]])]
    [(1.0, 0.0, 0.0)]
    """
    out = []
    for p, texts in zip(problems, solutions, strict=True):
        for text in texts:
            steps = split_steps(text)
            if steps:
                labels = tuple(float(t) for t in cumulative_truth(arith_step_truth(p, steps)))
                out.append(StepExample(p.prompt, tuple(steps), labels))
    return out
