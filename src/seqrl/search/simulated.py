"""A simulated arithmetic policy with a known step error rate, for measuring labelling and search
machinery in seconds (the rollout engine and a trained policy are the real thing).

`NoisyArithmeticPolicy` continues a house-format prefix of an `ArithmeticTask` problem with the
gold column steps, each stated wrongly with probability `step_error` (value moved by ±1…±3, or, with
``error="carry"``, an addition column's carry dropped or invented). The
final answer is the gold one only when every step so far is right (and then still wrong with
probability `answer_error`): like a real solver, an error early on carries into the answer. So a
prefix with a wrong step can never reach the gold answer — Math-Shepherd's labels for it are 0.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from seqrl.data.arithmetic import ArithmeticTask
from seqrl.data.stepwise import arith_step_truth, split_steps
from seqrl.types import ANSWER_CLOSE, ANSWER_OPEN, STEP_SEP, THINK_CLOSE, THINK_OPEN, Problem

_PROMPT_RE = re.compile(r"^(\d+)([+*-])(\d+)=$")
_OPS = {"+": "add", "-": "sub", "*": "mul"}


def _moved(step: str, rng: random.Random) -> str:
    lhs, _, value = step.rpartition("=")
    return f"{lhs}={int(value) + rng.choice((-3, -2, -1, 1, 2, 3))}"


def _carry_slip(step: str) -> str:
    """An addition column with its carry dropped (``4+8+1=13`` → ``4+8=12``) or a carry invented
    (``7+5=12`` → ``7+5+1=13``): the sum is right for its terms, the carry is not."""
    lhs, _, value = step.rpartition("=")
    terms = lhs.split("+")
    if len(terms) == 3:
        return f"{terms[0]}+{terms[1]}={int(value) - 1}"
    return f"{lhs}+1={int(value) + 1}"


@dataclass
class NoisyArithmeticPolicy:
    """A `seqrl.search.labels.Continuer` (and, through `sample`, a best-of-N sampler) for arithmetic."""

    step_error: float = 0.2
    answer_error: float = 0.05
    error: str = "value"
    """value: a stated value moved by ±1…±3; carry: an addition column's carry dropped or invented
    (a slip whose arithmetic is right, caught only by reading the previous column)."""

    def __post_init__(self) -> None:
        if self.error not in ("value", "carry"):
            raise ValueError(f"NoisyArithmeticPolicy.error must be 'value' or 'carry' (got {self.error!r})")

    def _problem(self, question: str) -> Problem:
        m = _PROMPT_RE.match(question)
        if not m:
            raise ValueError(f"NoisyArithmeticPolicy: not an arithmetic prompt {question!r}")
        a, op, b = int(m.group(1)), _OPS[m.group(2)], int(m.group(3))
        return ArithmeticTask._problem(op, a, b, f"{a}{m.group(2)}{b}", max(len(str(abs(a))), len(str(abs(b)))))

    def _continue(self, question: str, prefix: str, rng: random.Random) -> str:
        gold = self._problem(question)
        done = split_steps(prefix) if prefix else []
        ok = all(arith_step_truth(gold, done))
        rest = []
        for step in gold.steps[len(done):]:
            wrong = rng.random() < self.step_error
            slip = _carry_slip(step) if self.error == "carry" and "+" in step else _moved(step, rng)
            rest.append(slip if wrong else step)
            ok = ok and not wrong
        answer = int(gold.answer) if ok and rng.random() >= self.answer_error else int(gold.answer) + rng.choice((-1, 1, 10))
        tail = STEP_SEP.join(rest) + f"{THINK_CLOSE}{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"
        return tail if prefix else THINK_OPEN + tail

    def continue_texts(self, questions: list[str], prefixes: list[str], n: int, seed: int
                       ) -> tuple[list[list[str]], int]:
        rng = random.Random(seed)
        out = [[self._continue(q, p, rng) for _ in range(n)] for q, p in zip(questions, prefixes)]
        return out, sum(len(t) for texts in out for t in texts)  # one token a character, as the house tokenizer

    def sample(self, problems: list[Problem], n: int, seed: int = 0) -> tuple[list[list[str]], int]:
        return self.continue_texts([p.prompt for p in problems], [""] * len(problems), n, seed)
