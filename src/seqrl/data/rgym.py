"""Any reasoning-gym dataset as a `Task` (`ReasoningGymTask`).

reasoning-gym's ``score_answer`` gives partial credit (a wrong answer that contains the right one
scores ``len(gold) / len(answer)``), so by default the score is thresholded: 1.0 only for full
credit. Its items carry no worked solution, so problems have no steps.

Splits are disjoint by question text: every generated item goes to the split its question hashes
into (`split_of`), so train and test never share a question. Generation is cached per
(dataset, config, seed, size) — some generators are slow (countdown takes ~14 ms an item).

Scoring is isolated: some scorers ``eval`` the answer or give it to sympy's ``parse_expr`` (which
evaluates Python; `EVALUATING`, listed in ``docs/datasets.md``). For those an allow-list parser
(`precheck`) rejects any answer outside the dataset's grammar before anything evaluates it, and
every scorer — evaluating or not — runs in a confined, pre-started worker process
(`seqrl.sandbox.workers`) with a per-call time limit, never in the trainer.
"""

from __future__ import annotations

import ast
import difflib
import functools
import json
import math

from seqrl.data.splits import check_split, split_of, stable_hash
from seqrl.answers import FormattedAnswers, check_answer_format, find_answer
from seqrl.types import Problem, RewardResult, Task
from seqrl.utils.extras import require

MAX_ANSWER_CHARS = 20_000
"""Longer answers score 0 unscored (no reasoning-gym answer is near this long)."""

# Datasets whose score_answer evaluates the answer (found by scoring injection answers against every
# dataset of reasoning-gym 0.1.25: these created a file or never returned). The value is the answer
# grammar `precheck` enforces: "sympy" (an arithmetic/symbolic expression for sympy's parse_expr),
# "literal" (whatever Python would evaluate must be a plain literal: lists of numbers or strings).
EVALUATING = {
    "binary_matrix": "literal",
    "countdown": "sympy",
    "intermediate_integration": "sympy",
    "n_queens": "literal",
    "polynomial_multiplication": "sympy",
    "puzzle24": "sympy",
    "simple_integration": "sympy",
    "spiral_matrix": "literal",
    "string_insertion": "literal",
}

SYMPY_FUNCTIONS = frozenset({
    "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "acot", "asec", "acsc",
    "sinh", "cosh", "tanh", "coth", "asinh", "acosh", "atanh", "exp", "log", "ln", "sqrt", "Abs",
    "Rational", "Integer", "Float",
})
MAX_POWER = 10_000
"""Largest product of constant exponents along a chain of powers (``(x**100)**100`` is 10 000)."""
MAX_NODES = 2_000

_ARITH_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)


def _constant_value(node: ast.AST) -> float | None:
    """The value of a numeric constant, optionally signed or a ratio of two constants."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value) if abs(node.value) < 1e300 else math.inf
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _constant_value(node.operand)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        a, b = _constant_value(node.left), _constant_value(node.right)
        return None if a is None or b is None or b == 0 else a / b
    return None


def _check_sympy(node: ast.AST, power: float = 1.0) -> str:
    """"" when ``node`` is numbers, names, + - * / **, and calls of `SYMPY_FUNCTIONS`, with every
    exponent a small constant; else why not."""
    if isinstance(node, ast.Constant):
        return "" if type(node.value) in (int, float) else f"constant {type(node.value).__name__}"
    if isinstance(node, ast.Name):
        return "" if node.id.isascii() and node.id.isalnum() else f"name {node.id!r}"
    if isinstance(node, ast.UnaryOp):
        return _check_sympy(node.operand, power) if isinstance(node.op, (ast.USub, ast.UAdd)) else "operator"
    if isinstance(node, ast.BinOp):
        if not isinstance(node.op, _ARITH_OPS):
            return f"operator {type(node.op).__name__}"
        if isinstance(node.op, ast.Pow):
            e = _constant_value(node.right)
            if e is None:
                return "exponent is not a number"
            if abs(e) * power > MAX_POWER:
                return f"exponent too large (over {MAX_POWER})"
            return _check_sympy(node.left, power * max(1.0, abs(e)))
        return _check_sympy(node.left, power) or _check_sympy(node.right, power)
    if isinstance(node, ast.Call):
        if not (isinstance(node.func, ast.Name) and node.func.id in SYMPY_FUNCTIONS) or node.keywords:
            return "call of a function outside the allow-list"
        return next((why for a in node.args if (why := _check_sympy(a, power))), "")
    return f"{type(node).__name__} not allowed"


def precheck(dataset: str, answer: str) -> str:
    """Why ``answer`` must not reach ``dataset``'s scorer ("" when it may): answers to `EVALUATING`
    datasets must fit the dataset's grammar, checked on the syntax tree without evaluating anything.

    >>> precheck("countdown", "(3 + 4) * 5 - 6 / 2")
    ''
    >>> precheck("countdown", "__import__('os').system('id')")
    'answer is not an expression of numbers and + - * / ** (call of a function outside the allow-list)'
    >>> precheck("countdown", "9**9**9")
    'answer is not an expression of numbers and + - * / ** (exponent is not a number)'
    >>> precheck("spiral_matrix", "[1, 2, 3]"), precheck("spiral_matrix", "1 2 3")
    ('', '')
    """
    grammar = EVALUATING.get(dataset)
    if grammar is None:
        return ""
    text = answer.strip()
    if grammar == "sympy":
        text = text.replace("^", "**")  # parse_expr's convert_xor
        try:
            tree = ast.parse(text, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return "answer is not a well-formed expression"
        if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
            return f"answer has over {MAX_NODES} syntax nodes"
        why = _check_sympy(tree.body)
        return f"answer is not an expression of numbers and + - * / ** ({why})" if why else ""
    try:  # "literal": Python would evaluate it only if it parses; then it must be a plain literal
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    if sum(1 for _ in ast.walk(tree)) > 50 * MAX_NODES:
        return "answer too large"
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Expression, ast.Constant, ast.List, ast.Tuple, ast.Load, ast.UnaryOp,
                                 ast.USub, ast.UAdd, ast.Name)):  # a bare name only looks a value up
            return f"answer is Python but not a plain literal ({type(node).__name__})"
    return ""


def _score_answer(dataset: str, config_json: str, answer: str, entry: dict) -> float:
    """reasoning-gym's ``score_answer`` (runs inside a worker)."""
    return float(_dataset(dataset, config_json, 0, 1).score_answer(answer, entry))


def dataset_names() -> list[str]:
    """The names reasoning-gym can create (its factory's registry), sorted."""
    DATASETS = require("reasoning_gym.factory", "reasoning-gym tasks").DATASETS

    return sorted(DATASETS)


@functools.lru_cache(maxsize=64)
def _dataset(dataset: str, config_json: str, seed: int, size: int):
    """A reasoning-gym dataset object (items are generated on access)."""
    reasoning_gym = require("reasoning_gym", "reasoning-gym tasks")

    return reasoning_gym.create_dataset(dataset, seed=seed, size=size, **json.loads(config_json))


@functools.lru_cache(maxsize=64)
def _generate(dataset: str, config_json: str, seed: int, size: int) -> tuple[dict, ...]:
    """All `size` items of the dataset generated with `seed`."""
    return tuple(_dataset(dataset, config_json, seed, size))


class ReasoningGymTask(FormattedAnswers, Task):
    """A reasoning-gym dataset with its own verifier (``score_answer``).

    dataset: a reasoning-gym dataset name, e.g. "basic_arithmetic" (see `dataset_names`).
    binary:  score 1.0 only for full credit (else 0.0 with the partial score in the reason);
             False passes reasoning-gym's score through.
    size:    items generated per chunk; `problems` filters chunks (seeds ``base + k * size``) by
             split, drops repeated questions, and gives up with ValueError after
             ``1 + 20 * n // size`` chunks.
    config:  extra reasoning-gym config fields (e.g. ``{"min_terms": 2}``).
    name:    defaults to ``"rg:<dataset>"``.
    timeout_s: limit of one ``score_answer`` call (in a confined worker); past it the answer
             scores 0 with reason "timeout".
    """

    def __init__(
        self,
        dataset: str,
        binary: bool = True,
        size: int = 200,
        config: dict | None = None,
        name: str | None = None,
        timeout_s: float = 2.0,
        answer_format: str = "answer_tag",
    ):
        self.answer_format = check_answer_format(answer_format)
        names = dataset_names()
        if dataset not in names:
            close = difflib.get_close_matches(dataset, names, n=5)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ValueError(
                f"unknown reasoning-gym dataset {dataset!r}{hint}; {len(names)} valid names, "
                f"e.g. {', '.join(names[:12])}"
            )
        if size < 1:
            raise ValueError(f"rg.size must be >= 1 (got {size})")
        if not timeout_s > 0:
            raise ValueError(f"rg.timeout_s must be > 0 (got {timeout_s})")
        self.timeout_s = float(timeout_s)
        config = dict(config or {})
        if {"seed", "size"} & set(config):
            raise ValueError("rg.config must not set 'seed' or 'size' (the task sets them)")
        self.dataset, self.binary, self.size = dataset, binary, size
        self.name = name or f"rg:{dataset}"
        self._config_json = json.dumps(config, sort_keys=True)

    def problems(self, split: str, n: int, seed: int = 0) -> list[Problem]:
        check_split(split)
        if n < 0:
            raise ValueError(f"n must be >= 0 (got {n})")
        if n == 0:
            return []
        base = stable_hash(f"{self.name}:{split}:{seed}") % 2**31
        chunks = 1 + 20 * n // self.size
        out: list[Problem] = []
        seen: set[str] = set()
        for k in range(chunks):
            chunk_seed = base + k * self.size
            for index, entry in enumerate(
                _generate(self.dataset, self._config_json, chunk_seed, self.size)
            ):
                question = entry["question"]
                if question in seen or split_of(question) != split:
                    continue
                seen.add(question)
                out.append(
                    Problem(
                        prompt=question,
                        answer=str(entry["answer"]),
                        metadata={"entry": entry},
                        uid=f"{self.name}/{chunk_seed + index}",
                    )
                )
                if len(out) == n:
                    return out
        raise ValueError(
            f"{self.name}: found only {len(out)} distinct {split} problems of {n} in "
            f"{chunks * self.size} generated items; the dataset may be too small"
        )

    def verify(self, problem: Problem, completion: str) -> RewardResult:
        """reasoning-gym's score of the ``<answer>`` content, thresholded at 1.0 when `binary`."""
        answer, why = find_answer(completion, self.answer_format)
        if answer is None:
            return RewardResult(0.0, why)
        if len(answer) > MAX_ANSWER_CHARS:
            return RewardResult(0.0, f"answer too long ({len(answer)} > {MAX_ANSWER_CHARS} characters)")
        grammar_of = self.dataset
        if self.dataset == "composite":  # a mixture: its items say which dataset scores them
            meta = problem.metadata["entry"].get("metadata") or {}
            grammar_of = str(meta.get("source_dataset", ""))
        why = precheck(grammar_of, answer)
        if why:
            return RewardResult(0.0, f"not scored: {why}")
        args = (self.dataset, self._config_json, answer, problem.metadata["entry"])
        from seqrl.sandbox import workers

        if workers.IN_WORKER:  # already confined and time-limited
            try:
                score = _score_answer(*args)
            except Exception as err:  # reasoning-gym scorers are third-party code run on model output
                return RewardResult(0.0, f"score_answer raised {type(err).__name__}: {err}")
        else:
            out = workers.shared_pool().call(_score_answer, args, self.timeout_s)
            if out.status == "timeout":
                return RewardResult(0.0, f"timeout: score_answer took over {self.timeout_s:g} s")
            if out.status != "ok":
                return RewardResult(0.0, f"score_answer raised {out.reason.removeprefix('error: ')}"[:500])
            score = out.value.get("value")
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                return RewardResult(0.0, f"score_answer returned {str(score)[:80]!r}, not a number")
            score = float(score)
        if score >= 1.0:
            return RewardResult(1.0)
        if not score > 0.0:  # also NaN
            return RewardResult(0.0, f"wrong answer (score_answer gave {score:g})")
        if self.binary:
            return RewardResult(0.0, f"partial credit {score:.3g} treated as wrong")
        return RewardResult(score, f"partial credit {score:.3g}")
