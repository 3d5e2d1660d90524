"""SFT on 2-digit addition: the tiny model goes from 0 to a high held-out accuracy (fixed seed)."""

import pytest

from seqrl.data import get_task
from seqrl.evaluation import evaluate
from seqrl.models import load_policy
from seqrl.utils.seeding import seed_everything


def untrained_accuracy(cfg, seed: int = 0) -> float:
    """Held-out greedy accuracy of `cfg`'s model as initialised from `seed`, on the test's problems
    (`benchmarks/e2e_margins.py` runs the test's setting over seeds)."""
    seed_everything(seed)
    task = get_task("arith", digits=2)
    problems = task.problems("test", cfg.task.n_test, cfg.task.seed)
    return evaluate(load_policy(cfg.model), task, problems, max_new_tokens=32).metrics["eval/accuracy"]


@pytest.mark.e2e
def test_sft_on_two_digit_addition_beats_untrained_by_a_wide_margin(sft_two_digit):
    cfg = sft_two_digit.cfg
    before = untrained_accuracy(cfg)
    after = sft_two_digit.metrics["eval/accuracy"]
    from seqrl.utils.metrics import read_metrics

    assert read_metrics(cfg.run.dir / "metrics.jsonl")[0]["run/bf16"] == 0.0  # the suite's fp32 pin reached it
    print(f"held-out greedy accuracy: untrained {before:.2f} -> after SFT {after:.2f}")
    assert after >= before + 0.5
