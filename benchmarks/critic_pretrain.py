#!/usr/bin/env python
"""Can a critic learn the return from the policy's own rollouts? Value pretraining on a fixed pool.

    python benchmarks/critic_pretrain.py --policy runs/sft_arith_tiny_short/checkpoint-200 [--updates 2000]

Samples `--prompts` training problems × `--samples` completions from the policy (T = 1), scores each with
the task's verifier (R), and trains a critic started from the policy's weights (a fresh scalar head, as
PPO's default) to predict R at every completion token (the GAE return at γ = λ = 1 without the KL term),
mean squared error over tokens, AdamW. Every `--eval-every` updates: explained variance 1 − Var(R − V)/Var(R)
on held-out problems' samples, over all tokens, at the first token and at the last. The last line is one
JSON object with the curve and the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import machine_info  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", required=True)
    ap.add_argument("--critic", help="the critic's starting model (default: the policy's weights); with another "
                    "tokenizer the texts are encoded again with its own")
    ap.add_argument("--task", default="arith")
    ap.add_argument("--digits", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--heldout", type=int, default=200)
    ap.add_argument("--updates", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from seqrl.core.ppo import explained_variance
    from seqrl.data import get_task
    from seqrl.models.heads import completion_values, load_scalar_model
    from seqrl.models.lm import ModelConfig, load_policy
    from seqrl.rewards.combine import RewardSpec, build_reward, score_completions
    from seqrl.rollout import SamplingParams, generate
    from seqrl.training.run import make_optimizer
    from seqrl.algos.config import OptimConfig

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    policy = load_policy(ModelConfig(path=args.policy))
    policy.model.eval()
    task = get_task(args.task, **({"digits": args.digits} if args.task.startswith("arith") else {}))
    verifier = {"v": (build_reward(RewardSpec("task"), task), 1.0)}

    critic, critic_tok = load_scalar_model(ModelConfig(path=args.critic or args.policy))
    same_ids = critic_tok.get_vocab() == policy.tokenizer.get_vocab()

    def pool(split: str, n: int, seed: int):
        problems = task.problems(split, n, 0)
        with torch.no_grad():
            ro = generate(policy, policy.encode_prompts(problems), args.samples,
                          SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=seed))
        rows = [problems[i // args.samples] for i in range(len(ro.texts))]
        reward = torch.tensor(score_completions(verifier, rows, ro.texts).total)  # (N,)
        if same_ids:
            prompts = [ro.prompt_ids[i // args.samples] for i in range(len(ro.texts))]
            return prompts, ro.completion_ids.cpu(), ro.completion_mask.float().cpu(), reward
        # another tokenizer: the same texts, prompt and completion encoded apart (the boundary kept)
        prompts = [critic_tok(policy.prompt_text(p), add_special_tokens=False)["input_ids"] for p in rows]
        comps = [critic_tok(t, add_special_tokens=False)["input_ids"] or [critic_tok.eos_token_id] for t in ro.texts]
        width = max(len(c) for c in comps)
        ids = torch.full((len(comps), width), critic_tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(comps), width))
        for i, c in enumerate(comps):
            ids[i, : len(c)], mask[i, : len(c)] = torch.tensor(c), 1.0
        return prompts, ids, mask, reward

    train, held = pool("train", args.prompts, args.seed), pool("test", args.heldout, args.seed + 1)
    print(f"pools: {len(train[3])} train (accuracy {float(train[3].mean()):.3f}), {len(held[3])} held-out "
          f"({float(held[3].mean()):.3f}); {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    opt, sched = make_optimizer(critic, OptimConfig(lr=args.lr, warmup_steps=0, schedule="constant"), args.updates)
    pad = critic_tok.pad_token_id

    def values(prompts, ids, mask_rows):
        return completion_values(critic, prompts, ids, pad)  # (m, T)

    def evaluate() -> dict:
        critic.eval()
        prompts, ids, mask, reward = held
        with torch.no_grad():
            v = torch.cat([values(prompts[i:i + 128], ids[i:i + 128], None) for i in range(0, len(prompts), 128)])
        critic.train()
        returns = reward[:, None].expand_as(v) * mask
        lengths = mask.sum(1).long()
        t = torch.arange(ids.shape[1])[None, :]
        ev = lambda sel: round(float(explained_variance(v, returns, sel.float() * mask)), 3)  # noqa: E731
        return {"ev_all": ev(mask.bool()), "ev_first": ev(t == 0), "ev_last": ev(t == (lengths - 1).clamp(min=0)[:, None])}

    curve = [{"update": 0, **evaluate()}]
    g = torch.Generator().manual_seed(args.seed)
    prompts, ids, mask, reward = train
    critic.train()
    for u in range(1, args.updates + 1):
        idx = torch.randint(len(prompts), (args.batch,), generator=g)
        v = values([prompts[i] for i in idx.tolist()], ids[idx], None)  # (B, T)
        m = mask[idx]
        loss = (((v - reward[idx][:, None]) ** 2) * m).sum() / m.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(critic.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        if u % args.eval_every == 0:
            curve.append({"update": u, "loss": round(loss.item(), 4), **evaluate()})
            print(curve[-1], f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    print(json.dumps({"benchmark": "critic_pretrain", **{k: v for k, v in vars(args).items()},
                      "train_accuracy": round(float(train[3].mean()), 3), "curve": curve,
                      "seconds": round(time.perf_counter() - t0, 1), **machine_info()}))


if __name__ == "__main__":
    main()
