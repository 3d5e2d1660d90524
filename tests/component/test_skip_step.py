"""run.on_nonfinite=skip_step for the trainers whose update is not a single model's (PPO's two
networks, STaR's per-iteration fine-tune): a non-finite loss skips that optimizer update everywhere it
would land, counts it, and the next finite update steps again. ``stop`` raises before the update."""

from __future__ import annotations

import pytest
import torch

from seqrl.rewards.combine import RewardResult
from seqrl.training.run import NonFiniteError


def length_reward(problems, completions):
    return [RewardResult(len(c) / 8.0) for c in completions]


def _ppo(tmp_path, on_nonfinite):
    from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
    from seqrl.algos.ppo import PPOConfig, PPOLearner, SamplingConfig
    from seqrl.evaluation import EvalConfig
    from seqrl.models.heads import load_scalar_model
    from seqrl.models.lm import ModelConfig, load_policy

    cfg = PPOConfig(run=RunConfig(name="p", out_dir=str(tmp_path), seed=1, progress=False, on_nonfinite=on_nonfinite),
                    model=ModelConfig(preset="tiny", max_seq_len=64), task=TaskConfig(name="arith", n_train=32, n_test=4),
                    optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant"), eval=EvalConfig(max_new_tokens=4),
                    sampling=SamplingConfig(max_new_tokens=4), steps=3, batch_size=8, group_size=4, micro_batch_size=8)
    torch.manual_seed(0)
    policy, (critic, _) = load_policy(cfg.model), load_scalar_model(cfg.model)
    task = cfg.task.build()
    return PPOLearner(cfg, policy, critic, task, task.problems("train", 32, 0), {"len": (length_reward, 1.0)})


def _params(*nets):
    return [p.detach().clone() for net in nets for p in net.parameters()]


def test_ppo_skip_step_skips_both_networks_and_counts_it(tmp_path, monkeypatch):
    import seqrl.algos.ppo as ppo

    learner = _ppo(tmp_path, "skip_step")
    real, poison = ppo.grpo_loss, [False]

    def nan_when_poisoned(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        return (loss * float("nan"), stats) if poison[0] else (loss, stats)

    monkeypatch.setattr(ppo, "grpo_loss", nan_when_poisoned)
    nets = (learner.policy.model, learner.critic)
    updates = learner.cfg.num_iterations * learner.cfg.minibatches  # optimizer updates per step
    before = _params(*nets)
    first = learner.train_step(learner.collect(0))
    after_first = _params(*nets)
    poison[0] = True
    second = learner.train_step(learner.collect(1))
    poison[0] = False
    after_second = _params(*nets)
    assert first["stats/skipped_updates"] == 0 and second["stats/skipped_updates"] == updates
    assert not all(torch.equal(a, b) for a, b in zip(before, after_first))  # a finite update steps
    assert all(torch.equal(a, b) for a, b in zip(after_first, after_second))  # neither network moved
    third = learner.train_step(learner.collect(2))
    assert third["stats/skipped_updates"] == updates and not all(torch.equal(a, b) for a, b in zip(after_second, _params(*nets)))


def test_ppo_stop_raises_before_the_update(tmp_path, monkeypatch):
    import seqrl.algos.ppo as ppo

    learner = _ppo(tmp_path, "stop")
    real = ppo.grpo_loss
    monkeypatch.setattr(ppo, "grpo_loss", lambda *a, **k: (lambda out: (out[0] * float("inf"), out[1]))(real(*a, **k)))
    nets = (learner.policy.model, learner.critic)
    before = _params(*nets)
    with pytest.raises(NonFiniteError, match="step 1: non-finite loss"):
        learner.train_step(learner.collect(0))
    assert all(torch.equal(a, b) for a, b in zip(before, _params(*nets)))  # the weights stay finite


def test_star_fine_tune_skips_a_non_finite_update_and_stop_names_the_iteration(tmp_path, monkeypatch):
    import importlib

    ft = importlib.import_module("seqrl.training.finetune")  # the module (the package re-exports the function)
    from seqrl.algos.config import OptimConfig
    from seqrl.models.lm import ModelConfig, load_policy
    from seqrl.training.run import make_optimizer

    torch.manual_seed(0)
    policy = load_policy(ModelConfig(preset="tiny", max_seq_len=64))
    from seqrl.types import Problem

    problems = [Problem(prompt=f"{i}+1=", answer=str(i + 1)) for i in range(8)]
    examples = ft.encode_pairs(policy, problems, [p.answer for p in problems])
    real, calls = ft.accumulate_gradients, []

    def nan_on_second(model, chunks, *args, **kwargs):
        loss, tokens = real(model, chunks, *args, **kwargs)
        calls.append(1)
        return (float("nan"), tokens) if len(calls) == 2 else (loss, tokens)

    monkeypatch.setattr(ft, "accumulate_gradients", nan_on_second)
    snapshots = []
    opt, sched = make_optimizer(policy.model, OptimConfig(lr=1e-3, warmup_steps=0), 3)
    opt.register_step_post_hook(lambda *_: snapshots.append(1))
    out = ft.finetune(policy.model, examples, steps=3, batch_size=4, optimizer=opt, scheduler=sched,
                      pad_id=policy.tokenizer.pad_token_id, seed=0, on_nonfinite="skip_step")
    assert out["stats/skipped_updates"] == 1 and len(snapshots) == 2  # the second update was skipped
    assert out["loss/sft"] == out["loss/sft"]  # the mean of the finite step losses (not NaN)
    calls.clear()
    opt, sched = make_optimizer(policy.model, OptimConfig(lr=1e-3, warmup_steps=0), 3)
    with pytest.raises(NonFiniteError, match="STaR iteration 2: step 2: non-finite loss"):
        ft.finetune(policy.model, examples, steps=3, batch_size=4, optimizer=opt, scheduler=sched,
                    pad_id=policy.tokenizer.pad_token_id, seed=0, label="STaR iteration 2")
