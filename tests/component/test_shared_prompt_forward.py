"""The shared-prompt training forward computes what the padded forward computes: log-probs, the GRPO
loss and every parameter's gradient, in float64, for every loss aggregation and GSPO's sequence ratio,
with zero-advantage rows skipped and prompts of different lengths in one batch."""

from __future__ import annotations

import types

import pytest
import torch

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.grpo import GRPOBatch, GRPOConfig, GRPOLearner, LossConfig, SamplingConfig
from seqrl.core.policy_loss import AGG_MODES
from seqrl.models import ModelConfig, load_policy
from seqrl.rollout.logprobs import (
    pack_micro_batches,
    sequence_logprobs,
    shared_prompt_logprobs,
    shared_prompt_unsupported,
    use_shared_prompt_forward,
)

G = 4
PROMPT_LENGTHS = (3, 6, 9)  # three prompts of different lengths, G completions each
T = 7


def _float64_norms(model: torch.nn.Module) -> None:
    """HF's RMSNorm computes in float32 even in a float64 model, which rounds the backward to float32
    (the padded forward differs from itself by ≈ 1e-6 on the embedding gradient when a row is padded
    further); here it computes in the model's dtype, so the comparison is a float64 one."""
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            def forward(self, x):
                return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))
            module.forward = types.MethodType(forward, module)


def _model(arch: str = "llama"):
    torch.manual_seed(0)
    policy = load_policy(ModelConfig(preset="tiny", max_seq_len=64, arch=arch))
    policy.model.double()
    _float64_norms(policy.model)
    return policy


def _rows(vocab: int, pad: int, seed: int = 1):
    """prompt_ids (N lists), completion_ids (N, T) padded with `pad` after each end, completion_mask (N, T)."""
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in PROMPT_LENGTHS]
    prompt_ids = [p for p in prompts for _ in range(G)]
    n = len(prompt_ids)
    lengths = torch.tensor([7, 2, 5, 1, 3, 3, 6, 4, 1, 2, 5, 2])  # varied; the longest fills T
    mask = (torch.arange(T)[None, :] < lengths[:, None]).double()  # (N, T)
    ids = torch.where(mask.bool(), torch.randint(3, vocab, (n, T), generator=gen), torch.full((n, T), pad))
    return prompt_ids, ids, mask


def _params(model):
    return [p for p in model.parameters() if p.requires_grad]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_log_probs_entropy_and_gradients_equal_the_padded_forward(arch):
    policy = _model(arch)
    model, pad = policy.model, policy.tokenizer.pad_token_id
    assert shared_prompt_unsupported(model) is None
    prompt_ids, ids, mask = _rows(model.config.vocab_size, pad)
    weights = torch.randn(ids.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    results = []
    for fn in (lambda: sequence_logprobs(model, prompt_ids, ids, pad, 0.7, with_entropy=True),
               lambda: shared_prompt_logprobs(model, prompt_ids, ids, mask, pad, 0.7, with_entropy=True)):
        model.zero_grad(set_to_none=True)
        logp, entropy = fn()
        (logp * weights * mask).sum().backward()
        results.append((logp.detach() * mask, entropy * mask, [p.grad.clone() for p in _params(model)]))
    (lp_a, ent_a, grads_a), (lp_b, ent_b, grads_b) = results
    assert torch.allclose(lp_a, lp_b, atol=1e-10, rtol=0)
    assert torch.allclose(ent_a, ent_b, atol=1e-10, rtol=0)
    assert all(g.abs().sum() > 0 for g in grads_a[:3])  # the gradient reaches the embeddings and first layer
    for a, b in zip(grads_a, grads_b):
        assert torch.allclose(a, b, atol=1e-10, rtol=0)


def test_rows_may_be_any_subset_of_a_group_in_any_order():
    policy = _model()
    model, pad = policy.model, policy.tokenizer.pad_token_id
    prompt_ids, ids, mask = _rows(model.config.vocab_size, pad)
    rows = torch.tensor([9, 1, 5, 2, 11, 4])  # three prompts, their rows interleaved
    sub_prompts = [prompt_ids[i] for i in rows.tolist()]
    with torch.no_grad():
        a, _ = sequence_logprobs(model, sub_prompts, ids[rows], pad)
        b, _ = shared_prompt_logprobs(model, sub_prompts, ids[rows], mask[rows], pad)
    assert torch.allclose(a * mask[rows], b * mask[rows], atol=1e-10, rtol=0)
    assert (b[:, 5:] == 0).all()  # no row of this subset reaches columns 5, 6: they are not computed


def test_a_micro_batch_with_a_one_token_prompt_falls_back_to_the_padded_forward():
    policy = _model()
    model, pad = policy.model, policy.tokenizer.pad_token_id
    ids = torch.tensor([[5, 6, 7], [8, 9, pad]])
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    with torch.no_grad():
        a, _ = sequence_logprobs(model, [[4], [4, 5, 6]], ids, pad)
        b, _ = shared_prompt_logprobs(model, [[4], [4, 5, 6]], ids, mask, pad)
    assert torch.equal(a, b)


def test_packing_keeps_groups_together_longest_first_and_every_row_once():
    prompt_ids = [[1, 2]] * 3 + [[3, 4, 5]] * 3 + [[6, 7]] * 3
    mask = torch.zeros(9, 6)
    for row, n in enumerate([2, 1, 2, 6, 3, 1, 4, 4, 0]):
        mask[row, :n] = 1
    rows = torch.tensor([0, 2, 3, 4, 5, 6, 7, 8])  # row 1 skipped (zero advantage)
    parts = pack_micro_batches(rows, prompt_ids, mask, 3)
    assert [p.tolist() for p in parts] == [[3, 4, 5], [6, 7, 8], [0, 2]]
    assert pack_micro_batches(torch.tensor([], dtype=torch.long), prompt_ids, mask, 3) == []


class _NotHF(torch.nn.Module):
    def forward(self, input_ids):  # pragma: no cover - never called
        return input_ids


def test_sliding_window_and_non_attention_layers_are_refused_by_name():
    model = _model("qwen2").model
    model.config.use_sliding_window, model.config.sliding_window = True, 16
    assert "sliding-window" in shared_prompt_unsupported(model)
    model.config.use_sliding_window, model.config.sliding_window = False, None
    model.config.layer_types = ["full_attention", "linear_attention"] * 2
    assert "linear_attention" in shared_prompt_unsupported(model)


def test_auto_falls_back_with_a_note_and_on_refuses_a_model_it_cannot_share(capsys):
    assert shared_prompt_unsupported(_NotHF()) is not None
    assert use_shared_prompt_forward("auto", _NotHF()) is False
    assert "padded forward" in capsys.readouterr().err
    with pytest.raises(ValueError, match="shared_prompt_forward = 'on'.*not a Hugging Face model"):
        use_shared_prompt_forward("on", _NotHF())
    assert use_shared_prompt_forward("off", _model().model) is False
    assert use_shared_prompt_forward("auto", _model().model) is True


def _trainer_step(setting: str, loss: LossConfig, advantages: torch.Tensor, **kw):
    """One `train_step` on a fixed batch in float64; returns (trainer, metrics, [grads per optimizer step])."""
    cfg = GRPOConfig(
        run=RunConfig(name="s", seed=1, progress=False),
        model=ModelConfig(preset="tiny", max_seq_len=64),
        task=TaskConfig(name="arith", n_train=8, n_test=2),
        optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant", grad_clip=0.0),
        sampling=SamplingConfig(max_new_tokens=T, temperature=0.9),
        loss=loss, batch_size=len(PROMPT_LENGTHS) * G, group_size=G, micro_batch_size=3,
        shared_prompt_forward=setting, **kw)
    policy = _model()
    task = cfg.task.build()
    trainer = GRPOLearner(cfg, policy, task, task.problems("train", 8, 0))
    if trainer.ref is not None:  # a deep copy: its norms are float64 already
        trainer.ref.double()
    prompt_ids, ids, mask = _rows(policy.model.config.vocab_size, policy.tokenizer.pad_token_id)
    batch = GRPOBatch(prompt_ids=prompt_ids, completion_ids=ids, completion_mask=mask, loss_mask=mask.clone(),
                      sampler_logprobs=torch.zeros_like(mask), rewards=advantages.clone(), advantages=advantages)
    grads: list[list[torch.Tensor]] = []
    trainer.optimizer.register_step_pre_hook(
        lambda *_: grads.append([p.grad.clone() for p in _params(policy.model)]))
    metrics = trainer.train_step(batch)
    return trainer, metrics, grads


# the middle prompt's group has equal rewards (all advantages 0, skipped), and one row of the last group is 0
ADVANTAGES = torch.tensor([1.0, -0.5, 0.25, -0.75, 0, 0, 0, 0, 0.5, 0.0, -1.0, 0.75], dtype=torch.float64)


@pytest.mark.parametrize("loss", [LossConfig(agg=a) for a in AGG_MODES]
                         + [LossConfig(ratio_level="sequence", agg="seq_mean_token_mean"),  # GSPO
                            LossConfig(scale_rewards="none", agg="seq_mean_token_sum_norm", max_tokens=5)],  # Dr. GRPO
                         ids=[*AGG_MODES, "gspo", "dr_grpo"])
def test_grpo_loss_and_every_gradient_equal_the_padded_forwards(loss):
    runs = [_trainer_step(s, loss, ADVANTAGES) for s in ("off", "on")]
    (off, m_off, g_off), (on, m_on, g_on) = runs
    assert not off.shared_forward and on.shared_forward
    assert m_on["stats/skipped_rows_frac"] == m_off["stats/skipped_rows_frac"] == pytest.approx(5 / 12)
    assert abs(m_off["loss/policy"]) > 1e-3
    assert m_on["loss/policy"] == pytest.approx(m_off["loss/policy"], abs=1e-6, rel=0)
    for key in ("stats/entropy", "stats/sampler_logprob_gap", "stats/ratio_mean"):
        assert m_on[key] == pytest.approx(m_off[key], abs=1e-6, rel=0)
    assert len(g_off) == len(g_on) == 1
    for a, b in zip(g_off[0], g_on[0]):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)
    assert sum(float(g.abs().sum()) for g in g_off[0]) > 0


def test_several_updates_a_step_and_a_kl_penalty_give_the_same_gradients():
    """π_old (μ = 2, two minibatches) and π_ref (β > 0, every row trained) through the shared forward too."""
    loss = LossConfig(beta=0.04, agg="token_mean")
    runs = [_trainer_step(s, loss, ADVANTAGES, num_iterations=2, minibatches=2) for s in ("off", "on")]
    (_, m_off, g_off), (_, m_on, g_on) = runs
    assert m_on["stats/skipped_rows_frac"] == 0.0
    assert m_on["loss/policy"] == pytest.approx(m_off["loss/policy"], abs=1e-6, rel=0)
    assert m_on["stats/kl"] == pytest.approx(m_off["stats/kl"], abs=1e-6, rel=0)
    assert len(g_off) == len(g_on) == 4
    for step_a, step_b in zip(g_off, g_on):
        for a, b in zip(step_a, step_b):
            assert torch.allclose(a, b, atol=1e-6, rtol=0)


def test_skipping_zero_advantage_rows_changes_no_gradient_of_the_shared_forward():
    """Skipping regroups the micro-batches (a group's prompt gradient is summed in another order): the
    gradients stay equal to float64 rounding."""
    loss = LossConfig(agg="seq_mean_token_mean")
    runs = [_trainer_step("on", loss, ADVANTAGES, skip_zero_advantage=skip) for skip in (False, True)]
    (_, m_all, g_all), (_, m_skip, g_skip) = runs
    assert m_all["stats/skipped_rows_frac"] == 0.0 and m_skip["stats/skipped_rows_frac"] > 0.4
    assert m_skip["loss/policy"] == pytest.approx(m_all["loss/policy"], abs=1e-12, rel=0)
    for a, b in zip(g_all[0], g_skip[0]):
        assert torch.allclose(a, b, atol=1e-12, rtol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_gradients_equal_the_padded_forwards():
    policy = _model()
    model, pad = policy.model.cuda(), policy.tokenizer.pad_token_id
    prompt_ids, ids, mask = _rows(model.config.vocab_size, pad)
    grads = []
    for fn in (lambda: sequence_logprobs(model, prompt_ids, ids, pad),
               lambda: shared_prompt_logprobs(model, prompt_ids, ids, mask, pad)):
        model.zero_grad(set_to_none=True)
        logp, _ = fn()
        assert logp.device.type == "cpu"  # returned where the completions are
        (logp * mask).sum().backward()
        grads.append([p.grad.clone() for p in _params(model)])
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-9, rtol=0)


def _ppo_trainer(setting: str, **kw):
    from seqrl.algos.ppo import PPOConfig, PPOLossConfig, PPOLearner
    from seqrl.algos.ppo import SamplingConfig as PPOSampling
    from seqrl.models.heads import load_scalar_model
    from seqrl.rewards import RewardResult

    cfg = PPOConfig(
        run=RunConfig(name="p", seed=1, progress=False), model=ModelConfig(preset="tiny", max_seq_len=64),
        task=TaskConfig(name="arith", n_train=16, n_test=2),
        optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant", grad_clip=0.0),
        sampling=PPOSampling(max_new_tokens=T), loss=PPOLossConfig(beta=0.05, entropy_coef=0.0),
        batch_size=len(PROMPT_LENGTHS) * G, group_size=G, micro_batch_size=5, num_iterations=2, minibatches=2,
        shared_prompt_forward=setting, **kw)
    policy = _model()
    torch.manual_seed(1)
    critic, _ = load_scalar_model(cfg.model)
    critic.double()
    _float64_norms(critic)
    task = cfg.task.build()
    lengths = lambda problems, completions: [RewardResult(len(c) / 8.0) for c in completions]  # noqa: E731
    trainer = PPOLearner(cfg, policy, critic, task, task.problems("train", 16, 0), {"accuracy": (lengths, 1.0)})
    return trainer


def test_ppo_targets_loss_and_policy_gradients_equal_the_padded_forwards():
    """PPO's π_old / π_ref (collect) and its policy forward (entropy_coef = 0) use the shared forward too."""
    trainers = [_ppo_trainer(s) for s in ("off", "on")]
    assert [t.shared_forward for t in trainers] == [False, True]
    batches = [t.collect(0) for t in trainers]  # the same seed samples the same completions
    a, b = batches
    assert torch.equal(a.completion_ids, b.completion_ids)
    for key in ("old_logp", "ref_logp", "values", "advantages", "returns"):
        assert torch.allclose(getattr(a, key) * a.mask, getattr(b, key) * a.mask, atol=1e-9, rtol=0), key
    # prompts of different lengths for the update (the task's are all 8 tokens)
    a.prompt_ids = _rows(trainers[0].policy.model.config.vocab_size, 0)[0]
    results = []
    for trainer in trainers:
        grads = []
        trainer.optimizer.register_step_pre_hook(
            lambda *_, t=trainer, g=grads: g.append([p.grad.clone() for p in _params(t.policy.model)]))
        results.append((trainer.train_step(a), grads))
    (m_off, g_off), (m_on, g_on) = results
    assert abs(m_off["loss/policy"]) > 1e-4
    for key in ("loss/policy", "loss/value", "stats/entropy", "stats/ratio_mean"):
        assert m_on[key] == pytest.approx(m_off[key], abs=1e-6, rel=0), key
    assert len(g_off) == len(g_on) == 4
    for step_a, step_b in zip(g_off, g_on):
        for x, y in zip(step_a, step_b):
            assert torch.allclose(x, y, atol=1e-6, rtol=0)


def test_a_lora_model_shares_prompts_with_the_same_adapter_gradients():
    from seqrl.models.lora import LoRAConfig, apply_lora

    policy = _model()
    pad = policy.tokenizer.pad_token_id
    model = apply_lora(policy.model, LoRAConfig(r=4, alpha=8))
    for name, p in model.named_parameters():
        if "lora_B" in name:  # B = 0 at the start: give the adapter an effect
            torch.nn.init.normal_(p, std=0.1)
    assert shared_prompt_unsupported(model) is None
    prompt_ids, ids, mask = _rows(policy.model.config.vocab_size, pad)
    grads = []
    for fn in (lambda: sequence_logprobs(model, prompt_ids, ids, pad),
               lambda: shared_prompt_logprobs(model, prompt_ids, ids, mask, pad)):
        model.zero_grad(set_to_none=True)
        logp, _ = fn()
        (logp * mask).sum().backward()
        grads.append([p.grad.clone() for p in _params(model)])
    assert len(grads[0]) == 4 * 4 * 2  # A and B of q, k, v, o in 4 layers: only the adapter trains
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-9, rtol=0)


def test_a_run_saved_before_the_setting_existed_resumes(tmp_path):
    """`shared_prompt_forward` computes the same log-probs, so a resumed run may set or change it."""
    import yaml

    from seqrl.training.run import check_resume_changes
    from seqrl.config import dump_yaml

    cfg = GRPOConfig(run=RunConfig(name="r", out_dir=str(tmp_path)))
    dump_yaml(cfg, tmp_path / "config.yaml")
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved.pop("shared_prompt_forward") == "auto"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    cfg.shared_prompt_forward = "off"
    assert check_resume_changes(tmp_path / "config.yaml", cfg) == ["shared_prompt_forward: None -> 'off'"]
