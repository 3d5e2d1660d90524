#!/usr/bin/env python
"""Where a trained PPO critic knows the outcome: explained variance of its values by token position.

    python benchmarks/critic_ev_by_token.py --run runs/ppo_arith_tiny [--step 60] [--problems 200 --samples 4]

Loads a PPO run's policy and critic checkpoints, samples held-out problems of the run's task with the
policy (T = the run's sampling temperature), scores each completion with the task's verifier, reads the
critic's value at every completion token (as PPO does) and reports 1 − Var(R − V)/Var(R) against the
verified outcome R (the return at γ = λ = 1 without the KL term): over all tokens, at the first token
(the prompt alone), at the last token (the whole answer seen), and by tenth of the completion. A critic
that learned only the mean scores ≈ 0 everywhere; one that checks answers rises towards the end.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import machine_info  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a seqrl train ppo run folder")
    ap.add_argument("--step", type=int, help="checkpoint step (default: the newest)")
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from seqrl.algos.ppo import PPOConfig
    from seqrl.config import load_config
    from seqrl.core.ppo import explained_variance
    from seqrl.data import get_task
    from transformers import AutoModelForSequenceClassification

    from seqrl.models.heads import completion_values
    from seqrl.models.lm import ModelConfig, load_policy
    from seqrl.rewards.combine import RewardSpec, build_reward, score_completions
    from seqrl.rollout import SamplingParams, generate
    from seqrl.utils import hf

    torch.set_num_threads(1)
    run = Path(args.run)
    cfg = load_config(PPOConfig, run / "config.yaml")
    step = args.step or max(int(p.name.split("-")[1]) for p in run.glob("checkpoint-*") if p.name.split("-")[1].isdigit())
    policy = load_policy(ModelConfig(path=str(run / f"checkpoint-{step}")))
    policy.prompt = cfg.prompt
    critic = hf.from_pretrained(AutoModelForSequenceClassification, run / "critic" / f"checkpoint-{step}",
                                dtype=torch.float32)  # saved without a tokenizer: the policy's is used
    policy.model.eval()
    critic.eval()
    task = get_task(cfg.task.name, **cfg.task.kwargs)
    problems = task.problems("test", args.problems, cfg.task.seed)
    with torch.no_grad():
        ro = generate(policy, policy.encode_prompts(problems), args.samples,
                      SamplingParams(temperature=cfg.sampling.temperature, max_new_tokens=cfg.sampling.max_new_tokens,
                                     seed=args.seed))
        rows = [problems[i // args.samples] for i in range(len(ro.texts))]
        scored = score_completions({"v": (build_reward(RewardSpec("task"), task), 1.0)}, rows, ro.texts)
        reward = torch.tensor(scored.total, dtype=torch.float32)  # (N,)
        prompt_ids = [ro.prompt_ids[i // args.samples] for i in range(len(ro.texts))]
        ids, mask = ro.completion_ids.cpu(), ro.completion_mask.float().cpu()  # (N, T)
        values = torch.cat([completion_values(critic, prompt_ids[i:i + 64], ids[i:i + 64],
                                              policy.tokenizer.pad_token_id).float()
                            for i in range(0, len(prompt_ids), 64)])  # (N, T)
    returns = reward[:, None].expand_as(values) * mask  # (N, T)
    lengths = mask.sum(1).long()  # (N,)
    t = torch.arange(ids.shape[1])[None, :]

    def ev(sel: torch.Tensor) -> float:
        return round(float(explained_variance(values, returns, sel.float() * mask)), 3)

    tenths = [ev((t * 10 // lengths.clamp(min=1)[:, None]) == k) for k in range(10)]
    out = {"run": str(run), "step": step, "completions": len(ro.texts), "accuracy": round(float(reward.mean()), 3),
           "ev_all_tokens": ev(mask.bool()), "ev_first_token": ev(t == 0),
           "ev_last_token": ev(t == (lengths - 1).clamp(min=0)[:, None]), "ev_by_tenth": tenths,
           "machine": machine_info()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
