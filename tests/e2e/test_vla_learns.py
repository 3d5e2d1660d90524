"""A VLA behaviour-cloned on a few hundred GoToRedBallGrey bot demonstrations beats a random policy by a wide
margin on held-out layouts (fixed seed)."""

from __future__ import annotations

import pytest

from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.algos.vla import VLAConfig, VLADataConfig, VLAEvalConfig, train
from seqrl.models.vla import VLAModelConfig


def vla_config(out, seed: int = 0) -> VLAConfig:
    """The test's setting at seed `seed`, its run under `out` (`benchmarks/e2e_margins.py` runs it over seeds)."""
    return VLAConfig(
        run=RunConfig(name="e2e", out_dir=str(out), seed=seed, log_every=50, progress=False),
        data=VLADataConfig(dataset="quick:GoToRedBallGrey", quick_episodes=300, quick_seed=0),
        model=VLAModelConfig(hidden_size=32, n_layer=1, n_head=2, context_len=2, n_fusion=1, dropout=0.0),
        optim=OptimConfig(lr=3e-3, weight_decay=0.0, warmup_steps=20, schedule="cosine", grad_clip=1.0),
        eval=VLAEvalConfig(episodes=100, seed=0, strip=False),
        steps=400, batch_size=32,
    )


@pytest.mark.e2e
def test_vla_beats_random_on_held_out_gotoredballgrey(tmp_path):
    cfg = vla_config(tmp_path)
    final = train(cfg)
    from seqrl.utils.metrics import read_metrics

    random_rate = read_metrics(tmp_path / "e2e" / "metrics.jsonl")[0]["eval/random_success_rate"]
    print(f"held-out success: VLA {final['eval/success_rate']:.2f} (length {final['eval/episode_length']:.1f}), "
          f"random {random_rate:.2f}")
    assert final["eval/success_rate"] >= random_rate + 0.4
