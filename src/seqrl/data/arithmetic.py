"""Integer arithmetic with column-wise worked solutions (`ArithmeticTask`).

Prompts are short (``47+85=``) because tiny character-level models train on them. Every step is a
true equation, one per column:

- addition, ones column first, carries added in: ``47+85`` → ``7+5=12``, ``4+8+1=13``; answer 132.
- subtraction, larger minus smaller with borrows (a borrowing column reads ``15-7``, a borrowed-from
  column subtracts the borrow: ``8-1-4``); when the first operand is the smaller one, a last step
  states the sign: ``47-85`` → ``15-7=8``, ``8-1-4=3``, ``47-85=-38``; answer -38.
- multiplication, one partial product per digit of the second operand, then their shifted sum:
  ``47*85`` → ``47*5=235``, ``47*8=376``, ``235+3760=3995``; answer 3995.
"""

from __future__ import annotations

import random
import re

from seqrl.answers import FormattedAnswers, check_answer_format, find_answer, normalise, verdict
from seqrl.data.splits import sample_split
from seqrl.types import Problem, RewardResult, Task

SYMBOLS = {"add": "+", "sub": "-", "mul": "*"}
MAX_ANSWER_CHARS = 50
_INT_RE = re.compile(r"[+-]?[0-9]+")


def addition_steps(a: int, b: int) -> list[str]:
    """Column-wise addition of non-negative integers, ones first.

    >>> addition_steps(47, 85)
    ['7+5=12', '4+8+1=13']
    """
    steps, carry = [], 0
    for i in range(max(len(str(a)), len(str(b)))):
        x, y = a // 10**i % 10, b // 10**i % 10
        total = x + y + carry
        steps.append(f"{x}+{y}" + (f"+{carry}" if carry else "") + f"={total}")
        carry = total // 10
    return steps


def subtraction_steps(a: int, b: int) -> list[str]:
    """Column-wise subtraction of non-negative integers with borrows; a sign step when a < b.

    >>> subtraction_steps(85, 47)
    ['15-7=8', '8-1-4=3']
    >>> subtraction_steps(47, 85)
    ['15-7=8', '8-1-4=3', '47-85=-38']
    """
    top, bottom = max(a, b), min(a, b)
    steps, borrow = [], 0
    for i in range(len(str(top))):
        x, y = top // 10**i % 10, bottom // 10**i % 10
        lend = x - borrow < y  # this column borrows ten from the next
        left = x + 10 if lend else x
        steps.append(f"{left}" + (f"-{borrow}" if borrow else "") + f"-{y}={left - borrow - y}")
        borrow = int(lend)
    if a < b:
        steps.append(f"{a}-{b}={a - b}")
    return steps


def multiplication_steps(a: int, b: int) -> list[str]:
    """One partial product per digit of `b` (ones first), then the sum of the shifted partials.

    >>> multiplication_steps(47, 85)
    ['47*5=235', '47*8=376', '235+3760=3995']
    >>> multiplication_steps(7, 8)
    ['7*8=56']
    """
    digits = [int(c) for c in reversed(str(b))]
    steps = [f"{a}*{d}={a * d}" for d in digits]
    if len(digits) > 1:
        shifted = [a * d * 10**i for i, d in enumerate(digits)]
        steps.append("+".join(map(str, shifted)) + f"={sum(shifted)}")
    return steps


def parse_int_answer(text: str) -> tuple[int | None, str]:
    """``(value, "")`` for an integer answer (sign and surrounding spaces allowed), else
    ``(None, reason)``.

    >>> parse_int_answer(" -38 ")
    (-38, '')
    >>> parse_int_answer("3.5")
    (None, "not an integer: '3.5'")
    """
    text = normalise(text)
    if len(text) > MAX_ANSWER_CHARS:
        return None, "answer too long"
    if not _INT_RE.fullmatch(text):
        return None, f"not an integer: {text!r}"
    return int(text), ""


class ArithmeticTask(FormattedAnswers, Task):
    """Integer ``a op b`` with ops from {"add", "sub", "mul"}, each operand `digits` digits long.

    Operands are uniform in ``[10**(digits-1), 10**digits - 1]`` (``[0, 9]`` for one digit). A list
    of digit counts (``digits: [2, 3]``) mixes them: each problem draws its count uniformly, then
    both operands with that many digits; ``metadata["digits"]`` holds the count. The canonical
    key is the expression (``47+85``); splits are disjoint by its hash. A split too small for `n`
    distinct problems (one-digit operands) repeats problems; see `sample_split`.
    """

    def __init__(self, ops: tuple[str, ...] = ("add",), digits: int | list[int] | tuple[int, ...] = 2,
                 name: str = "arith", answer_format: str = "answer_tag"):
        ops = tuple(ops)
        if not ops or any(op not in SYMBOLS for op in ops):
            raise ValueError(
                f"arith.ops must be a non-empty subset of {tuple(SYMBOLS)} (got {ops})"
            )
        counts = (digits,) if isinstance(digits, int) else tuple(digits) if isinstance(digits, (list, tuple)) else ()
        if not counts or any(isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= 18 for d in counts):
            raise ValueError(f"arith.digits must be in [1, 18], or a non-empty list of such counts (got {digits!r})")
        self.ops, self.name = ops, name
        self.answer_format = check_answer_format(answer_format)
        self.digits = digits if isinstance(digits, int) else counts
        self._counts = counts

    def problems(self, split: str, n: int, seed: int = 0) -> list[Problem]:
        return sample_split(self._draw, self.name, split, n, seed)

    def _draw(self, rng: random.Random):
        op = rng.choice(self.ops)
        # one count draws nothing more: a fixed `digits` gives the same problems as before mixes existed
        digits = self._counts[0] if len(self._counts) == 1 else rng.choice(self._counts)
        low, high = (0 if digits == 1 else 10 ** (digits - 1)), 10**digits - 1
        a, b = rng.randint(low, high), rng.randint(low, high)
        key = f"{a}{SYMBOLS[op]}{b}"
        return key, lambda: self._problem(op, a, b, key, digits)

    @staticmethod
    def _problem(op: str, a: int, b: int, key: str, digits: int) -> Problem:
        if op == "add":
            steps, answer = addition_steps(a, b), a + b
        elif op == "sub":
            steps, answer = subtraction_steps(a, b), a - b
        else:
            steps, answer = multiplication_steps(a, b), a * b
        return Problem(
            prompt=f"{key}=",
            answer=str(answer),
            steps=tuple(steps),
            metadata={"op": op, "a": a, "b": b, "digits": digits},
        )

    def verify(self, problem: Problem, completion: str) -> RewardResult:
        """1.0 when the ``<answer>`` equals the integer result by the shared comparison
        (`seqrl.answers.compare_answers`: ``132.0``, ``−5`` and full-width digits count;
        hedges such as ``131 or 132`` do not); else 0.0 with the reason.

        >>> task = ArithmeticTask()
        >>> p = Problem("47+85=", "132")
        >>> task.verify(p, "<answer>132</answer>").score
        1.0
        >>> task.verify(p, "<answer>131</answer>").reason
        'not equal: 131 vs 132'
        """
        answer, why = find_answer(completion, self.answer_format)
        if answer is None:
            return RewardResult(0.0, why)
        return verdict(problem.answer, answer, MAX_ANSWER_CHARS)
