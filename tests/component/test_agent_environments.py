"""Episodes in environments: each episode's own instance, reset on its row (the text in its prompt), its
tools, ended when it is done, scored by its ``get_reward``; `GRPOTrainer(environment_factory=...)` as TRL
takes it, with no reward function besides the environment's."""

from __future__ import annotations

import json
import re

import pytest
import torch

from seqrl.agents import AgentTools
from seqrl.agents.envs.guess import GuessEnv
from seqrl.agents.rollout import Sampled, encode_prompts, multi_turn_rollout
from seqrl.algos.config import AgentConfig, OptimConfig, RunConfig
from seqrl.algos.grpo import GRPOConfig, GRPOTrainer, SamplingConfig
from seqrl.evaluation import EvalConfig
from seqrl.models.lm import ModelConfig, load_policy
from seqrl.rollout import SamplingParams, sequence_logprobs
from seqrl.types import Problem


def bisecting(policy, syntax="hermes"):
    """A sampler that plays the guessing game by bisection from the results in its context, with the
    log-probs the model gives its tokens there."""
    tok = policy.tokenizer

    def sample(contexts, max_new, seed):
        out = []
        for ctx in contexts:
            lo, hi = 1, 100
            for word, n in re.findall(r"(Higher|Lower) than (\d+)", tok.decode(ctx)):
                lo, hi = (max(lo, int(n) + 1), hi) if word == "Higher" else (lo, min(hi, int(n) - 1))
            text = (f'<tool_call>{{"name": "guess", "arguments": {{"number": {(lo + hi) // 2}}}}}</tool_call>'
                    if syntax == "hermes" else f"[[guess {(lo + hi) // 2}]]")
            ids = tok.encode(text, add_special_tokens=False)
            with torch.no_grad():
                lp, _ = sequence_logprobs(policy.model, [ctx], torch.tensor([ids]), tok.pad_token_id)
            out.append(Sampled(ids, lp[0].tolist(), "stop_string"))
        return out

    return sample


@pytest.mark.parametrize("syntax", ["hermes", "compact"])
def test_each_episode_plays_in_its_own_environment_until_it_is_done(syntax):
    torch.manual_seed(0)
    policy = load_policy(ModelConfig(preset="tiny", max_seq_len=1024))
    agent = AgentTools(environments=GuessEnv, syntax=syntax)
    problems = [Problem("Play.", "", metadata={"seed": s}, uid=f"s{s}") for s in (3, 4)]
    boxes, envs, added = agent.prepare(problems, n=2)
    prompts = encode_prompts(policy, problems, boxes[::2], "none", added)
    assert "thinking of a whole number" in policy.tokenizer.decode(prompts[0])  # reset's text joins the prompt
    episodes = multi_turn_rollout(policy, prompts, boxes, SamplingParams(max_new_tokens=64), n=2, max_turns=10,
                                  max_tool_calls=10, max_episode_tokens=900, sampler=bisecting(policy, syntax), envs=envs)
    assert [e.end for e in episodes] == ["done"] * 4
    assert envs[0] is not envs[1] and envs[0].target == envs[1].target != envs[2].target
    for e, env in zip(episodes, envs):
        assert env.found and e.calls["guess"] == env.guesses == e.turns <= 7
        assert e.messages[-1]["content"].startswith("Correct")
        assert 0 < sum(e.mask) < len(e.mask)
    if syntax == "compact":  # a few tokens a turn: the whole game fits a tiny preset's context
        assert "\n=> Higher than" in policy.tokenizer.decode(episodes[0].ids) or "\n=> Lower than" in \
            policy.tokenizer.decode(episodes[0].ids)
        assert max(len(e.ids) for e in episodes) <= 7 * 30  # up to 7 turns of ≈ 30 tokens (hermes: ≈ 117)


def test_grpo_trainer_takes_an_environment_factory_as_trl_does(tmp_path):
    cfg = GRPOConfig(run=RunConfig(name="env", out_dir=str(tmp_path), seed=1, log_every=1, progress=False,
                                   log_completions=1),
                     model=ModelConfig(preset="tiny", max_seq_len=512),
                     optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant"), eval=EvalConfig(max_new_tokens=16),
                     sampling=SamplingConfig(max_new_tokens=24), steps=2, batch_size=4, group_size=2,
                     agent=AgentConfig(tool_prompt="compact", max_turns=2, max_episode_tokens=160))
    rows = [{"prompt": "Play the game.", "seed": i} for i in range(12)]
    trainer = GRPOTrainer(model="tiny", args=cfg, train_dataset=rows[:8], eval_dataset=rows[8:],
                          environment_factory=GuessEnv)
    assert trainer.args.rewards == []  # the environment's reward replaces the config's default verifier
    final = trainer.train()
    for key in ("reward/GuessEnv/mean", "agent/turns", "eval/env_reward", "eval/accuracy"):
        assert key in final, sorted(final)
    assert "reward/accuracy/mean" not in final
    logged = [json.loads(line) for line in (tmp_path / "env" / "completions.jsonl").read_text().splitlines()]
    assert logged and json.loads(logged[-1]["messages"])[0]["role"] == "assistant"  # whole episodes, as JSON text


def test_the_python_environment_runs_the_models_code_in_the_sandbox():
    from seqrl.agents.envs import environment_class
    from seqrl.agents.tools import ToolCall

    agent = AgentTools(environments=environment_class("python"), timeout_s=30)
    boxes, envs, added = agent.prepare([Problem("2+2=?", "4", uid="p")], n=2)
    assert added == [None] and list(boxes[0].tools) == ["python"] and not agent.rewards()
    assert boxes[0].call(ToolCall("python", {"code": "print(6 * 7)"})).content == "42"
    assert envs[0].calls == 1 and envs[1].calls == 0


def test_an_experts_demonstrations_train_on_the_policys_tokens_only():
    """The bisection expert, run through the rollout as its sampler, solves every game in at most 7
    guesses without noise (and not always with it); its episodes become fine-tuning examples whose tool
    tokens carry no label."""
    from seqrl.agents.demos import episode_examples, expert_sampler
    from seqrl.agents.envs.guess import bisection_expert
    from seqrl.core.losses import IGNORE_INDEX
    from seqrl.training.finetune import collate

    torch.manual_seed(0)
    policy = load_policy(ModelConfig(preset="tiny", max_seq_len=512))
    problems = [Problem("Play.", "", metadata={"seed": f"t{i}"}, uid=f"t{i}") for i in range(24)]
    found = {}
    for noise in (0.0, 0.6):
        agent = AgentTools(environments=GuessEnv, syntax="compact")
        boxes, envs, added = agent.prepare(problems, 1)
        prompts = encode_prompts(policy, problems, boxes, "none", added)
        episodes = multi_turn_rollout(policy, prompts, boxes, SamplingParams(max_new_tokens=24), max_turns=8,
                                      max_tool_calls=8, max_episode_tokens=320, envs=envs,
                                      sampler=expert_sampler(policy, bisection_expert(noise, seed=1), "]]"))
        found[noise] = [env.found for env in envs]
        if noise == 0.0:
            assert all(found[0.0]) and max(env.guesses for env in envs) <= 7
            examples = episode_examples(episodes)
            batch = collate(examples, policy.tokenizer.pad_token_id)
            for row, (p, ids, mask) in enumerate(examples):
                labels = batch["labels"][row, len(p): len(p) + len(ids)].tolist()
                assert labels == [t if m else IGNORE_INDEX for t, m in zip(ids, mask)] and 0 in mask
    assert not all(found[0.6])  # noisy demonstrations miss some games
