"""Imported once by the reward workers' forkserver (`seqrl.sandbox.workers.DEFAULT_PRELOAD`).

math-verify loads sympy and its LaTeX grammar on its first call (≈ 0.75 s on an idle core, several
seconds on a loaded one), longer than the math reward's 1 s limit: without this, the first answer
scored by every new worker — including each replacement of a worker killed for a timeout — would time
out, and so would the next one on its replacement. Forked workers inherit the warm state.

The pairs are ones only math-verify decides (no plain number, LaTeX fraction or equal text on both
sides: `seqrl.answers._equal` settles those before it), and `WARM` says whether the parser really
loaded; a worker reports it when it starts (`WorkerPool.warm`).
"""

from __future__ import annotations

import sys

PAIRS = (("12", "\\sqrt{144}"), ("\\frac{x}{2}", "x/2"), ("2^{10}", "1024"))
"""(gold, answer) pairs, each equal, each decided by math-verify's LaTeX parser and sympy."""

LOADED = ("sympy", "math_verify", "latex2sympy2_extended")
"""Modules a warm worker holds."""

WARM = False
"""True once every pair verified and every module of `LOADED` is imported."""

ERROR = ""
"""Why the warm-up failed, when it did."""


def warm_up() -> None:
    """Score `PAIRS` as the math reward does; raises RuntimeError when one fails or a parser module is missing."""
    from seqrl.answers import compare_answers

    for gold, answer in PAIRS:
        equal, why = compare_answers(gold, answer)
        if not equal:
            raise RuntimeError(f"warm-up pair {answer!r} vs {gold!r} not verified: {why}")
    missing = [m for m in LOADED if m not in sys.modules]
    if missing:
        raise RuntimeError(f"warm-up left {', '.join(missing)} unloaded")


try:
    warm_up()
    WARM = True
except Exception as e:  # noqa: BLE001 — reported by each worker's hello; the first calls then pay the load
    ERROR = f"{type(e).__name__}: {e}"[:300]
