#!/usr/bin/env python
"""An agent that acts, learning: the tiny preset fine-tuned on an expert's noisy demonstrations of the
`guess` game (bisection, a random guess in the open range with probability `--noise`), then GRPO in the
environment; the held-out solve rate and guesses per solved game before and after GRPO.

    python benchmarks/agent_guess_learning.py --seeds 0,1,2                     # ≈ 5 min a seed, one thread

Per seed (the policy's initialisation and training, the demonstrations' noise, GRPO's sampling):
`--demos` expert episodes on training rows (`seed` column ``train-i``), SFT on their policy tokens (the
tool turns out of the loss), greedy episodes on `--test` held-out rows (``test-i``: other numbers to
find), then `--steps` GRPO steps (`GRPOTrainer(environment_factory=GuessEnv)`, compact call syntax,
the environment's reward only) and the same held-out episodes again. The last printed line is one JSON
object: per seed the before/after metrics, and the mean gain with its standard error over seeds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

AGENT = dict(call_syntax="compact", tool_prompt="none", max_turns=8, max_tool_calls=8, max_episode_tokens=320)


def rows(split: str, n: int, sample: int = 0):
    """`n` games of `split`; `sample` draws another set of numbers (the problem sample)."""
    from seqrl.types import Problem

    tag = f"{split}-{sample}" if sample else split  # sample 0: the rows of the first runs
    return [Problem("Play.", "", metadata={"seed": f"{tag}-{i}"}, uid=f"{tag}-{i}") for i in range(n)]


def play(policy, problems, sampler=None, params=None):
    """One episode per problem (greedy by default): (episodes, environments)."""
    from seqrl.agents import AgentTools
    from seqrl.agents.envs.guess import GuessEnv
    from seqrl.agents.rollout import encode_prompts, multi_turn_rollout
    from seqrl.rollout import SamplingParams

    agent = AgentTools(environments=GuessEnv, syntax=AGENT["call_syntax"])
    boxes, envs, added = agent.prepare(problems, 1)
    prompts = encode_prompts(policy, problems, boxes, AGENT["tool_prompt"], added)
    episodes = multi_turn_rollout(policy, prompts, boxes, params or SamplingParams(temperature=0.0, max_new_tokens=24),
                                  n=1, max_turns=AGENT["max_turns"], max_tool_calls=AGENT["max_tool_calls"],
                                  max_episode_tokens=AGENT["max_episode_tokens"], sampler=sampler, envs=envs)
    return episodes, envs


def held_out(policy, problems, sampling_seed: int = 12345) -> dict:
    """Greedy episodes on the held-out games, and one sampled (T = 1, fixed seed) episode each: what GRPO
    trains on."""
    import torch

    from seqrl.rollout import SamplingParams

    with torch.no_grad():
        episodes, envs = play(policy, problems)
        _, sampled = play(policy, problems, params=SamplingParams(temperature=1.0, max_new_tokens=24, seed=sampling_seed))
    solved = [e.guesses for e in envs if e.found]
    return {"solve_rate": len(solved) / len(envs),
            "guesses_per_solved": sum(solved) / len(solved) if solved else float("nan"),
            "reward": sum(e.get_reward() for e in envs) / len(envs),
            "malformed_per_episode": sum(e.errors["malformed"] + e.errors["bad_arguments"] for e in episodes) / len(episodes),
            "sampled_solve_rate": sum(e.found for e in sampled) / len(sampled),
            "sampled_reward": sum(e.get_reward() for e in sampled) / len(sampled)}


def one_seed(seed: int, args) -> dict:
    import torch

    from seqrl.agents.demos import episode_examples, expert_sampler
    from seqrl.agents.envs.guess import GuessEnv, bisection_expert
    from seqrl.algos.config import AgentConfig, OptimConfig, RunConfig
    from seqrl.algos.grpo import GRPOConfig, GRPOTrainer, LossConfig, SamplingConfig
    from seqrl.evaluation import EvalConfig
    from seqrl.models.lm import ModelConfig, load_policy, load_pretrained
    from seqrl.training.finetune import finetune
    from seqrl.training.run import make_optimizer

    torch.manual_seed(seed)
    policy = load_policy(ModelConfig(preset="tiny", max_seq_len=512))
    policy.prompt = GRPOConfig().prompt  # the prompt GRPO renders
    t0 = time.perf_counter()
    sample = seed if args.sample_per_seed else 0
    demos, envs = play(policy, rows("train", args.demos, sample),
                       sampler=expert_sampler(policy, bisection_expert(args.noise, seed), "]]"))
    examples = episode_examples(demos)
    expert = {"solve_rate": sum(e.found for e in envs) / len(envs),
              "guesses_per_solved": statistics.mean(e.guesses for e in envs if e.found)}
    cached = (Path(args.cache) / f"sft_s{seed}_n{args.demos}_{args.noise}_{args.sft_steps}{'_p' if sample else ''}"
              if args.cache else None)
    if cached is not None and (cached / "config.json").is_file():
        policy = load_pretrained(str(cached))
        policy.prompt = GRPOConfig().prompt
        sft = json.loads((cached / "sft.json").read_text())
    else:
        optimizer, scheduler = make_optimizer(policy.model, OptimConfig(lr=args.sft_lr, warmup_steps=20), args.sft_steps)
        sft = finetune(policy.model, examples, steps=args.sft_steps, batch_size=32, optimizer=optimizer,
                       scheduler=scheduler, pad_id=policy.tokenizer.pad_token_id, seed=seed)
        if cached is not None:
            policy.save(cached)
            (cached / "sft.json").write_text(json.dumps(sft))
    test = rows("test", args.test, sample)
    print(f"seed {seed}: SFT on {len(examples)} demonstrations, loss {sft['loss/sft_last']:.3f} "
          f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    before = held_out(policy, test, 12345 + seed)
    print(f"seed {seed}: held-out after SFT {before}", file=sys.stderr, flush=True)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(args.cache) / "grpo" if args.cache else Path(scratch)  # its metrics.jsonl and plots kept
        name = f"s{seed}_lr{args.grpo_lr:g}_steps{args.steps}_b{args.batch}"
        shutil.rmtree(out / name, ignore_errors=True)  # a fresh run each time
        cfg = GRPOConfig(run=RunConfig(name=name, out_dir=str(out), seed=seed, progress=False, log_every=10,
                                       resume=False),
                         optim=OptimConfig(lr=args.grpo_lr, warmup_steps=0, schedule="constant"),
                         eval=EvalConfig(max_new_tokens=24), sampling=SamplingConfig(max_new_tokens=24),
                         loss=LossConfig(beta=0.0), steps=args.steps, batch_size=args.batch, group_size=args.group,
                         agent=AgentConfig(**AGENT))
        GRPOTrainer(model=policy.model, processing_class=policy.tokenizer, args=cfg,
                    train_dataset=[{"prompt": p.prompt, **p.metadata} for p in rows("train", args.demos, sample)],
                    eval_dataset=[{"prompt": p.prompt, **p.metadata} for p in test[:8]],
                    environment_factory=GuessEnv).train()
    after = held_out(policy, test, 12345 + seed)
    return {"seed": seed, "expert": expert, "sft_loss": sft["loss/sft_last"], "before": before, "after": after,
            "sft_s": round(t1 - t0, 1), "grpo_s": round(time.perf_counter() - t1, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--demos", type=int, default=512)
    ap.add_argument("--noise", type=float, default=0.3)
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--sft-lr", type=float, default=3e-3)
    ap.add_argument("--test", type=int, default=200)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--grpo-lr", type=float, default=1e-4)
    ap.add_argument("--sample-per-seed", action="store_true",
                    help="draw the training and held-out games from the seed too (the problem sample varies with it)")
    ap.add_argument("--cache", default="runs/bench-cache/agent_guess", help="SFT models kept per (seed, demos, noise, "
                    "steps) and reused ('' keeps none)")
    args = ap.parse_args()
    import torch

    from _machine import machine_info

    torch.set_num_threads(1)
    results = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        results.append(one_seed(seed, args))
        print(json.dumps(results[-1]), flush=True)
    summary = {"benchmark": "agent_guess_learning", "args": vars(args), "seeds": results, "machine": machine_info()}
    for key in ("solve_rate", "guesses_per_solved", "reward", "sampled_solve_rate", "sampled_reward"):
        gains = [r["after"][key] - r["before"][key] for r in results]
        se = statistics.stdev(gains) / len(gains) ** 0.5 if len(gains) > 1 else float("nan")
        summary[f"gain/{key}"] = {"mean": statistics.mean(gains), "se": se}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
