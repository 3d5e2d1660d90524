"""PPO on multi-turn episodes: the critic's values, GAE and the losses read the policy's tokens only — a
tool turn between two policy turns is no step (GAE goes from the last token before it to the first after
it) — and `PPOTrainer(tools=..., environment_factory=...)` as TRL's shape."""

from __future__ import annotations

import importlib

import pytest
import torch

from seqrl.agents import AgentTools
from seqrl.agents.envs.guess import GuessEnv
from seqrl.algos.config import AgentConfig, RunConfig
from seqrl.algos.ppo import PPOConfig, PPOLearner, PPOTrainer, compute_advantages
from seqrl.algos.ppo_config import CriticConfig
from seqrl.models import load_policy
from seqrl.rewards import RewardResult
from tests.component.test_agent_grpo import _cfg as grpo_cfg
from tests.component.test_agent_grpo import add, call_then_answer


@pytest.mark.parametrize("mode", ["gae", "gae_then_group", "group"])
def test_a_tool_turn_between_two_policy_turns_is_no_step(mode):
    """Advantages and returns of an episode with a hole in its mask equal those of the same tokens packed
    together (the hole removed), and are 0 in the hole; γ < 1, so a counted hole would change them."""
    torch.manual_seed(0)
    holed = torch.tensor([[1, 1, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]] * 2, dtype=torch.float32)
    packed = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0, 0]] * 2, dtype=torch.float32)
    r_packed, v_packed = torch.randn(4, 7) * packed, torch.randn(4, 7) * packed
    where = [[0, 1, 4, 5, 6], [0, 1, 2, 3, 4]] * 2  # the policy tokens' positions in the holed episode
    r_holed, v_holed = torch.zeros(4, 7), torch.randn(4, 7)  # values in the hole: whatever the critic says
    for i, pos in enumerate(where):
        r_holed[i, pos], v_holed[i, pos] = r_packed[i, :5], v_packed[i, :5]
    a_p, ret_p = compute_advantages(r_packed, v_packed, packed, mode, 0.9, 0.8, 2, False)
    a_h, ret_h = compute_advantages(r_holed, v_holed, holed, mode, 0.9, 0.8, 2, False)
    for i, pos in enumerate(where):
        assert torch.allclose(a_h[i, pos], a_p[i, :5], atol=1e-6) and torch.allclose(ret_h[i, pos], ret_p[i, :5], atol=1e-6)
    assert (a_h[holed == 0] == 0).all() and (ret_h[holed == 0] == 0).all()


def _cfg(tmp_path, **kw) -> PPOConfig:
    return grpo_cfg(tmp_path, PPOConfig, **kw)


def test_ppo_learns_from_the_policys_tokens_of_an_episode(tmp_path, monkeypatch):
    rollout = importlib.import_module("seqrl.agents.rollout")
    cfg = _cfg(tmp_path, critic=CriticConfig(shared_backbone=True))  # the value head on the policy's backbone
    torch.manual_seed(0)
    policy = load_policy(cfg.model)
    monkeypatch.setattr(rollout, "engine_sampler", call_then_answer(policy))
    task = cfg.task.build()
    from seqrl.models.heads import ValueHead

    critic = ValueHead(policy.model.config.hidden_size)
    learner = PPOLearner(cfg, policy, critic, task, task.problems("train", 32, 0),
                         {"half": (lambda p, c: [RewardResult(float(i % 2)) for i in range(len(c))], 1.0)},
                         AgentTools([add]))
    batch = learner.collect(0)
    hole = batch.mask == 0
    inside = hole & (torch.arange(batch.mask.shape[1])[None] < batch.mask.nonzero()[:, 1].max())
    assert inside.any()  # tool tokens between the two policy turns
    assert (batch.advantages[hole] == 0).all() and (batch.returns[hole] == 0).all()
    assert batch.metrics["agent/calls/add"] == 1.0
    metrics = learner.train_step(batch)
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values() if isinstance(v, float))


def test_ppo_trainer_takes_tools_and_environments_as_trl_does(tmp_path):
    final = PPOTrainer(model="tiny", args=_cfg(tmp_path), tools=[add]).train()
    assert "agent/turns" in final and "eval/agent/turns" in final and "loss/value" in final
    rows = [{"prompt": "Play.", "seed": i} for i in range(12)]
    cfg = _cfg(tmp_path, run=RunConfig(name="env_ppo", out_dir=str(tmp_path), seed=1, log_every=1, progress=False),
               agent=AgentConfig(tool_prompt="compact", max_turns=2, max_episode_tokens=120))
    trainer = PPOTrainer(model="tiny", args=cfg, train_dataset=rows[:8], eval_dataset=rows[8:],
                         environment_factory=GuessEnv)
    assert trainer.args.rewards == []
    assert "reward/GuessEnv/mean" in trainer.train()
