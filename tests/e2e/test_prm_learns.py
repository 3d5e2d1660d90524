"""A PRM trained on Math-Shepherd labels of a policy's own arithmetic steps tells its held-out right
steps from its wrong ones (fixed seed, ≈ 30 s here).

The policy is `NoisyArithmeticPolicy` with carry slips (a dropped or invented carry: the column's sum
is right for its terms, so only reading the previous column shows the slip), so the labels come
from rollouts in seconds; the PRM is the tiny preset from scratch.
"""

import pytest
import torch

from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.algos.prm import PRMConfig, PRMDataConfig, train
from seqrl.core.search import binary_auc
from seqrl.data import ArithmeticTask
from seqrl.data.stepwise import arith_step_truth, split_steps
from seqrl.models.lm import ModelConfig
from seqrl.models.prm import ProcessRewardModel
from seqrl.search.labels import LabelConfig, label_problems
from seqrl.search.simulated import NoisyArithmeticPolicy


def first_error_auc(prm, task, problems, policy) -> float:
    """AUC of step scores: the right steps before a solution's first wrong step vs those first wrong steps
    (steps after an error are neither: their prefix is already lost)."""
    samples, _ = policy.sample(problems, 2, seed=99)
    questions, solutions, truths = [], [], []
    for p, texts in zip(problems, samples):
        for text in texts:
            steps = split_steps(text)
            questions.append(p)
            solutions.append(steps)
            truths.append(arith_step_truth(p, steps))
    scores, labels = [], []
    for s, truth in zip(prm.score(questions, solutions), truths):
        for value, right in zip(s, truth):
            scores.append(value)
            labels.append(right)
            if not right:
                break
    return binary_auc(scores, labels)


def prm_auc_gain(out, seed: int = 0) -> tuple[float, float, float]:
    """The test's setting at training seed `seed`: (label accuracy against the step truth, held-out
    first-error AUC untrained, trained); runs go under `out` (`benchmarks/e2e_margins.py` runs it over seeds)."""
    task = ArithmeticTask(digits=2)
    policy = NoisyArithmeticPolicy(step_error=0.3, answer_error=0.0, error="carry")
    stats = label_problems(policy, task, task.problems("train", 400, seed=0), LabelConfig(n=2, rollouts=4, label="hard"),
                           out / "labels.jsonl", progress=False)
    cfg = PRMConfig(run=RunConfig(name="prm", out_dir=str(out), seed=seed, progress=False, log_every=20),
                    model=ModelConfig(preset="tiny", max_seq_len=48), data=PRMDataConfig(path=str(out / "labels.jsonl")),
                    optim=OptimConfig(lr=3e-3, warmup_steps=10), steps=60, batch_size=32)
    held_out = task.problems("test", 150, seed=0)
    torch.manual_seed(seed)
    before = first_error_auc(ProcessRewardModel.build(cfg.model), task, held_out, policy)
    train(cfg)
    after = first_error_auc(ProcessRewardModel.load(out / "prm" / "checkpoint-60"), task, held_out, policy)
    return stats.label_acc_hard, before, after


@pytest.mark.e2e
def test_prm_on_automatic_labels_ranks_held_out_right_steps_above_wrong(tmp_path):
    label_acc, before, after = prm_auc_gain(tmp_path)
    assert label_acc > 0.85  # labels against the exact step truth
    print(f"held-out first-error AUC: untrained {before:.3f} -> trained {after:.3f}")
    assert after >= 0.8 and after >= before + 0.2
