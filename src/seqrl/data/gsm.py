"""GSM-style word problems from templates, with short worked solutions (`GSMTask`).

Each template draws small numbers and writes a one- or two-sentence problem whose solution is 2–3
equations, e.g. ``Ann buys 3 pens at $4 each and pays $20. How much change?`` → steps
``3*4=12``, ``20-12=8``; answer ``8``. Answers are integers; the verifier compares numbers, so
``1,000``, ``$8`` and ``12.0`` are read as 1000, 8 and 12.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from fractions import Fraction

from seqrl.answers import FormattedAnswers, check_answer_format, find_answer, normalise, plain_number, verdict
from seqrl.data.splits import sample_split
from seqrl.types import Problem, RewardResult, Task

MAX_ANSWER_CHARS = 50
NAMES = ("Ann", "Ben", "Mia", "Tom", "Sam", "Zoe", "Max", "Lily")

# A template: rng -> (numbers that define the problem, prompt with {name}, steps, answer).
Template = Callable[[random.Random], tuple[tuple[int, ...], str, list[str], int]]


def parse_number(text: str) -> Fraction | None:
    """The number `text` writes (thousands groups, a leading ``$``, a Unicode minus and
    surrounding spaces allowed), else None.

    >>> parse_number("$1,000"), parse_number("12.0"), parse_number("twelve")
    (Fraction(1000, 1), Fraction(12, 1), None)
    """
    text = text.strip()
    if text.startswith("$"):
        text = text[1:]
    text = normalise(text)
    if len(text) > MAX_ANSWER_CHARS or "/" in text:
        return None
    return plain_number(text)


def _shopping(rng: random.Random):
    count, price = rng.randint(2, 9), rng.randint(2, 9)
    cost = count * price
    paid = rng.choice([p for p in (10, 20, 50, 100) if p >= cost])
    prompt = f"{{name}} buys {count} pens at ${price} each and pays ${paid}. How much change?"
    steps = [f"{count}*{price}={cost}", f"{paid}-{cost}={paid - cost}"]
    return (count, price, paid), prompt, steps, paid - cost


def _ages(rng: random.Random):
    age, times, years = rng.randint(3, 12), rng.randint(2, 5), rng.randint(2, 9)
    mom = age * times
    prompt = f"{{name}} is {age}. Mom is {times} times as old. How old is Mom in {years} years?"
    steps = [f"{age}*{times}={mom}", f"{mom}+{years}={mom + years}"]
    return (age, times, years), prompt, steps, mom + years


def _rates(rng: random.Random):
    speed, hours, more = rng.randint(2, 12), rng.randint(2, 6), rng.randint(2, 4)
    total = hours + more
    prompt = (
        f"{{name}} reads {speed} pages an hour for {hours} hours, then {more} more hours. "
        "How many pages?"
    )
    steps = [f"{hours}+{more}={total}", f"{speed}*{total}={speed * total}"]
    return (speed, hours, more), prompt, steps, speed * total


def _sharing(rng: random.Random):
    friends, each = rng.randint(2, 6), rng.randint(2, 9)
    total = friends * each
    bought = rng.randint(1, total - 1)
    had = total - bought
    prompt = (
        f"{{name}} has {had} apples, buys {bought} more and shares them among {friends} "
        "friends. How many each?"
    )
    steps = [f"{had}+{bought}={total}", f"{total}/{friends}={each}"]
    return (had, bought, friends), prompt, steps, each


def _savings(rng: random.Random):
    weekly, weeks = rng.randint(2, 9), rng.randint(2, 9)
    saved = weekly * weeks
    spent = rng.randint(1, saved - 1)
    prompt = f"{{name}} saves ${weekly} a week for {weeks} weeks, spends ${spent}. How much left?"
    steps = [f"{weekly}*{weeks}={saved}", f"{saved}-{spent}={saved - spent}"]
    return (weekly, weeks, spent), prompt, steps, saved - spent


def _perimeter(rng: random.Random):
    length, width = rng.randint(3, 20), rng.randint(2, 15)
    half = length + width
    prompt = f"{{name}}'s garden is {length} m long and {width} m wide. What is its perimeter?"
    return (length, width), prompt, [f"{length}+{width}={half}", f"2*{half}={2 * half}"], 2 * half


def _half(rng: random.Random):
    half, more = rng.randint(2, 25), rng.randint(1, 9)
    had = 2 * half
    prompt = f"{{name}} has {had} stickers, gives away half, then gets {more} more. How many now?"
    return (had, more), prompt, [f"{had}/2={half}", f"{half}+{more}={half + more}"], half + more


def _two_items(rng: random.Random):
    shirts, shirt_price, hats, hat_price = (rng.randint(2, 9) for _ in range(4))
    a, b = shirts * shirt_price, hats * hat_price
    prompt = (
        f"{{name}} buys {shirts} shirts at ${shirt_price} and {hats} hats at ${hat_price}. "
        "What is the total?"
    )
    steps = [f"{shirts}*{shirt_price}={a}", f"{hats}*{hat_price}={b}", f"{a}+{b}={a + b}"]
    return (shirts, shirt_price, hats, hat_price), prompt, steps, a + b


TEMPLATES: dict[str, Template] = {
    "shopping": _shopping,
    "ages": _ages,
    "rates": _rates,
    "sharing": _sharing,
    "savings": _savings,
    "perimeter": _perimeter,
    "half": _half,
    "two_items": _two_items,
}


class GSMTask(FormattedAnswers, Task):
    """Templated grade-school word problems (see `TEMPLATES`) with integer answers.

    The canonical key is the template and its numbers (``shopping:3,4,20``), not the name in the
    story, so a problem never appears in both splits under two names.
    """

    def __init__(self, name: str = "gsm", answer_format: str = "answer_tag"):
        self.name = name
        self.answer_format = check_answer_format(answer_format)

    def problems(self, split: str, n: int, seed: int = 0) -> list[Problem]:
        return sample_split(self._draw, self.name, split, n, seed)

    @staticmethod
    def _draw(rng: random.Random):
        template = rng.choice(sorted(TEMPLATES))
        numbers, prompt, steps, answer = TEMPLATES[template](rng)
        person = rng.choice(NAMES)
        key = f"{template}:{','.join(map(str, numbers))}"

        def build() -> Problem:
            return Problem(
                prompt=prompt.format(name=person),
                answer=str(answer),
                steps=tuple(steps),
                metadata={"template": template, "numbers": numbers},
            )

        return key, build

    def verify(self, problem: Problem, completion: str) -> RewardResult:
        """1.0 when the ``<answer>`` equals the gold answer by the shared comparison
        (`seqrl.answers.compare_answers`).

        >>> p = Problem("...", "1000")
        >>> GSMTask().verify(p, "<answer>1,000.0</answer>").score
        1.0
        >>> GSMTask().verify(p, "<answer>about 1000</answer>").reason
        'not equal: about 1000 vs 1000'
        >>> GSMTask().verify(p, "<answer>999 or 1000</answer>").reason
        'hedged: or'
        """
        answer, why = find_answer(completion, self.answer_format)
        if answer is None:
            return RewardResult(0.0, why)
        return verdict(problem.answer, answer, MAX_ANSWER_CHARS)
