"""Splits and the stable hashing every task seeds and splits with.

Splits are disjoint by construction: each problem has a canonical key (its operands, its numbers
and target, its question text ...), and `split_of(key)` assigns the key to "train" or "test" with a
stable hash (~10% test). A task draws the problems of a split only from keys of that split.
Seeds come from `stable_hash` too, never from Python's salted `hash()`, so runs repeat exactly.

>>> split_of("47+85") == split_of("47+85")
True
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import replace

from seqrl.types import Problem

SPLITS = ("train", "test")
TEST_EVERY = 10  # a key goes to the test split when stable_hash(key) % TEST_EVERY == 0


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} (got {split!r})")


def stable_hash(text: str) -> int:
    """A 64-bit hash of `text` that is the same in every process and Python version."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def split_of(key: str, test_fraction: float | None = None) -> str:
    """The split ("train" or "test") a problem with canonical key `key` belongs to: ~10% test, or
    `test_fraction` of the keys (by the hash's position in [0, 1): of two fractions, the larger holds
    out every key the smaller does)."""
    if test_fraction is None:
        return "test" if stable_hash(key) % TEST_EVERY == 0 else "train"
    return "test" if stable_hash(key) / 2**64 < test_fraction else "train"


def seeded_rng(name: str, split: str, seed: int) -> random.Random:
    """The random generator of `problems(split, n, seed)` for the task called `name`."""
    return random.Random(stable_hash(f"{name}:{split}:{seed}"))


def sample_split(
    draw: Callable[[random.Random], tuple[str, Callable[[], Problem]]],
    name: str,
    split: str,
    n: int,
    seed: int,
) -> list[Problem]:
    """Rejection-sample `n` problems of `split` for task `name`, distinct when the split has
    enough of them; ``seeded_rng(name, split, seed)`` drives `draw`.

    `draw(rng)` returns a candidate's canonical key and a function that builds its `Problem` (only
    called for accepted keys). Candidates whose key falls in the other split, or that repeat a key
    already drawn, are rejected. When the attempt budget (``50 * n + 5000`` draws) runs out before
    `n` distinct keys are found — a split of a tiny space, e.g. 1-digit addition has ~10 test
    keys — the list is filled by cycling through the distinct problems found, so it then holds
    repeats. Each problem's uid is ``"<name>/<key>"``, with ``"#<k>"`` added on its k-th repeat.
    Raises ValueError when the split yields no key at all.
    """
    check_split(split)
    if n < 0:
        raise ValueError(f"n must be >= 0 (got {n})")
    rng = seeded_rng(name, split, seed)
    budget = 50 * n + 5000
    found: dict[str, Problem] = {}
    for _ in range(budget):
        if len(found) == n:
            break
        key, build = draw(rng)
        if key not in found and split_of(key) == split:
            found[key] = replace(build(), uid=f"{name}/{key}")
    if n and not found:
        raise ValueError(f"{name}: found no {split} problem in {budget} draws")
    distinct = list(found.values())
    out = distinct[:n]
    for i in range(len(out), n):
        problem = distinct[i % len(distinct)]
        out.append(replace(problem, uid=f"{problem.uid}#{i // len(distinct)}"))
    return out
