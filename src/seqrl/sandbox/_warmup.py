"""Imported once by the reward workers' forkserver (`seqrl.sandbox.workers.DEFAULT_PRELOAD`).

math-verify loads sympy and its LaTeX grammar on its first call (≈ 1.5 s here), longer than the
math reward's 1 s limit: without this, the first answer scored by every new worker — including each
replacement of a worker killed for a timeout — would time out. Forked workers inherit the warm state.
"""

from __future__ import annotations


def warm_up() -> None:
    from seqrl.types import Problem
    from seqrl.rewards.math import math_answer_reward

    math_answer_reward([Problem("q", "\\frac{1}{2}")] * 2, ["<answer>\\frac{1}{2}</answer>", "<answer>0.5</answer>"])


try:
    warm_up()
except Exception:  # noqa: BLE001 — a failed warm-up only costs the first call its speed
    pass
