"""Countdown (as in TinyZero): combine the given numbers with + - * / to reach a target.

Prompt ``Use 3 7 25 to make 154.``; steps build the expression one operation at a time
(``25-3=22``, ``22*7=154``); the answer is the expression, ``(25-3)*7``.

Answers are checked by `parse_expression`, a small recursive-descent parser over non-negative
integers, ``+ - * /``, parentheses and spaces with exact `Fraction` arithmetic. It never calls
eval, and it rejects every other character, ``**``, unary signs, over-long input and deep nesting.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from fractions import Fraction

from seqrl.data.splits import sample_split
from seqrl.answers import FormattedAnswers, check_answer_format, find_answer
from seqrl.types import Problem, RewardResult, Task

MAX_EXPRESSION_CHARS = 200
MAX_DEPTH = 20  # parentheses nested deeper than this are rejected
_ALLOWED = set("0123456789+-*/() ")
_OPS: dict[str, Callable[[Fraction, Fraction], Fraction]] = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
    "/": lambda x, y: x / y,
}


class CountdownParseError(ValueError):
    """An answer expression that is not a well-formed Countdown expression (message: why)."""


def parse_expression(text: str) -> tuple[Fraction, list[int]]:
    """Value of an expression over integers, ``+ - * /`` and parentheses; also the numbers used.

    Usual precedence (``* /`` before ``+ -``, left to right); exact rational arithmetic.

    >>> parse_expression("(2+3)*4")
    (Fraction(20, 1), [2, 3, 4])
    >>> parse_expression("8/3")
    (Fraction(8, 3), [8, 3])
    >>> parse_expression("2**9")
    Traceback (most recent call last):
    ...
    seqrl.data.countdown.CountdownParseError: '**' is not allowed
    """
    return _Parser(text).parse()


class _Parser:
    """Grammar: ``expr := term (('+'|'-') term)*``, ``term := factor (('*'|'/') factor)*``,
    ``factor := NUMBER | '(' expr ')'``."""

    def __init__(self, text: str):
        if len(text) > MAX_EXPRESSION_CHARS:
            raise CountdownParseError(
                f"expression too long ({len(text)} > {MAX_EXPRESSION_CHARS} chars)"
            )
        for i, ch in enumerate(text):
            if ch not in _ALLOWED:
                raise CountdownParseError(f"unexpected character {ch!r} at position {i}")
        if "**" in text.replace(" ", ""):
            raise CountdownParseError("'**' is not allowed")
        self.text = text
        self.pos = 0
        self.depth = 0
        self.numbers: list[int] = []

    def parse(self) -> tuple[Fraction, list[int]]:
        if not self.text.strip():
            raise CountdownParseError("empty expression")
        value = self._expr()
        if self._peek() is not None:
            raise CountdownParseError(f"unexpected {self._peek()!r} at position {self.pos}")
        return value, self.numbers

    def _peek(self) -> str | None:
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1
        return self.text[self.pos] if self.pos < len(self.text) else None

    def _expr(self) -> Fraction:
        value = self._term()
        while (op := self._peek()) in ("+", "-"):
            self.pos += 1
            value = _OPS[op](value, self._term())
        return value

    def _term(self) -> Fraction:
        value = self._factor()
        while (op := self._peek()) in ("*", "/"):
            self.pos += 1
            right = self._factor()
            if op == "/" and right == 0:
                raise CountdownParseError("division by zero")
            value = _OPS[op](value, right)
        return value

    def _factor(self) -> Fraction:
        ch = self._peek()
        if ch is None:
            raise CountdownParseError("unexpected end of expression")
        if ch == "(":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise CountdownParseError(f"parentheses nested deeper than {MAX_DEPTH}")
            self.pos += 1
            value = self._expr()
            if self._peek() != ")":
                raise CountdownParseError(f"missing ')' at position {self.pos}")
            self.pos += 1
            self.depth -= 1
            return value
        if ch.isdigit():
            start = self.pos
            while self.pos < len(self.text) and self.text[self.pos].isdigit():
                self.pos += 1
            number = int(self.text[start : self.pos])
            self.numbers.append(number)
            return Fraction(number)
        raise CountdownParseError(f"expected a number or '(' at position {self.pos}, got {ch!r}")


def check_numbers(used: list[int], given: list[int], require_all: bool = True) -> str:
    """Why the numbers `used` break the rules for `given` ("" when they keep them).

    Each given number may be used once; with `require_all` each must be used exactly once.

    >>> check_numbers([7, 7], [3, 7, 25])
    'uses 7 twice'
    >>> check_numbers([25, 3], [3, 7, 25])
    'does not use 7'
    >>> check_numbers([25, 3], [3, 7, 25], require_all=False)
    ''
    """
    used_count, given_count = Counter(used), Counter(given)
    for number, times in used_count.items():
        if given_count[number] == 0:
            return f"uses {number}, which is not given"
        if times > given_count[number]:
            allowed = given_count[number]
            if (times, allowed) == (2, 1):
                return f"uses {number} twice"
            return f"uses {number} {times} times (given {allowed})"
    missing = given_count - used_count
    if require_all and missing:
        return "does not use " + ", ".join(map(str, sorted(missing.elements())))
    return ""


class CountdownTask(FormattedAnswers, Task):
    """Reach a target from 3–4 numbers with + - * / (TinyZero's Countdown).

    Problems are solvable by construction: the numbers (uniform in ``[1, max_number]``) are
    combined pairwise at random into one expression — subtraction keeps results positive,
    division is kept only when exact, intermediate results stay <= `max_target` — and its value
    is the target.
    The canonical key is the sorted numbers and the target; splits are disjoint by its hash.

    require_all: each number must be used exactly once (TinyZero's rule); False allows at most once.
    """

    def __init__(
        self,
        num_numbers: int | tuple[int, ...] = (3, 4),
        max_number: int = 99,
        max_target: int = 1000,
        require_all: bool = True,
        name: str = "countdown",
        answer_format: str = "answer_tag",
    ):
        self.answer_format = check_answer_format(answer_format)
        counts = (num_numbers,) if isinstance(num_numbers, int) else tuple(num_numbers)
        if not counts or any(k < 2 for k in counts):
            raise ValueError(f"countdown.num_numbers must be integers >= 2 (got {num_numbers})")
        if max_number < 1:
            raise ValueError(f"countdown.max_number must be >= 1 (got {max_number})")
        if max_target < 2 * max_number:
            raise ValueError(
                f"countdown.max_target must be >= 2 * max_number = {2 * max_number} "
                f"(got {max_target})"
            )
        self.num_numbers, self.max_number, self.max_target = counts, max_number, max_target
        self.require_all, self.name = require_all, name

    def problems(self, split: str, n: int, seed: int = 0) -> list[Problem]:
        return sample_split(self._draw, self.name, split, n, seed)

    def _draw(self, rng: random.Random):
        while True:
            numbers = [rng.randint(1, self.max_number) for _ in range(rng.choice(self.num_numbers))]
            solution = self._solve_randomly(numbers, rng)
            if solution is not None:
                break
        target, expression, steps = solution
        key = ",".join(map(str, sorted(numbers))) + f"->{target}"

        def build() -> Problem:
            return Problem(
                prompt=f"Use {' '.join(map(str, numbers))} to make {target}.",
                answer=expression,
                steps=tuple(steps),
                metadata={"numbers": numbers, "target": target},
            )

        return key, build

    def _solve_randomly(self, numbers: list[int], rng: random.Random):
        """Combine random pairs until one value is left: ``(target, expression, steps)`` or None."""
        pool = [(x, str(x), 3) for x in numbers]  # (value, expression, precedence as in `_join`)
        steps = []
        while len(pool) > 1:
            first = pool.pop(rng.randrange(len(pool)))
            second = pool.pop(rng.randrange(len(pool)))
            (x, ex, px), (y, ey, py) = max(first, second), min(first, second)
            options = [("+", x + y), ("*", x * y)]
            if x != y:
                options.append(("-", x - y))
            if y > 1 and x % y == 0:
                options.append(("/", x // y))
            options = [(op, v) for op, v in options if v <= self.max_target]
            if not options:
                return None
            op, value = rng.choice(options)
            steps.append(f"{x}{op}{y}={value}")
            pool.append((value, _join(ex, px, op, ey, py), 1 if op in "+-" else 2))
        value, expression, _ = pool[0]
        return value, expression, steps

    def verify(self, problem: Problem, completion: str) -> RewardResult:
        """1.0 when the ``<answer>`` expression follows the rules and equals the target.

        >>> task = CountdownTask()
        >>> facts = {"numbers": [3, 7, 25], "target": 154}
        >>> p = Problem("Use 3 7 25 to make 154.", "(25-3)*7", metadata=facts)
        >>> task.verify(p, "<answer>7*(25-3)</answer>").score
        1.0
        >>> task.verify(p, "<answer>7*25-3</answer>").reason
        'not equal: 172 vs 154'
        """
        answer, why = find_answer(completion, self.answer_format)
        if answer is None:
            return RewardResult(0.0, why)
        try:
            value, used = parse_expression(answer)
        except CountdownParseError as err:
            return RewardResult(0.0, str(err))
        reason = check_numbers(used, problem.metadata["numbers"], self.require_all)
        if reason:
            return RewardResult(0.0, reason)
        target = problem.metadata["target"]
        if value != target:
            return RewardResult(0.0, f"not equal: {value} vs {target}")
        return RewardResult(1.0)


def _join(left: str, left_prec: int, op: str, right: str, right_prec: int) -> str:
    """``left op right`` with only the parentheses precedence needs.

    Precedences: 1 for ``+ -``, 2 for ``* /``, 3 for a number.

    >>> _join("25-3", 1, "*", "7", 3), _join("9", 3, "-", "5-2", 1), _join("8", 3, "/", "2*2", 2)
    ('(25-3)*7', '9-(5-2)', '8/(2*2)')
    """
    op_prec = 1 if op in "+-" else 2
    if left_prec < op_prec:
        left = f"({left})"
    if right_prec < op_prec or (op in "-/" and right_prec == op_prec):
        right = f"({right})"
    return f"{left}{op}{right}"
