"""Bounded-concurrency batch runner: many sandboxed runs, results in input order."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from seqrl.sandbox.runner import SandboxResult, run_python


def run_many(jobs: list[dict], max_workers: int = 2) -> list[SandboxResult]:
    """Run each job (keyword arguments of :func:`run_python`) with at most ``max_workers`` at once.

    Threads only wait on subprocesses, so a thread pool is enough; order is preserved.
    """
    if max_workers < 1:
        raise ValueError(f"run_many: max_workers must be >= 1 (got {max_workers})")
    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=min(max_workers, len(jobs))) as ex:
        return list(ex.map(lambda job: run_python(**job), jobs))
