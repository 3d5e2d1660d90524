"""A simulated arithmetic policy with a known step error rate, for measuring labelling and search
machinery in seconds (the rollout engine and a trained policy are the real thing).

`NoisyArithmeticPolicy` continues a house-format prefix of an `ArithmeticTask` problem with the
gold column steps, each stated wrongly (value moved by ±1…±3) with probability `step_error`. The
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


@dataclass
class NoisyArithmeticPolicy:
    """A `seqrl.search.labels.Continuer` (and, through `sample`, a best-of-N sampler) for arithmetic."""

    step_error: float = 0.2
    answer_error: float = 0.05

    def _problem(self, question: str) -> Problem:
        m = _PROMPT_RE.match(question)
        if not m:
            raise ValueError(f"NoisyArithmeticPolicy: not an arithmetic prompt {question!r}")
        a, op, b = int(m.group(1)), _OPS[m.group(2)], int(m.group(3))
        return ArithmeticTask._problem(op, a, b, f"{a}{m.group(2)}{b}")

    def _continue(self, question: str, prefix: str, rng: random.Random) -> str:
        gold = self._problem(question)
        done = split_steps(prefix) if prefix else []
        ok = all(arith_step_truth(gold, done))
        rest = []
        for step in gold.steps[len(done):]:
            wrong = rng.random() < self.step_error
            rest.append(_moved(step, rng) if wrong else step)
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
