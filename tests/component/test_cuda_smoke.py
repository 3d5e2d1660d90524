"""CUDA smoke tests: a tiny GRPO step, a DT run and greedy parity with HF generate on the GPU.

They run wherever CUDA exists and are skipped elsewhere (the CPU tests cover the same plumbing).
Step times are printed (``pytest -s``) to set beside the CPU ones.
"""

from __future__ import annotations

import time

import pytest
import torch

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.grpo import GRPOConfig, GRPOLearner, SamplingConfig
from seqrl.algos.sft import EvalConfig
from seqrl.models import ModelConfig, load_policy
from seqrl.models.lm import model_device
from seqrl.rollout.engine import SamplingParams, generate

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

QUESTIONS = ["12+34=", "7*8=", "100-1="]


def test_greedy_on_cuda_equals_hf_generate_and_returns_cpu_tensors():
    torch.manual_seed(0)
    policy = load_policy(ModelConfig(preset="tiny", max_seq_len=96), device="cuda")
    assert model_device(policy.model).type == "cuda"
    ours = generate(policy, policy.encode_prompts(QUESTIONS), 1, SamplingParams(temperature=0, max_new_tokens=16))
    assert ours.completion_ids.device.type == "cpu" and ours.logprobs.device.type == "cpu"
    tok = policy.tokenizer
    enc = tok([policy.prompt_text(q) for q in QUESTIONS], return_tensors="pt", padding=True,
              add_special_tokens=False).to("cuda")
    out = policy.model.generate(**enc, max_new_tokens=16, do_sample=False, pad_token_id=tok.pad_token_id,
                                eos_token_id=tok.eos_token_id)
    theirs = out[:, enc["input_ids"].shape[1]:].cpu()
    for i in range(len(QUESTIONS)):
        n = int(ours.completion_mask[i].sum())
        assert ours.completion_ids[i, :n].tolist() == theirs[i, :n].tolist()
    sampled = generate(policy, policy.encode_prompts(QUESTIONS), 2, SamplingParams(max_new_tokens=8, seed=3))
    assert sampled.completion_ids.shape[0] == 6 and torch.isfinite(sampled.logprobs).all()


@pytest.mark.parametrize("bf16", [False, True])
def test_a_grpo_step_on_cuda_moves_the_weights(bf16):
    cfg = GRPOConfig(run=RunConfig(name="g", seed=1, progress=False, device="cuda", bf16=bf16),
                     model=ModelConfig(preset="tiny", max_seq_len=64), task=TaskConfig(name="arith", n_train=64, n_test=4),
                     optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant"), eval=EvalConfig(max_new_tokens=8),
                     sampling=SamplingConfig(max_new_tokens=8), steps=1, batch_size=16, group_size=4)
    torch.manual_seed(0)
    policy = load_policy(cfg.model, cfg.run.torch_device)
    task = cfg.task.build()
    trainer = GRPOLearner(cfg, policy, task, task.problems("train", 64, 0))
    before = [p.detach().clone() for p in policy.model.parameters()]
    t0 = time.perf_counter()
    batch = trainer.collect(0)
    metrics = trainer.train_step(batch)
    torch.cuda.synchronize()
    print(f"\ncuda grpo step (bf16={bf16}): {time.perf_counter() - t0:.3f} s")
    assert all(p.device.type == "cuda" for p in policy.model.parameters())
    assert any(not torch.equal(a, p) for a, p in zip(before, policy.model.parameters()))
    assert all(v == v for v in metrics.values() if isinstance(v, float))  # no NaN
    state = trainer.optimizer.state[next(iter(policy.model.parameters()))]
    assert state["exp_avg"].device.type == "cuda"


def test_a_dt_run_on_cuda(tmp_path):
    from seqrl.algos.dt import DataConfig, DTConfig, DTEvalConfig, DTModelConfig, train
    from seqrl.models.loading import load_policy_checkpoint

    cfg = DTConfig(run=RunConfig(name="d", out_dir=str(tmp_path), seed=1, log_every=1, progress=False, device="cuda"),
                   data=DataConfig(dataset="quick:medium-replay", quick_steps=400),
                   model=DTModelConfig(hidden_size=32, n_layer=1, n_head=1, context_len=4, max_ep_len=200),
                   eval=DTEvalConfig(episodes=1, target_returns=[-200.0], max_steps=20), return_scale=10.0,
                   steps=20, batch_size=16)
    t0 = time.perf_counter()
    final = train(cfg)
    print(f"\ncuda dt: {20 / (time.perf_counter() - t0):.1f} steps/s (with evaluation)")
    assert final["loss/action"] == final["loss/action"] and any(k.startswith("eval/return") for k in final)
    policy, _ = load_policy_checkpoint(tmp_path / "d" / "checkpoint-20")
    assert all(p.device.type == "cpu" for p in policy.parameters())  # checkpoints load onto the CPU
