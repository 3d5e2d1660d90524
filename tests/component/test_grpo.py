"""The GRPO loop's plumbing: config errors, reward failures, dynamic sampling, accumulation, resume."""

from __future__ import annotations

import pytest
import torch

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.grpo import DAPOConfig, GRPOConfig, GRPOLearner, LossConfig, SamplingConfig, train
from seqrl.config import ConfigError, from_dict
from seqrl.core.advantages import zero_variance_groups
from seqrl.evaluation import EvalConfig
from seqrl.models import ModelConfig, load_policy
from seqrl.rewards import RewardResult
from seqrl.rewards.combine import score_completions
from seqrl.rollout import sequence_logprobs
from seqrl.utils.checkpoint import latest_checkpoint
from seqrl.utils.metrics import read_metrics


def _cfg(tmp_path=None, **kw) -> GRPOConfig:
    base = dict(
        run=RunConfig(name="g", out_dir=str(tmp_path or "runs"), seed=1, log_every=1, progress=False),
        model=ModelConfig(preset="tiny", max_seq_len=64),
        task=TaskConfig(name="arith", n_train=64, n_test=4),
        optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant"),
        eval=EvalConfig(max_new_tokens=8),
        sampling=SamplingConfig(max_new_tokens=8),
        steps=2,
        batch_size=16,
        group_size=4,
    )
    base.update(kw)
    return GRPOConfig(**base)


def _trainer(cfg: GRPOConfig, seed: int = 0) -> GRPOLearner:
    torch.manual_seed(seed)
    policy = load_policy(cfg.model)
    task = cfg.task.build()
    return GRPOLearner(cfg, policy, task, task.problems("train", cfg.task.n_train, 0))


@pytest.mark.parametrize(
    "data,match",
    [
        ({"group_size": 1}, r"grpo: group_size must be >= 2"),
        ({"batch_size": 30, "group_size": 8}, r"batch_size \(30\) must be divisible by group_size \(8\)"),
        ({"rewards": [{"name": "vibes"}]}, r"reward name must be one of"),
        ({"loss": {"clip_eps_low": 1.5}}, r"loss.clip_eps_low"),
        ({"loss": {"agg": "mean"}}, r"grpo.loss.agg: expected one of"),
        ({"loss": {"kl_kind": "k1", "beta": 0.04}}, r"loss.kl_kind k1 with loss.beta > 0: k1's expected gradient is zero"),
        ({"run": {"save_every": 3}, "loss": {"ref_sync_every": 2}}, r"multiple of loss.ref_sync_every"),
    ],
)
def test_config_errors_name_the_setting(data, match):
    with pytest.raises(ConfigError, match=match):
        from_dict(GRPOConfig, data, path="grpo")


def test_a_reward_function_that_raises_or_returns_nan_costs_one_completion_only():
    def flaky(problems, completions):
        out = []
        for c in completions:
            if "boom" in c:
                raise RuntimeError("cannot parse")
            out.append(RewardResult(float("nan") if "nan" in c else 1.0))
        return out

    scored = score_completions({"flaky": (flaky, 2.0)}, [None] * 4, ["ok", "boom", "nan", "fine"])
    assert scored.scores["flaky"] == [1.0, 0.0, 0.0, 1.0]
    assert scored.total == [2.0, 0.0, 0.0, 2.0]
    assert scored.errors["flaky"] == 2
    assert "RuntimeError: cannot parse" in scored.reasons["flaky"][1]
    assert "non-finite" in scored.reasons["flaky"][2]


def test_a_reward_function_returning_the_wrong_count_is_an_error_naming_it():
    with pytest.raises(ValueError, match="reward function 'short' returned 1 results for 2"):
        score_completions({"short": (lambda p, c: [RewardResult(1.0)], 1.0)}, [None, None], ["a", "b"])


def test_training_goes_on_when_a_reward_function_raises():
    cfg = _cfg()
    trainer = _trainer(cfg)

    def explode_on_digits(problems, completions):
        if any(ch.isdigit() for c in completions for ch in c):
            raise ValueError("digits!")
        return [RewardResult(0.5) for _ in completions]

    trainer.reward_fns["explode"] = (explode_on_digits, 1.0)
    batch = trainer.collect(0)
    metrics = trainer.train_step(batch)
    assert batch.metrics["reward/explode/errors"] > 0
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())


def test_logprobs_of_the_trainer_match_the_sampler():
    cfg = _cfg()
    trainer = _trainer(cfg)
    batch = trainer.collect(0)
    with torch.no_grad():
        logp, _ = sequence_logprobs(trainer.policy.model, batch.prompt_ids, batch.completion_ids,
                                    trainer.policy.tokenizer.pad_token_id)
    gap = ((logp - batch.sampler_logprobs).abs() * batch.completion_mask).max()
    assert gap < 1e-4


def test_dynamic_sampling_never_keeps_a_zero_variance_group():
    # reward = first character of the completion is a digit: varies within groups of a random model
    cfg = _cfg(dapo=DAPOConfig(dynamic_sampling=True, max_sampling_rounds=6), batch_size=32, group_size=4)
    trainer = _trainer(cfg)

    def first_is_digit(problems, completions):
        return [RewardResult(1.0 if c[:1].isdigit() else 0.0) for c in completions]

    trainer.reward_fns = {"digit": (first_is_digit, 1.0)}
    batch = trainer.collect(0)
    groups = batch.rewards.view(-1, 4)
    assert not zero_variance_groups(groups).any()
    assert batch.metrics["stats/sampling_rounds"] >= 1
    assert batch.metrics["stats/zero_var_groups"] > 0  # some groups were dropped on the way


@pytest.mark.parametrize("agg", ["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"])
def test_micro_batch_size_does_not_change_the_update(agg):
    cfg = _cfg(loss=LossConfig(agg=agg, beta=0.04), batch_size=16, group_size=4)
    results = []
    for micro in (16, 3):
        cfg.micro_batch_size = micro
        trainer = _trainer(cfg, seed=0)
        trainer.policy.model.double()
        if trainer.ref is not None:
            trainer.ref.double()
        torch.manual_seed(5)
        batch = trainer.collect(0)
        batch.rewards = torch.arange(16, dtype=torch.float64) % 3  # non-trivial advantages
        batch.advantages = (batch.rewards - 1.0)
        trainer.optimizer = torch.optim.SGD(trainer.policy.model.parameters(), lr=1.0)
        trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, lambda s: 1.0)
        before = [p.detach().clone() for p in trainer.policy.model.parameters()]
        trainer.train_step(batch)
        results.append([p.detach() - b for p, b in zip(trainer.policy.model.parameters(), before)])
    for a, b in zip(*results):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)


def _record_loss_stats(monkeypatch) -> list[dict]:
    """Every `grpo_loss` call's stats, in call order (one call per micro-batch)."""
    import seqrl.algos.grpo as grpo_module

    calls, real = [], grpo_module.grpo_loss

    def recording(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        calls.append({k: float(v) for k, v in stats.items()})
        return loss, stats

    monkeypatch.setattr(grpo_module, "grpo_loss", recording)
    return calls


def _moving_batch(trainer):
    batch = trainer.collect(0)
    batch.advantages = torch.where(torch.arange(len(batch.rewards)) % 2 == 0, 1.0, -1.0)  # every row trains
    return batch


def test_recomputed_old_logprobs_make_the_first_ratio_exactly_one(monkeypatch):
    cfg = _cfg(num_iterations=2, micro_batch_size=16, optim=OptimConfig(lr=5e-2, warmup_steps=0, schedule="constant"))
    trainer = _trainer(cfg)
    batch = _moving_batch(trainer)
    calls = _record_loss_stats(monkeypatch)
    metrics = trainer.train_step(batch)
    assert len(calls) == 2  # one minibatch of one micro-batch per pass
    first, second = calls
    assert first["ratio_mean"] == 1.0 and first["clipfrac_low"] == 0.0 and first["clipfrac_high"] == 0.0
    assert abs(second["ratio_mean"] - 1.0) > 1e-3  # the second pass sees the updated policy
    assert second["clipfrac_low"] + second["clipfrac_high"] > 0
    assert metrics["stats/sampler_logprob_gap"] < 1e-4  # measured on the sampler's weights


def test_every_minibatch_after_the_first_is_clipped_against_the_sampling_policy(monkeypatch):
    """μ = 1 with 2 minibatches: minibatch 2 is trained after minibatch 1's update, so its ratio to π_old
    (the sampler) is not 1 and clipping acts — with logp.detach() as π_old it would be exactly 1."""
    cfg = _cfg(num_iterations=1, minibatches=2, micro_batch_size=8,
               optim=OptimConfig(lr=5e-2, warmup_steps=0, schedule="constant"))
    trainer = _trainer(cfg)
    batch = _moving_batch(trainer)
    calls = _record_loss_stats(monkeypatch)
    metrics = trainer.train_step(batch)
    assert len(calls) == 2
    first, second = calls
    assert first["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert abs(second["ratio_mean"] - 1.0) > 1e-3
    assert second["clipfrac_low"] + second["clipfrac_high"] > 0
    assert metrics["stats/sampler_logprob_gap"] < 1e-4  # on the sampler's weights, not after minibatch 1


def test_old_and_reference_logprobs_are_computed_in_eval_mode():
    cfg = _cfg(num_iterations=2, loss=LossConfig(beta=0.04))
    trainer = _trainer(cfg)
    batch = trainer.collect(0)
    modes = []
    hook = trainer.policy.model.register_forward_pre_hook(lambda m, a: modes.append(m.training))
    ref_hook = trainer.ref.register_forward_pre_hook(lambda m, a: modes.append(("ref", m.training)))
    trainer.policy.model.train()
    trainer._no_grad_logprobs(trainer.policy.model, batch)
    trainer._reference_logprobs(batch, torch.arange(len(batch.rewards)))
    hook.remove()
    ref_hook.remove()
    assert modes and all(m is False or m == ("ref", False) for m in modes)
    assert trainer.policy.model.training  # the mode is restored


def test_resume_equals_an_uninterrupted_run(tmp_path, monkeypatch):
    train(_cfg(tmp_path / "a", steps=4, run=RunConfig(name="g", out_dir=str(tmp_path / "a"), seed=1, save_every=2,
                                                   log_every=1, progress=False)))
    import seqrl.algos.grpo as grpo

    calls = {"n": 0}
    real = grpo.GRPOLearner.train_step

    def stop_at_third(self, batch):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(self, batch)

    monkeypatch.setattr(grpo.GRPOLearner, "train_step", stop_at_third)
    run = RunConfig(name="g", out_dir=str(tmp_path / "b"), seed=1, save_every=2, log_every=1, progress=False)
    with pytest.raises(KeyboardInterrupt):
        train(_cfg(tmp_path / "b", steps=4, run=run))
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path / "b" / "g").name == "checkpoint-2"
    run.resume = True
    train(_cfg(tmp_path / "b", steps=4, run=run))
    a = load_policy(ModelConfig(path=str(tmp_path / "a" / "g" / "checkpoint-4"))).model.state_dict()
    b = load_policy(ModelConfig(path=str(tmp_path / "b" / "g" / "checkpoint-4"))).model.state_dict()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    rewards = lambda d: [(r["step"], r.get("reward/total/mean")) for r in read_metrics(d / "g" / "metrics.jsonl")]
    assert rewards(tmp_path / "a") == rewards(tmp_path / "b")


def test_dynamic_sampling_that_finds_no_signal_goes_on_without_a_gradient():
    cfg = _cfg(dapo=DAPOConfig(dynamic_sampling=True, max_sampling_rounds=2))
    trainer = _trainer(cfg)
    trainer.reward_fns = {"constant": (lambda problems, completions: [RewardResult(0.0) for _ in completions], 1.0)}
    batch = trainer.collect(0)
    assert batch.metrics["stats/sampling_exhausted"] == 1.0 and batch.metrics["stats/sampling_rounds"] == 2
    assert torch.all(batch.advantages == 0)
    before = [p.detach().clone() for p in trainer.policy.model.parameters()]
    trainer.optimizer = torch.optim.SGD(trainer.policy.model.parameters(), lr=1.0)
    trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, lambda s: 1.0)
    trainer.train_step(batch)
    assert all(torch.equal(b, p) for b, p in zip(before, trainer.policy.model.parameters()))


def _flat_and_signal_batch(trainer: GRPOLearner):
    """A collected batch whose groups 0 and 2 are flat (advantage exactly 0) and the others are not."""
    batch = trainer.collect(0)
    g = trainer.cfg.group_size
    rewards = (torch.arange(len(batch.rewards), dtype=torch.float64) % 3).view(-1, g)
    rewards[0] = 1.0
    rewards[2] = 0.0
    batch.rewards = rewards.flatten()
    batch.advantages = (rewards - rewards.mean(dim=1, keepdim=True)).flatten()
    return batch


@pytest.mark.parametrize("agg,mu", [("seq_mean_token_mean", 1), ("token_mean", 2), ("seq_mean_token_sum_norm", 1)])
def test_skipping_zero_advantage_rows_leaves_the_update_unchanged(agg, mu):
    results, skipped = [], []
    for skip in (False, True):
        # the padded forward computes each row alone, so skipping changes no bit; the shared-prompt
        # forward sums a group's prompt gradient first (equal to float64 rounding: its own test)
        cfg = _cfg(loss=LossConfig(agg=agg, beta=0.0), batch_size=16, group_size=4, micro_batch_size=3,
                   num_iterations=mu, minibatches=2, skip_zero_advantage=skip, shared_prompt_forward="off")
        trainer = _trainer(cfg, seed=0)
        trainer.policy.model.double()
        torch.manual_seed(5)
        batch = _flat_and_signal_batch(trainer)
        flat = batch.advantages.clone()
        flat.zero_()
        metrics = trainer.train_step(batch)  # AdamW: momentum and decay carry into the next step
        skipped.append((metrics["stats/skipped_rows_frac"], float((batch.advantages == 0).double().mean())))
        batch.advantages = flat  # a batch with no signal at all: every row skippable
        trainer.train_step(batch)
        results.append([p.detach().clone() for p in trainer.policy.model.parameters()])
    (off, _), (on, zero_frac) = skipped
    assert off == 0.0 and on == zero_frac >= 0.5  # two flat groups of four, plus zero-advantage rows elsewhere
    for a, b in zip(*results):
        assert torch.allclose(a, b, atol=1e-10, rtol=0)


def test_zero_advantage_rows_are_not_skipped_when_the_kl_term_needs_them():
    cfg = _cfg(loss=LossConfig(beta=0.04))
    trainer = _trainer(cfg)
    batch = _flat_and_signal_batch(trainer)
    assert len(trainer.active_rows(batch)) == len(batch.rewards)


def _saved_base(tmp_path) -> str:
    torch.manual_seed(0)
    base = load_policy(ModelConfig(preset="tiny", max_seq_len=64))
    base.save(tmp_path / "base")
    return str(tmp_path / "base")


def test_lora_trains_only_the_adapter_and_its_base_is_the_reference(tmp_path):
    from seqrl.models.lora import LoRAConfig, apply_lora, is_lora

    path = _saved_base(tmp_path)
    cfg = _cfg(model=ModelConfig(path=path), loss=LossConfig(beta=0.04), lora=LoRAConfig(r=4, alpha=8))
    policy = load_policy(cfg.model)
    base_state = {k: v.clone() for k, v in policy.model.state_dict().items()}
    policy.model = apply_lora(policy.model, cfg.lora)
    assert is_lora(policy.model)
    task = cfg.task.build()
    trainer = GRPOLearner(cfg, policy, task, task.problems("train", 64, 0))
    assert trainer.ref is None  # no second copy of the weights
    torch.manual_seed(5)
    batch = _flat_and_signal_batch(trainer)
    rows = torch.arange(len(batch.rewards))
    start = trainer._no_grad_logprobs(policy.model, batch)
    ref0 = trainer._reference_logprobs(batch, rows)
    assert torch.equal(start * batch.completion_mask, ref0 * batch.completion_mask)  # B = 0: adapter is a no-op
    for _ in range(3):
        metrics = trainer.train_step(batch)
    assert metrics["stats/kl"] > 0  # the adapted policy moved away from its base
    after = trainer._no_grad_logprobs(policy.model, batch)
    assert ((after - start).abs() * batch.completion_mask).max() > 1e-4
    ref1 = trainer._reference_logprobs(batch, rows)
    assert torch.equal(ref1 * batch.completion_mask, ref0 * batch.completion_mask)  # the base did not move
    merged = policy.model.get_base_model().state_dict()
    for key, value in base_state.items():
        name = key.replace(".weight", ".base_layer.weight") if key.replace(".weight", ".base_layer.weight") in merged else key
        assert torch.equal(merged[name], value), key
    trainable = {n for n, p in policy.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)


def test_lora_needs_a_saved_base_and_a_fixed_reference():
    from seqrl.models.lora import LoRAConfig

    with pytest.raises(ConfigError, match="lora.r > 0 needs model.path"):
        from_dict(GRPOConfig, {"lora": {"r": 4}}, path="grpo")
    with pytest.raises(ConfigError, match="ref_sync_every must be 0 with lora"):
        from_dict(GRPOConfig, {"lora": {"r": 4}, "model": {"path": "x"}, "loss": {"ref_sync_every": 2}}, path="grpo")
    with pytest.raises(ValueError, match=r"lora.target_modules \['c_attn'\] match no module"):
        from seqrl.models.lora import apply_lora
        apply_lora(load_policy(ModelConfig(preset="tiny", max_seq_len=32)).model, LoRAConfig(r=2, target_modules=["c_attn"]))


def test_lora_checkpoints_resume_exactly_and_load_as_a_model_folder(tmp_path, monkeypatch):
    from seqrl.models.lora import LoRAConfig

    path = _saved_base(tmp_path)
    import seqrl.algos.grpo as grpo

    def first_is_digit(problems, completions):  # varies within groups of an untrained model
        return [RewardResult(1.0 if c[:1].isdigit() else 0.0) for c in completions]

    monkeypatch.setattr("seqrl.rewards.combine.build_reward", lambda spec, task: first_is_digit)

    def cfg(out, resume=False):
        run = RunConfig(name="g", out_dir=str(tmp_path / out), seed=1, save_every=2, log_every=1, progress=False,
                        resume=resume)
        return _cfg(run=run, steps=4, model=ModelConfig(path=path), lora=LoRAConfig(r=4, alpha=8),
                    optim=OptimConfig(lr=1e-2, warmup_steps=0, schedule="constant"))

    train(cfg("a"))
    real, calls = grpo.GRPOLearner.train_step, {"n": 0}

    def stop_at_third(self, batch):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(self, batch)

    monkeypatch.setattr(grpo.GRPOLearner, "train_step", stop_at_third)
    with pytest.raises(KeyboardInterrupt):
        train(cfg("b"))
    monkeypatch.setattr(grpo.GRPOLearner, "train_step", real)
    train(cfg("b", resume=True))
    import safetensors.torch

    a = safetensors.torch.load_file(tmp_path / "a" / "g" / "checkpoint-4" / "adapter_model.safetensors")
    b = safetensors.torch.load_file(tmp_path / "b" / "g" / "checkpoint-4" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(float(v.abs().max()) > 0 for k, v in a.items() if "lora_B" in k)  # the adapter learned something
    # an ordinary model folder: base + adapter through load_policy (transformers' PEFT integration)
    loaded = load_policy(ModelConfig(path=str(tmp_path / "a" / "g" / "checkpoint-4")))
    base = load_policy(ModelConfig(path=path))
    ids = torch.tensor([base.encode_prompts(["12+34="])[0]])
    with torch.no_grad():
        hf_logits = loaded.model(input_ids=ids).logits
        diff = (hf_logits - base.model(input_ids=ids).logits).abs().max()
    assert diff > 1e-5
    # ... and equal to the base + adapter restored the trainer's way (apply_lora + load_checkpoint)
    from seqrl.models.lora import apply_lora
    from seqrl.utils.checkpoint import load_checkpoint

    again = apply_lora(load_policy(ModelConfig(path=path)).model, LoRAConfig(r=4, alpha=8))
    load_checkpoint(tmp_path / "a" / "g" / "checkpoint-4", again, restore_rng=False)
    with torch.no_grad():
        assert torch.allclose(again(input_ids=ids).logits, hf_logits, atol=1e-6, rtol=0)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_reinforce_pp_whitens_over_tokens_by_default(level):
    from seqrl.core.advantages import reinforce_pp_advantages, reinforce_pp_token_advantages

    cfg = _cfg(loss=LossConfig(advantage="reinforce_pp", reinforce_pp_level=level))
    trainer = _trainer(cfg)

    def longer_is_better(problems, completions):  # rewards that vary with length, so the two forms differ
        return [RewardResult(float(len(c) % 3)) for c in completions]

    trainer.reward_fns = {"len": (longer_is_better, 1.0)}
    batch = trainer.collect(0)
    grouped, counts = batch.rewards.view(-1, 4).double(), batch.loss_mask.sum(1).view(-1, 4)
    token, seq = reinforce_pp_token_advantages(grouped, counts), reinforce_pp_advantages(grouped)
    assert not torch.allclose(token, seq, atol=1e-3)
    expected = token if level == "token" else seq
    torch.testing.assert_close(batch.advantages.double(), expected.reshape(-1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("key", ["accuracy", "reward"])
def test_dynamic_sampling_filters_on_the_chosen_key(key):
    """DAPO keeps a group when its *accuracy* varies; format shaping that varies alone does not count
    (unless filter_key=reward)."""
    from seqrl.rewards.combine import RewardSpec

    cfg = _cfg(dapo=DAPOConfig(dynamic_sampling=True, max_sampling_rounds=6, filter_key=key), batch_size=32,
               group_size=4, rewards=[RewardSpec("task", 1.0), RewardSpec("format", 0.5)])
    trainer = _trainer(cfg)

    def first_is_digit(problems, completions):
        return [RewardResult(1.0 if c[:1].isdigit() else 0.0) for c in completions]

    def length_parity(problems, completions):  # varies in nearly every group
        return [RewardResult(float(len(c) % 2)) for c in completions]

    trainer.reward_fns = {"accuracy": (first_is_digit, 1.0), "format": (length_parity, 0.5)}
    batch = trainer.collect(0)
    n = len(batch.rewards)
    # recover each kept row's accuracy from the total: total = acc + 0.5·parity, acc ∈ {0, 1}, parity ∈ {0, 1}
    acc = (batch.rewards >= 1.0).float().view(-1, 4)  # (groups, 4)
    flat_acc = zero_variance_groups(acc)
    assert n == 32
    if key == "accuracy":
        assert not flat_acc.any()
    else:
        assert flat_acc.any()  # groups kept for their format term alone


def test_accuracy_filter_needs_a_verifier_reward():
    from seqrl.rewards.combine import RewardSpec

    with pytest.raises(ValueError, match="dapo.filter_key accuracy needs a verifier reward"):
        _cfg(dapo=DAPOConfig(dynamic_sampling=True), rewards=[RewardSpec("format", 1.0)])
    _cfg(dapo=DAPOConfig(dynamic_sampling=True, filter_key="reward"), rewards=[RewardSpec("format", 1.0)])


@pytest.mark.parametrize("bf16", [False, True])
def test_run_bf16_covers_sampling_too(bf16_autocast_spy, bf16):
    """run.bf16 is autocast for every forward pass of the step, the rollout's included."""
    import seqrl.training.sampled as sampled  # the one collect path of GRPO and PPO

    seen = bf16_autocast_spy(sampled)
    trainer = _trainer(_cfg(run=RunConfig(name="g", out_dir="runs", seed=1, progress=False, device="cpu", bf16=bf16)))
    trainer.collect(0)
    assert seen and all(s == bf16 for s in seen)
