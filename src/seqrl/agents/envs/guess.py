"""``guess``: find a hidden number with ``guess(number)``, told "higher" or "lower" after each try.

The smallest complete environment — a reset that reads the row, one tool, a ``done`` flag and a
reward — to copy when writing one. The number comes from the row's ``seed`` column (else its answer),
so the G episodes of one row play the same game.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any


class GuessEnv:
    """Guess a number between 1 and ``high`` (100); reward 1 for finding it in one guess, falling by
    ``1 / max_guesses`` per extra guess, 0 when not found."""

    high = 100
    max_guesses = 7  # enough for a binary search of 1 … 100

    def __init__(self) -> None:
        self.target, self.guesses, self.found, self.done = 0, 0, False, False

    def reset(self, seed: Any = None, answer: str | None = None, **_: Any) -> str:
        if seed is None and answer not in (None, ""):
            try:
                self.target = int(str(answer).strip())
            except ValueError:
                raise ValueError(f"guess: the row's answer {answer!r} is not a whole number") from None
        else:
            self.target = random.Random(str(seed)).randint(1, self.high)
        if not 1 <= self.target <= self.high:
            raise ValueError(f"guess: the number {self.target} is outside 1 … {self.high}")
        self.guesses, self.found, self.done = 0, False, False
        return (f"\nI am thinking of a whole number from 1 to {self.high}. Find it with the guess tool; "
                f"you have {self.max_guesses} guesses.")

    def guess(self, number: int) -> str:
        """Guess the hidden number.

        Args:
            number: Your guess, a whole number from 1 to 100.
        """
        if self.done:
            return "The game is over."
        self.guesses += 1
        if number == self.target:
            self.found = self.done = True
            return f"Correct: {number} in {self.guesses} guesses."
        if self.guesses >= self.max_guesses:
            self.done = True
            return f"Wrong, and no guesses left; it was {self.target}."
        return f"{'Higher' if number < self.target else 'Lower'} than {number}."

    def get_reward(self) -> float:
        if not self.found:
            return 0.0
        return 1.0 - (self.guesses - 1) / self.max_guesses

    @property
    def solved(self) -> bool:
        """Found within the guesses (what the held-out accuracy counts)."""
        return self.found


def bisection_expert(noise: float = 0.0, seed: int = 0, syntax: str = "compact", high: int = GuessEnv.high
                     ) -> Callable[[str], str]:
    """An expert for `seqrl.agents.demos.expert_sampler`: bisection on the hints in the episode's text so
    far; with probability `noise` a guess drawn anywhere in the range still open (noisy demonstrations).
    After "Correct" it ends the episode with a line saying the number."""
    rng = random.Random(seed)

    def turn(text: str) -> str:
        found = re.findall(r"Correct: (\d+)", text)
        if found:
            return f"The number is {found[-1]}."
        lo, hi = 1, high
        for word, n in re.findall(r"(Higher|Lower) than (\d+)", text.split("whole number from", 1)[-1]):
            lo, hi = (max(lo, int(n) + 1), hi) if word == "Higher" else (lo, min(hi, int(n) - 1))
        guess = rng.randint(lo, max(lo, hi)) if rng.random() < noise else (lo + hi) // 2
        return (f"[[guess {guess}]]" if syntax == "compact"
                else f'<tool_call>{{"name": "guess", "arguments": {{"number": {guess}}}}}</tool_call>')

    return turn
