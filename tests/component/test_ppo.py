"""The PPO loop: config errors, the plain policy-gradient step at μ = 1 / one minibatch / β = 0,
every advantage mode and KL placement through a step, the entropy-bonus forward, exact resume."""

from __future__ import annotations

import pytest
import torch

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.ppo import PPOConfig, PPOLossConfig, PPOLearner, SamplingConfig, train
from seqrl.config import ConfigError, from_dict
from seqrl.evaluation import EvalConfig
from seqrl.models import ModelConfig, load_policy
from seqrl.models.heads import load_scalar_model
from seqrl.rewards import RewardResult
from seqrl.rollout import sequence_logprobs
from seqrl.utils.checkpoint import latest_checkpoint
from seqrl.utils.metrics import read_metrics


def length_reward(problems, completions):
    """A dense, in-process reward (no worker pool): longer completions score more."""
    return [RewardResult(len(c) / 8.0) for c in completions]


FNS = {"accuracy": (length_reward, 1.0)}


def _cfg(tmp_path=None, **kw) -> PPOConfig:
    base = dict(
        run=RunConfig(name="p", out_dir=str(tmp_path or "runs"), seed=1, log_every=1, progress=False),
        model=ModelConfig(preset="tiny", max_seq_len=64),
        task=TaskConfig(name="arith", n_train=64, n_test=4),
        optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant"),
        eval=EvalConfig(max_new_tokens=8),
        sampling=SamplingConfig(max_new_tokens=8),
        steps=2,
        batch_size=16,
        group_size=4,
        micro_batch_size=16,
    )
    base.update(kw)
    return PPOConfig(**base)


def _trainer(cfg: PPOConfig, seed: int = 0) -> PPOLearner:
    torch.manual_seed(seed)
    policy = load_policy(cfg.model)
    critic, _ = load_scalar_model(cfg.model)
    task = cfg.task.build()
    return PPOLearner(cfg, policy, critic, task, task.problems("train", cfg.task.n_train, 0), dict(FNS))


@pytest.mark.parametrize("data,match", [
    ({"loss": {"advantage": "group"}, "group_size": 1}, r"needs group_size >= 2"),
    ({"loss": {"advantage": "gae_then"}}, r"ppo.loss.advantage: expected one of"),
    ({"loss": {"lam": 1.5}}, r"loss.lam must be in \[0, 1\]"),
    ({"loss": {"value_clip": 0}}, r"loss.value_clip must be > 0 or null"),
    ({"batch_size": 10, "group_size": 4}, r"batch_size \(10\) must be divisible by group_size \(4\)"),
    ({"rewards": [{"name": "rm"}]}, r"reward 'rm' needs path"),
])
def test_config_errors_name_the_setting(data, match):
    with pytest.raises(ConfigError, match=match):
        from_dict(PPOConfig, data, path="ppo")


@pytest.mark.filterwarnings("ignore:Seems like .optimizer.step\(\).:UserWarning")  # the spy wraps step
def test_one_update_without_kl_is_the_plain_policy_gradient():
    cfg = _cfg(num_iterations=1, minibatches=1, micro_batch_size=5, loss=PPOLossConfig(beta=0.0),
               optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant", grad_clip=0.0))
    trainer = _trainer(cfg)
    batch = trainer.collect(0)
    assert trainer.ref is None and batch.advantages.abs().sum() > 0
    model = trainer.policy.model
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    logp, _ = sequence_logprobs(model, batch.prompt_ids, batch.completion_ids, trainer.policy.tokenizer.pad_token_id)
    pg = -(batch.advantages * logp * batch.mask).sum() / batch.mask.sum()  # −(1/N) Σ A_t ∇log π(o_t)
    want = torch.autograd.grad(pg, params, allow_unused=True)
    seen = []
    real = trainer.optimizer.step
    trainer.optimizer.step = lambda *a, **k: (seen.append([p.grad.clone() for p in params]), real(*a, **k))[1]
    metrics = trainer.train_step(batch)
    assert len(seen) == 1 and metrics["stats/ratio_mean"] == pytest.approx(1.0)
    for g, w in zip(seen[0], want):
        assert torch.allclose(g, torch.zeros_like(g) if w is None else w, atol=1e-6)


@pytest.mark.parametrize("loss", [
    PPOLossConfig(advantage="gae", beta=0.05, kl_in="reward"),
    PPOLossConfig(advantage="group", beta=0.05, kl_in="loss", kl_kind="k3", entropy_coef=0.01),
    PPOLossConfig(advantage="gae_then_group", beta=0.0, value_clip=None),
])
def test_each_advantage_mode_and_kl_placement_takes_a_finite_step(loss):
    trainer = _trainer(_cfg(loss=loss, num_iterations=2, minibatches=2, micro_batch_size=4))
    batch = trainer.collect(0)
    mask = batch.mask.bool()
    assert torch.all(batch.advantages[~mask] == 0) and torch.all(batch.returns[~mask] == 0)
    if loss.advantage == "gae_then_group":  # whitened within each prompt's group of 4
        for g in range(0, 16, 4):
            a = batch.advantages[g : g + 4][mask[g : g + 4]]
            assert abs(float(a.mean())) < 1e-5
    if loss.advantage == "group":  # one advantage per completion, broadcast over its tokens
        per_row = [set(batch.advantages[i][mask[i]].tolist()) for i in range(16)]
        assert all(len(s) <= 1 for s in per_row)
    metrics = trainer.train_step(batch)
    for key in ("loss/policy", "loss/value", "stats/clipfrac_high", "stats/value_clipfrac", "stats/grad_norm_value"):
        assert key in metrics and metrics[key] == metrics[key]
    if loss.beta > 0:
        assert batch.metrics["stats/kl"] == 0  # π = π_ref before the first update
        assert trainer.collect(1).metrics["stats/kl"] != 0


@pytest.mark.filterwarnings("ignore:Seems like .optimizer.step\(\).:UserWarning")  # the spy wraps step
def test_shared_backbone_value_head_trains_head_and_backbone(tmp_path):
    from seqrl.algos.ppo import CriticConfig
    from seqrl.models.heads import ValueHead

    # no clip on either group: the spy sees the raw gradients (both groups are clipped before either steps)
    cfg = _cfg(critic=CriticConfig(shared_backbone=True, vf_coef=0.5, optim=OptimConfig(
                   lr=1e-4, warmup_steps=0, schedule="constant", grad_clip=0.0)), num_iterations=1, minibatches=1,
               loss=PPOLossConfig(beta=0.0), micro_batch_size=8,
               optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant", grad_clip=0.0))
    torch.manual_seed(0)
    policy = load_policy(cfg.model)
    head = ValueHead(policy.model.config.hidden_size)
    task = cfg.task.build()
    trainer = PPOLearner(cfg, policy, head, task, task.problems("train", 64, 0), dict(FNS))
    batch = trainer.collect(0)
    # the values are the head on the policy's last hidden states at the positions predicting each token
    with torch.no_grad():
        policy.model.eval()
        _, _, v = trainer._forward(policy.model, batch.prompt_ids, batch.completion_ids, head)
    m = batch.mask.bool()
    assert torch.allclose(v[m], batch.values[m], atol=1e-5)
    # one step: the backbone's gradient is the policy gradient plus vf_coef × the value loss's
    params = [p for p in policy.model.parameters() if p.requires_grad]
    policy.model.train()
    logp, _, values = trainer._forward(policy.model, batch.prompt_ids, batch.completion_ids, head)
    from seqrl.core.ppo import clipped_value_loss

    vl, _ = clipped_value_loss(values, batch.values, batch.returns, batch.mask, cfg.loss.value_clip)
    n = batch.mask.sum()
    want = -(batch.advantages * logp * batch.mask).sum() / n + 0.5 * vl.sum() / n
    grads = torch.autograd.grad(want, params + list(head.parameters()), allow_unused=True)
    seen = []
    real = trainer.optimizer.step
    trainer.optimizer.step = lambda *a, **k: (seen.append([p.grad.clone() for p in params + list(head.parameters())]),
                                              real(*a, **k))[1]
    metrics = trainer.train_step(batch)
    assert metrics["loss/value"] > 0 and len(seen) == 1
    for g, w in zip(seen[0], grads):
        assert torch.allclose(g, torch.zeros_like(g) if w is None else w, atol=1e-6)


def test_entropy_bonus_forward_gives_the_same_logprobs():
    trainer = _trainer(_cfg(loss=PPOLossConfig(entropy_coef=0.01)))
    batch = trainer.collect(0)
    model = trainer.policy.model.eval()
    a, ea = trainer._logprobs(model, batch.prompt_ids, batch.completion_ids, entropy_grad=True)
    b, eb = trainer._logprobs(model, batch.prompt_ids, batch.completion_ids)
    m = batch.mask.bool()
    assert torch.allclose(a[m], b[m], atol=1e-5) and torch.allclose(ea[m], eb[m], atol=1e-5)
    assert ea.requires_grad and not eb.requires_grad


@pytest.mark.parametrize("shared", [False, True])
def test_resume_equals_an_uninterrupted_run(tmp_path, monkeypatch, shared):
    import seqrl.algos.ppo as ppo

    def run_cfg(out, resume=False):
        return _cfg(tmp_path / out, steps=4, loss=PPOLossConfig(beta=0.05), critic=ppo.CriticConfig(shared_backbone=shared),
                    rewards=[],
                    run=RunConfig(name="p", out_dir=str(tmp_path / out), seed=1, save_every=2, log_every=1,
                                  progress=False, resume=resume))

    train(run_cfg("a"), rewards=dict(FNS))
    calls = {"n": 0}
    real = ppo.PPOLearner.train_step

    def stop_at_third(self, batch):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(self, batch)

    monkeypatch.setattr(ppo.PPOLearner, "train_step", stop_at_third)
    with pytest.raises(KeyboardInterrupt):
        train(run_cfg("b"), rewards=dict(FNS))
    monkeypatch.setattr(ppo.PPOLearner, "train_step", real)
    assert latest_checkpoint(tmp_path / "b" / "p").name == "checkpoint-2"
    train(run_cfg("b", resume=True), rewards=dict(FNS))
    for sub in ("", "critic/"):
        from safetensors.torch import load_file

        a = load_file(tmp_path / "a" / "p" / f"{sub}checkpoint-4" / "model.safetensors")
        b = load_file(tmp_path / "b" / "p" / f"{sub}checkpoint-4" / "model.safetensors")
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), (sub, key)
    rows = lambda d: [(r["step"], r.get("reward/total/mean"), r.get("loss/value"))  # noqa: E731
                      for r in read_metrics(d / "p" / "metrics.jsonl")]
    assert rows(tmp_path / "a") == rows(tmp_path / "b")


@pytest.mark.parametrize("bf16", [False, True])
def test_run_bf16_covers_sampling_too(bf16_autocast_spy, bf16):
    import seqrl.training.sampled as sampled  # the one collect path of GRPO and PPO

    seen = bf16_autocast_spy(sampled)
    trainer = _trainer(_cfg(run=RunConfig(name="p", out_dir="runs", seed=1, progress=False, device="cpu", bf16=bf16)))
    trainer.collect(0)
    assert seen and all(s == bf16 for s in seen)


def test_missing_eos_penalty_lowers_exactly_the_cut_off_completions():
    """TRL's missing_eos_penalty: a completion that hit max_new_tokens without EOS loses it from its score."""
    plain = _trainer(_cfg()).collect(0)
    trainer = _trainer(_cfg(missing_eos_penalty=0.5))
    batch = trainer.collect(0)  # same seed, same samples
    eos = trainer.policy.tokenizer.eos_token_id
    cut = ~((batch.completion_ids == eos) & batch.mask.bool()).any(1)  # no EOS: ran to the token limit
    assert bool(cut.any()) and not bool(cut.all())
    assert torch.allclose(plain.scores - 0.5 * cut.float(), batch.scores)
    with pytest.raises(ConfigError, match="missing_eos_penalty must be a finite number >= 0"):
        from_dict(PPOConfig, {"missing_eos_penalty": -1.0}, path="ppo")


def test_a_critic_with_another_tokenizer_is_refused_before_any_step(tmp_path):
    """The critic reads the policy's token ids: a reward model on another backbone as critic.path would
    read them as other tokens (or index past its embeddings)."""
    import seqrl.algos.ppo as ppo

    other = load_policy(ModelConfig(preset="tiny", max_seq_len=64))
    other.tokenizer.add_tokens(["<extra>"])
    other.model.resize_token_embeddings(len(other.tokenizer))
    other.save(tmp_path / "other")
    cfg = _cfg(tmp_path, critic=ppo.CriticConfig(path=str(tmp_path / "other")))
    with pytest.raises(ValueError, match=r"critic.path .*other.*: its tokenizer is not the policy's"):
        train(cfg)
    assert not list((tmp_path / "p").glob("checkpoint-*"))
    # the policy's own checkpoint as critic.path passes the check
    policy = load_policy(ModelConfig(preset="tiny", max_seq_len=64))
    ppo.check_same_tokenizer(policy.tokenizer, other.tokenizer, None)
    ppo.check_same_tokenizer(policy.tokenizer, load_policy(ModelConfig(preset="tiny", max_seq_len=64)).tokenizer, "x")
