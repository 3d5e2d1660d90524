"""The shared vocabulary of seqrl: problems, reward results, the task interface and the house
answer format. It imports nothing else of seqrl, so `data/`, `rewards/` and the trainers can all
stand on it without importing each other.

A task hands out `Problem`s for a split and verifies completions into `RewardResult`s. Completions
use the house format::

    <think>step one

    step two</think><answer>42</answer>

Steps inside ``<think>`` are separated by `STEP_SEP` (a blank line), as in search-and-learn.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
STEP_SEP = "\n\n"
MARKERS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)


@dataclass
class RewardResult:
    """Score of one completion.

    score:  the reward (1.0 correct / 0.0 wrong for binary verifiers).
    reason: why — always set when the score is not full marks (``"no answer found"``,
            ``"not equal: 3 vs 4"``) so a zero is never silent.
    parts:  named sub-scores for rewards made of several parts.
    """

    score: float
    reason: str = ""
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return self.score >= 1.0


@dataclass(frozen=True)
class Problem:
    """One problem.

    prompt:   the question as plain text (no chat template; the policy applies its own).
    answer:   the gold final answer as text.
    steps:    a worked solution as a list of reasoning steps (empty if the task has none).
    metadata: task-specific facts (operands, numbers, source row ...).
    uid:      a stable identifier, unique within a task and split.
    messages: a conversational prompt (``{"role", "content"}`` dicts) that goes to the chat template
              as it is; empty for a text prompt. `prompt` then holds the last user turn.
    """

    prompt: str
    answer: str
    steps: tuple[str, ...] = ()
    metadata: dict = field(default_factory=dict, hash=False, compare=False)
    uid: str = ""
    messages: tuple[dict, ...] = field(default=(), hash=False, compare=False)

    @property
    def target(self) -> str:
        """The worked solution in the house format (what SFT trains on)."""
        return format_completion(self.steps, self.answer)


def format_completion(steps: tuple[str, ...] | list[str], answer: str) -> str:
    """``<think>s1\\n\\ns2</think><answer>a</answer>``; no think block when there are no steps.

    >>> format_completion(["1+2=3"], "3")
    '<think>1+2=3</think><answer>3</answer>'
    >>> format_completion([], "7")
    '<answer>7</answer>'
    """
    think = f"{THINK_OPEN}{STEP_SEP.join(steps)}{THINK_CLOSE}" if steps else ""
    return f"{think}{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"


def extract_answer(completion: str) -> str | None:
    """Content of the last ``<answer>…</answer>`` block, stripped; None when there is none.

    >>> extract_answer("<think>x</think><answer> 12 </answer>")
    '12'
    >>> extract_answer("12") is None
    True
    >>> extract_answer("<answer>1</answer> no, <answer>2</answer>")
    '2'
    >>> extract_answer("<answer>" * 50_000 + "</answer>")
    ''

    """
    # Two reverse scans, linear in the text (a regex over many unclosed tags is quadratic).
    close = completion.rfind(ANSWER_CLOSE)
    start = completion.rfind(ANSWER_OPEN, 0, close) if close >= 0 else -1
    return completion[start + len(ANSWER_OPEN) : close].strip() if start >= 0 else None


class Task(ABC):
    """A source of problems with a verifier. Deterministic per (split, n, seed)."""

    name: str = "task"

    @abstractmethod
    def problems(self, split: str, n: int, seed: int = 0) -> list[Problem]:
        """`n` problems of `split` ("train" or "test"), the same list for the same arguments."""

    @abstractmethod
    def verify(self, problem: Problem, completion: str) -> RewardResult:
        """Score a completion; never raises on model output."""

    def extract_answer(self, completion: str) -> str | None:
        """The answer a completion commits to (used for majority voting)."""
        return extract_answer(completion)

