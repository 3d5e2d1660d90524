"""PPO with a critic and the verifier as the reward raises held-out sampled accuracy over a weak SFT
model (fixed seed).

The SFT model is made here in seconds: 100 steps of the tiny preset on 1-digit addition, which
answers ≈ 57 % of held-out problems greedily but only ≈ 27 % when sampled at T = 1; 30 PPO steps of
64 completions (GAE, critic from the SFT weights, β = 0) sharpen it. Measured (seed 0, this test's
settings): held-out pass@1 0.27 → 0.325 at 30 steps, 0.345 at 40.
"""

import pytest

from seqrl.algos.common import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.ppo import CriticConfig, PPOConfig, PPOLossConfig, SamplingConfig, train
from seqrl.algos.sft import SFTConfig
from seqrl.algos.sft import train as train_sft
from seqrl.evaluation import EvalConfig
from seqrl.models import ModelConfig
from seqrl.utils.metrics import read_metrics


@pytest.mark.e2e
def test_ppo_raises_held_out_accuracy_of_a_weak_sft_model(tmp_path):
    task = TaskConfig(name="arith", kwargs={"digits": 1}, n_train=2000, n_test=100)
    sft = SFTConfig(run=RunConfig(name="sft", out_dir=str(tmp_path), seed=0, progress=False),
                    model=ModelConfig(preset="tiny", max_seq_len=48), task=task,
                    optim=OptimConfig(lr=3e-3, warmup_steps=10), eval=EvalConfig(max_new_tokens=16),
                    steps=100, batch_size=32)
    train_sft(sft)
    cfg = PPOConfig(
        run=RunConfig(name="ppo", out_dir=str(tmp_path), seed=0, progress=False, log_every=5),
        model=ModelConfig(path=str(tmp_path / "sft" / "checkpoint-100")),
        task=task,
        optim=OptimConfig(lr=1e-4, warmup_steps=0, schedule="constant"),
        critic=CriticConfig(optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant")),
        eval=EvalConfig(max_new_tokens=16, samples=4),
        sampling=SamplingConfig(max_new_tokens=16),
        loss=PPOLossConfig(advantage="gae", beta=0.0),
        steps=30, batch_size=64, num_iterations=2, minibatches=2, micro_batch_size=64,
    )
    train(cfg)
    rows = read_metrics(cfg.run.dir / "metrics.jsonl")
    evals = [r for r in rows if "eval/pass@1" in r]
    before, after = evals[0], evals[-1]
    print(f"held-out pass@1 {before['eval/pass@1']:.3f} -> {after['eval/pass@1']:.3f}, "
          f"greedy {before['eval/accuracy']:.3f} -> {after['eval/accuracy']:.3f}")
    assert (before["step"], after["step"]) == (0, 30)
    assert after["eval/pass@1"] >= before["eval/pass@1"] + 0.03
    assert all("loss/value" in r and "stats/explained_variance" in r for r in rows if r["step"] > 0)
