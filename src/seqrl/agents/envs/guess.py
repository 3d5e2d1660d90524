"""``guess``: find a hidden number with ``guess(number)``, told "higher" or "lower" after each try.

The smallest complete environment — a reset that reads the row, one tool, a ``done`` flag and a
reward — to copy when writing one. The number comes from the row's ``seed`` column (else its answer),
so the G episodes of one row play the same game.
"""

from __future__ import annotations

import random
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
