"""GRPO with tools: each sample a multi-turn episode, its tool tokens out of the loss, the policy's turns
scored, the episode metrics logged; `GRPOTrainer(tools=[...])` as TRL takes them."""

from __future__ import annotations

import importlib
import json

import pytest
import torch

from seqrl.agents import AgentTools
from seqrl.agents.rollout import Sampled
from seqrl.algos.config import AgentConfig, OptimConfig, RunConfig, TaskConfig
from seqrl.algos.grpo import GRPOConfig, GRPOLearner, GRPOTrainer, SamplingConfig
from seqrl.evaluation import EvalConfig
from seqrl.models import ModelConfig, load_policy
from seqrl.rewards import RewardResult
from seqrl.rollout import sequence_logprobs


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


CALL = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'


def call_then_answer(policy):
    """An `engine_sampler` stand-in: every episode calls ``add(1, 2)``, then answers 3 (with EOS), its
    tokens' log-probs those the model gives them after exactly the context it was handed."""
    tok = policy.tokenizer

    def sampler(policy_, params, *_):
        def sample(contexts, max_new, seed):
            out = []
            for ctx in contexts:
                text = CALL if "<tool_response>" not in tok.decode(ctx) else "<answer>3</answer>"
                ids = tok.encode(text, add_special_tokens=False) + ([tok.eos_token_id] if "answer" in text else [])
                with torch.no_grad():
                    lp, _ = sequence_logprobs(policy.model, [ctx], torch.tensor([ids]), tok.pad_token_id)
                out.append(Sampled(ids, lp[0].tolist(), "stop_string" if text == CALL else "eos"))
            return out
        return sample

    return sampler


def _cfg(tmp_path, config_cls=GRPOConfig, **kw):
    """Two steps of 8 episodes (2 prompts × 4) of the tiny preset on arith with tools (GRPO's or PPO's config)."""
    base = dict(run=RunConfig(name="agent", out_dir=str(tmp_path), seed=1, log_every=1, progress=False),
                model=ModelConfig(preset="tiny", max_seq_len=256), task=TaskConfig(name="arith", n_train=32, n_test=4),
                optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant"), eval=EvalConfig(max_new_tokens=12),
                sampling=SamplingConfig(max_new_tokens=40), steps=2, batch_size=8, group_size=4,
                agent=AgentConfig(tool_prompt="none", max_turns=3, max_episode_tokens=120))
    base.update(kw)
    return config_cls(**base)


def test_episodes_train_on_the_policys_tokens_only(tmp_path, monkeypatch):
    """A sampler that calls the tool once and then answers: the batch's mask is 0 exactly on the tool
    tokens, π_old equals the sampler's log-probs there where it is 1, and the reward reads the policy's
    turns (the answer after the call)."""
    rollout = importlib.import_module("seqrl.agents.rollout")
    cfg = _cfg(tmp_path, run=RunConfig(name="agent", out_dir=str(tmp_path), seed=1, log_every=1, progress=False,
                                       log_completions=2))
    torch.manual_seed(0)
    policy = load_policy(cfg.model)
    task = cfg.task.build()
    tok = policy.tokenizer
    monkeypatch.setattr(rollout, "engine_sampler", call_then_answer(policy))
    seen: list[str] = []

    def capture(problems, completions):  # a reward function: what text does it read?
        seen.extend(completions)
        return [RewardResult(float(i % 2)) for i in range(len(completions))]

    learner = GRPOLearner(cfg, policy, task, task.problems("train", 32, 0), {"capture": (capture, 1.0)},
                          agent=AgentTools([add]))
    batch = learner.collect(0)
    tool = tok.encode("\n<tool_response>3</tool_response>\n", add_special_tokens=False)
    for row, mask in zip(batch.completion_ids, batch.completion_mask):
        ids = row.tolist()
        assert mask.tolist()[len(tok.encode(CALL, add_special_tokens=False)):][: len(tool)] == [0.0] * len(tool)
        assert ids[len(tok.encode(CALL, add_special_tokens=False)):][: len(tool)] == tool
        assert 0 < mask.sum() < len([t for t in ids if t != tok.pad_token_id])
    assert batch.metrics["agent/calls/add"] == 1.0 and batch.metrics["agent/end/answer"] == 1.0
    logged = learner.samples[0]  # run.log_completions: the whole episode, its messages as JSON text
    messages = json.loads(logged["messages"])
    assert [m["role"] for m in messages] == ["assistant", "tool", "assistant"] and logged["end"] == "answer"
    assert messages[1]["content"] == "3"
    with torch.no_grad():  # π_old over the whole episode = the sampler's log-probs at the policy's tokens
        logp, _ = learner.token_logprobs(policy.model, batch.prompt_ids, batch.completion_ids, batch.completion_mask)
    assert float(((logp - batch.sampler_logprobs).abs() * batch.completion_mask).max()) < 1e-4
    metrics = learner.train_step(batch)
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert seen and set(seen) == {CALL + "\n<answer>3</answer>"}  # the policy's turns, not the tool's result


def test_grpo_trainer_takes_tools_as_trl_does(tmp_path):
    cfg = _cfg(tmp_path, eval=EvalConfig(max_new_tokens=40, samples=2, temperature=1.0))  # as sampled: the pass@1 path
    trainer = GRPOTrainer(model="tiny", args=cfg, tools=[add])
    final = trainer.train()
    for key in ("agent/turns", "agent/tool_calls", "agent/policy_tokens", "agent/end/answer", "eval/agent/turns",
                "eval/reward"):
        assert key in final, sorted(final)
    with pytest.raises(TypeError, match=r"tools=\.\.\.\): a list of functions"):
        GRPOTrainer(model="tiny", args=cfg, tools="add")
    from seqrl.algos.ppo import PPOConfig, PPOTrainer
    with pytest.raises(ValueError, match=r"a prompt of \d+ tokens \(the tools told in it: agent.tool_prompt\) leaves no room"):
        PPOTrainer(model="tiny", args=PPOConfig(run=RunConfig(name="p", out_dir=str(tmp_path))), tools=[add]).train()


def test_agent_tools_in_the_config_are_import_paths():
    with pytest.raises(ValueError, match=r"agent.tools: each an import path"):
        AgentConfig(tools=["add"])
    with pytest.raises(ValueError, match=r"agent.max_turns must be >= 1"):
        AgentConfig(max_turns=0)
