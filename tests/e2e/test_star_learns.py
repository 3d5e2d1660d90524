"""STaR on 2-digit addition: two iterations from a deliberately short-trained base raise held-out accuracy."""

import pytest

from seqrl.algos.common import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.star import BaseConfig, STaRConfig, train
from seqrl.evaluation import EvalConfig
from seqrl.models import ModelConfig
from seqrl.utils.metrics import read_metrics


@pytest.mark.e2e
def test_two_star_iterations_beat_the_base(tmp_path):
    # the arith_tiny_star preset with 512 training and 100 held-out problems, two iterations (≈ 50 s CPU)
    cfg = STaRConfig(
        run=RunConfig(name="star_e2e", out_dir=str(tmp_path), seed=0, progress=False),
        model=ModelConfig(preset="tiny", max_seq_len=64),
        base=BaseConfig(examples=256, hinted=32, steps=180, batch_size=32, lr=3e-3),
        task=TaskConfig(name="arith", kwargs={"digits": 2}, n_train=512, n_test=100),
        optim=OptimConfig(lr=1e-3, warmup_steps=5, schedule="constant"),
        eval=EvalConfig(max_new_tokens=32),
        iterations=2, temperature=0.7, max_new_tokens=32, steps=40, batch_size=32,
    )
    final = train(cfg)
    records = read_metrics(cfg.run.dir / "metrics.jsonl")
    base, after = records[0]["eval/accuracy"], final["eval/accuracy"]
    print(f"held-out greedy accuracy: base {base:.2f} -> after 2 STaR iterations {after:.2f}; "
          f"coverage {[r['star/train_coverage'] for r in records[1:]]}")
    assert 0.05 <= base <= 0.5  # a weak base that can still solve some problems
    assert after >= base + 0.08
    assert records[2]["star/train_coverage"] > records[1]["star/train_coverage"]
