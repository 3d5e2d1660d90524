"""SFT on 2-digit addition: the tiny model goes from 0 to a high held-out accuracy (fixed seed)."""

import pytest

from seqrl.algos.common import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.sft import EvalConfig, SFTConfig, train
from seqrl.data import get_task
from seqrl.evaluation import evaluate
from seqrl.models import ModelConfig, load_policy
from seqrl.utils.seeding import seed_everything


@pytest.mark.e2e
def test_sft_on_two_digit_addition_beats_untrained_by_a_wide_margin(tmp_path):
    cfg = SFTConfig(
        run=RunConfig(name="e2e", out_dir=str(tmp_path), seed=0, progress=False),
        model=ModelConfig(preset="tiny", max_seq_len=64),
        task=TaskConfig(name="arith", kwargs={"digits": 2}, n_train=4000, n_test=100),
        optim=OptimConfig(lr=3e-3, warmup_steps=30),
        eval=EvalConfig(max_new_tokens=32),
        steps=240,
        batch_size=32,
    )
    seed_everything(0)
    untrained = load_policy(cfg.model)
    task = get_task("arith", digits=2)
    before = evaluate(untrained, task, task.problems("test", 100, 0), max_new_tokens=32).metrics["eval/accuracy"]
    after = train(cfg)["eval/accuracy"]
    print(f"held-out greedy accuracy: untrained {before:.2f} -> after SFT {after:.2f}")
    assert after >= before + 0.5
