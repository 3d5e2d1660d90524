#!/usr/bin/env python
"""GRPO: seqrl's `GRPOLearner` against TRL's `GRPOTrainer` on the same work.

    python benchmarks/grpo_vs_trl.py --quick      # ≈ 5 min on an idle machine once the warm starts are cached (≈ 6 min more to train them once)
    python benchmarks/grpo_vs_trl.py              # full run, ≈ 13 min: 3 seeds × 30 steps on tiny, 2 × 5 on small
    python benchmarks/grpo_vs_trl.py --presets smollm2 --batch-size 32 --micro-batch-size 32 --max-new-tokens 96
                                                  # the real model (SmolLM2-135M-Instruct as shipped), ≈ 20 min

Both trainers get the same things: the same warm-start weights (a short SFT of the tiny / small preset
on 2-digit addition, cached under ``runs/bench-cache/``; ``smollm2``: SmolLM2-135M-Instruct as shipped,
`seqrl models get smollm2-135m-instruct`, whose answers the house-format verifier mostly scores 0, so most
groups have zero variance: its equal-work row is the one with skipping off), the same tokenizer and chat template (the
prompt token ids are checked equal), the same prompts in the same order (seqrl's prompt stream for
the run seed, handed to TRL as a dataset with ``shuffle_dataset=False``; checked every step), the
same reward (the task's verifier, 1.0 / 0.0, with the gold answer passed through a dataset column),
G completions per prompt and the same completions per optimizer step (TRL:
``per_device_train_batch_size`` = our ``micro_batch_size``, ``gradient_accumulation_steps`` = batch /
micro, hence ``steps_per_generation`` = GA and ``generation_batch_size`` = batch: one generation batch
per optimizer step; checked), the same ``max_new_tokens`` with natural EOS stopping (same EOS ids,
checked), temperature 1.0 with top-k / top-p off, β = 0 (no reference model; explicit on both: TRL's
default β changed between versions), μ = 1, ε = 0.2 on both sides, group-scaled advantages (both
std + 1e-4), the same loss aggregation (``--loss grpo``: TRL ``loss_type="grpo"`` = our
``seq_mean_token_mean``; ``--loss dapo``: ``"dapo"`` = ``token_mean``; TRL's default is ``dapo``),
torch AdamW with equal lr / betas (0.9, 0.95) / eps 1e-8, weight decay 0 on both (our optimizer exempts
embeddings from decay and HF's does not, so 0 is the only equal value), a constant schedule without
warm-up, gradient clipping at 1.0, the same precision (``--precision``; TRL's ``bf16`` default is on), gradient
checkpointing off (TRL's default is on), no vLLM, no evaluation, no checkpoints, no logging
(``logging_strategy="no"``, ``report_to="none"``), one process and one torch thread.

Two kinds of run, each in its own subprocess:

* paired runs (step time and reward): both trainers in one process on two copies of the weights,
  alternating step by step — TRL's ``trainer.train()`` drives, and a ``TrainerCallback.on_step_end``
  runs one seqrl step (``collect`` + ``train_step``) after each TRL optimizer step. On this small
  shared machine the load moves within seconds; alternating steps lets that noise hit both alike.
  TRL's step time is the time of its own loop between two callbacks (generation, scoring,
  forward/backward, optimizer, Trainer bookkeeping), ours the time of our step inside the callback.
  The first step of each run is a warm-up and not counted; per preset, the median over all counted
  steps of all runs. Also: the split into generation + scoring ("gen": ours ``collect``, TRL
  ``_generate_and_score_completions``) and the rest ("train"), and TRL's ``model.generate`` alone.
* memory runs: one trainer alone per process (ours, TRL, TRL, ours, …), a few steps; peak RSS is
  that process's ``VmHWM``; also its RSS after setup (imports, model, trainer), before the first step.
  Their step times are reported too, as a cross-check of the paired ones.

Before these, one gradient check on tiny: one batch through both losses from the same weights (ours:
``train_step`` with the optimizer step disabled; TRL: its ``compute_loss`` per micro-batch, then the
same clipping); the relative difference of the two gradients is reported (fp32 round-off: ≈ 1e-7).

The training reward is the mean verifier score of each step's completions (sampled before that
step's update); "final" is its mean over the last ``--last`` steps of a run, and the delta seqrl − TRL
is averaged over seeds, with a binomial standard error. Sampling randomness differs (different RNG
streams), so rewards agree only in distribution.

What differs in the work itself (part of what is measured): TRL samples with Hugging Face
``generate`` on G copies of each prompt and keeps every row until the longest stops, ours prefills
each prompt once and drops finished rows. Both recompute the policy's log-probs in the training
forward and neither recomputes π_old (μ = 1), both compute the token entropy, both pad completions
to the longest of the batch.

Zero-variance groups (all G completions scored alike) have advantage 0: seqrl skips their rows in the
training forward (``skip_zero_advantage``, exact with β = 0), TRL computes them. Both trainers'
fraction of such groups is reported; ``--noskip-repeats`` adds paired runs with seqrl's skipping off
(equal work). The small warm start is trained until held-out pass@1 is ≈ 0.2–0.7, so that most
groups are mixed and skipping does not decide the small ratio.

Both sides run fp32 by default; ``--precision bf16`` runs both with bf16 autocast and fp32 master weights
(seqrl ``run.bf16=true``, TRL ``bf16=True``; the gradient check stays fp32). bf16 vs fp32 of seqrl's own GRPO
step, learning gain included: ``benchmarks/grpo_bf16.py``.

The last printed line is one JSON object: ``step_time_ratio_{tiny,small}`` (seqrl median s / TRL
median s; < 1: seqrl faster), ``step_time_ratio_noskip_*``, ``{ours,trl}_zero_var_groups_*``,
``peak_rss_ratio_*``, ``final_reward_delta_*``, ``warm_start_pass1_*``, the raw medians, torch's CPU
capabilities and the load average. Every step of every run goes to ``runs/bench-cache/grpo_vs_trl-runs[-quick].json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from _machine import proc_status_kib, run_event_worker  # noqa: E402 — benchmarks/, the script's own folder

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # runnable from a checkout without installing the package
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PRESETS = ("tiny", "small", "smollm2")
FRAMEWORKS = ("ours", "trl")
# Warm starts: the recipe of preset sft/arith_tiny_short (batch 32, lr 3e-3, 2-digit addition).
# tiny: 200 steps, as the GRPO presets' warm start (held-out greedy accuracy ≈ 0.9, sampled ≈ 0.5).
# small: long enough that held-out pass@1 (T = 1) sits between 0.2 and 0.7, so that most groups have
# both right and wrong completions and skipping zero-variance groups does not decide the step time
# (40 steps gave greedy accuracy 0.01 and 97 % of the groups skipped). Its steps cost ≈ 8× the tiny's;
# trained once and cached.
SFT_CONFIG = ROOT / "src" / "seqrl" / "configs" / "sft" / "arith_tiny_short.yaml"
SFT_STEPS = {"tiny": 200, "small": 150}
N_TRAIN = 5000  # training problems of the GRPO runs (task seed 0)
EVENT = "@@grpo_vs_trl "  # prefix of the worker's machine-readable stdout lines


# ---------------------------------------------------------------------------------------------
# Arguments


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1 seed, few steps (≈ 4 min with cached warm starts)")
    p.add_argument("--presets", default="tiny,small", help="comma-separated presets (tiny, small, smollm2)")
    p.add_argument("--seeds", type=int, default=None, help="paired runs on tiny (default 3; 1 with --quick)")
    p.add_argument("--small-repeats", type=int, default=None, help="paired runs on small (default 2; 1 quick)")
    p.add_argument("--tiny-steps", type=int, default=None, help="steps per paired tiny run (default 30; 6 quick)")
    p.add_argument("--small-steps", type=int, default=None, help="steps per paired small run (default 5; 2 quick)")
    p.add_argument("--smollm2-repeats", type=int, default=1, help="paired runs on smollm2")
    p.add_argument("--smollm2-steps", type=int, default=3, help="steps per paired smollm2 run")
    p.add_argument("--noskip-repeats", type=int, default=1,
                   help="paired runs per preset with seqrl's zero-variance skipping off (equal work; 0: none)")
    p.add_argument("--mem-runs", type=int, default=None, help="memory runs per trainer and preset (default 2; 1 quick)")
    p.add_argument("--mem-steps", type=int, default=None, help="steps per memory run (default 3; 2 quick)")
    p.add_argument("--last", type=int, default=None,
                   help="final reward = mean over this many last steps of a run (default 10; 3 quick)")
    p.add_argument("--batch-size", type=int, default=128, help="completions per optimizer step")
    p.add_argument("--group-size", type=int, default=8, help="G: completions per prompt")
    p.add_argument("--micro-batch-size", type=int, default=64,
                   help="completions per forward/backward (TRL per_device_train_batch_size)")
    p.add_argument("--max-new-tokens", type=int, default=48, help="completion cap (TRL max_completion_length)")
    p.add_argument("--lr", type=float, default=5e-5, help="AdamW learning rate (constant, no warm-up)")
    p.add_argument("--loss", choices=("grpo", "dapo"), default="grpo",
                   help="grpo: per-sequence token mean (ours seq_mean_token_mean); dapo: token mean (token_mean)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (each run)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="both trainers: fp32, or bf16 autocast with fp32 master weights (seqrl run.bf16=true, "
                        "TRL bf16=True); the gradient check stays fp32")
    p.add_argument("--cache-dir", default=str(ROOT / "runs" / "bench-cache"), help="warm starts and run details")
    p.add_argument("--retrain", action="store_true", help="train the warm starts again even when cached")
    p.add_argument("--keep-logs", action="store_true", help="keep each run's stderr (<cache-dir>/grpo_vs_trl-logs)")
    # Internal: one run in this process (the parent starts these).
    p.add_argument("--worker", choices=("ours", "trl", "pair", "gradcheck"), help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", help=argparse.SUPPRESS)
    p.add_argument("--skip-zero", choices=("on", "off"), default="on", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.presets = [x for x in args.presets.split(",") if x]
    for x in args.presets:
        if x not in PRESETS:
            p.error(f"unknown preset {x!r}; choose from {PRESETS}")
    defaults = {"seeds": (3, 1), "small_repeats": (2, 1), "tiny_steps": (30, 6), "small_steps": (5, 2),
                "mem_runs": (2, 1), "mem_steps": (3, 2), "last": (10, 3)}
    for name, (full, quick) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.noskip_repeats < 0:
        p.error("--noskip-repeats must be >= 0")
    if min(args.seeds, args.small_repeats, args.mem_runs, args.last, args.threads) < 1:
        p.error("--seeds, --small-repeats, --mem-runs, --last and --threads must be >= 1")
    if min(args.tiny_steps, args.small_steps, args.smollm2_steps, args.mem_steps) < 2:
        p.error("--tiny-steps, --small-steps, --smollm2-steps and --mem-steps must be >= 2 (each run's first step "
                "is a warm-up)")
    if args.group_size < 2:
        p.error("--group-size must be >= 2")
    if args.batch_size % args.group_size or args.batch_size % args.micro_batch_size:
        p.error(f"--batch-size ({args.batch_size}) must be divisible by --group-size ({args.group_size}) "
                f"and by --micro-batch-size ({args.micro_batch_size})")
    return args


# ---------------------------------------------------------------------------------------------
# Worker side: one run in this process


def emit(kind: str, **fields) -> None:
    print(EVENT + json.dumps({"event": kind, **fields}), flush=True)


def eos_ids(policy) -> list[int]:
    ids: set[int] = set()
    for source in (policy.model.generation_config.eos_token_id, policy.tokenizer.eos_token_id):
        if source is not None:
            ids.update(source if isinstance(source, (list, tuple)) else [source])
    return sorted(ids)


class Shared:
    """What both trainers of a run use: the task, its problems and the prompt order of the seed."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        from seqrl.training.run import stream_indices
        from seqrl.data import get_task

        torch.set_num_threads(args.threads)
        torch.manual_seed(args.seed)
        self.args = args
        self.task = get_task("arith", digits=2)
        self.problems = self.task.problems("train", N_TRAIN, 0)
        self.per_step = args.batch_size // args.group_size  # prompts per step
        # The prompts in the order seqrl's GRPOLearner draws them for this seed (its cursor starts at 0).
        self.order = [self.problems[i] for i in stream_indices(0, args.steps * self.per_step, len(self.problems),
                                                               args.seed)]

    def step_prompts(self, step: int) -> list[str]:
        return [p.prompt for p in self.order[step * self.per_step:(step + 1) * self.per_step]]


class OursRun:
    """seqrl's GRPOLearner with the benchmark's settings; `step(k)` runs one collect + train_step."""

    def __init__(self, shared: Shared) -> None:
        from seqrl.training.run import stream_indices
        from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
        from seqrl.algos.grpo import GRPOConfig, GRPOLearner, LossConfig, SamplingConfig
        from seqrl.models import ModelConfig, load_pretrained

        args = shared.args
        self.shared, self.stream_indices = shared, stream_indices
        cfg = GRPOConfig(
            run=RunConfig(name="bench", out_dir=tempfile.gettempdir(), seed=args.seed, threads=args.threads,
                          bf16=args.precision == "bf16", progress=False),
            model=ModelConfig(path=args.checkpoint),
            task=TaskConfig(name="arith", kwargs={"digits": 2}, n_train=N_TRAIN, seed=0),
            optim=OptimConfig(lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95), warmup_steps=0, schedule="constant",
                              grad_clip=1.0),
            sampling=SamplingConfig(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=args.max_new_tokens),
            loss=LossConfig(advantage="grpo", scale_rewards="group", clip_eps_low=0.2, clip_eps_high=0.2, beta=0.0,
                            agg="seq_mean_token_mean" if args.loss == "grpo" else "token_mean"),
            steps=args.steps, batch_size=args.batch_size, group_size=args.group_size, num_iterations=1,
            minibatches=1, micro_batch_size=args.micro_batch_size, skip_zero_advantage=args.skip_zero == "on",
        )
        self.policy = load_pretrained(args.checkpoint)
        self.trainer = GRPOLearner(cfg, self.policy, shared.task, shared.problems)
        self.policy.model.train()

    def step(self, step: int) -> dict:
        tr = self.trainer
        first = tr.prompt_cursor
        t0 = time.perf_counter()
        batch = tr.collect(step)
        metrics = tr.train_step(batch)
        seconds = time.perf_counter() - t0
        drawn = self.stream_indices(first, tr.prompt_cursor - first, len(tr.problems), tr.cfg.run.seed)
        lengths = batch.completion_mask.sum(1)
        return {"seconds": seconds, "gen_s": batch.metrics["perf/gen_s"], "train_s": metrics["perf/train_s"],
                "reward": batch.metrics["reward/accuracy/mean"], "mean_len": float(lengths.float().mean()),
                "zero_var_groups": batch.metrics["stats/zero_var_groups"],
                "skipped_rows_frac": metrics.get("stats/skipped_rows_frac", 0.0),
                "max_len": int(lengths.max()),
                "prompts_match": [tr.problems[i].prompt for i in drawn] == self.shared.step_prompts(step)}


class TRLRun:
    """TRL's GRPOTrainer with the benchmark's settings (built, not yet trained)."""

    def __init__(self, shared: Shared, on_step) -> None:
        """`on_step(step, fields)` is called at each optimizer step's end with TRL's step figures."""
        import torch
        import transformers
        import trl
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer

        from seqrl.models import load_pretrained
        from seqrl.types import Problem

        args, task = shared.args, shared.task
        self.versions = {"trl": trl.__version__, "transformers": transformers.__version__}
        # One spare step of prompts so the sampler never runs short; max_steps ends the run.
        rows = [{"prompt": [{"role": "user", "content": p.prompt}], "question": p.prompt, "answer": p.answer}
                for p in shared.order + shared.order[:shared.per_step]]
        rewards: list[dict] = []

        def accuracy(prompts, completions, completion_ids, question, answer, **kwargs) -> list[float]:
            """The task's verifier, 1.0 / 0.0, on the decoded completion (special tokens skipped)."""
            texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
            scores = [float(task.verify(Problem(q, a), t).score)
                      for q, a, t in zip(question, answer, texts, strict=True)]
            groups = [scores[i:i + args.group_size] for i in range(0, len(scores), args.group_size)]
            rewards.append({"reward": sum(scores) / len(scores), "questions": list(question)[:: args.group_size],
                            "lengths": [len(ids) for ids in completion_ids],
                            "zero_var_groups": sum(len(set(g)) == 1 for g in groups) / len(groups)})
            return scores

        self.out_dir = tempfile.mkdtemp(prefix="grpo_vs_trl-")
        config = GRPOConfig(
            output_dir=self.out_dir, seed=args.seed, data_seed=args.seed, use_cpu=True,
            bf16=args.precision == "bf16", fp16=False, gradient_checkpointing=False, torch_compile=False,
            # batch geometry: one generation batch of `batch_size` completions per optimizer step
            per_device_train_batch_size=args.micro_batch_size,
            gradient_accumulation_steps=args.batch_size // args.micro_batch_size,
            num_generations=args.group_size, num_iterations=1, max_steps=args.steps,
            shuffle_dataset=False, remove_unused_columns=False, dataloader_num_workers=0,
            # sampling
            max_completion_length=args.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0, min_p=None,
            repetition_penalty=1.0, use_vllm=False, use_transformers_continuous_batching=False,
            # objective
            beta=0.0, epsilon=0.2, epsilon_high=0.2, loss_type=args.loss, scale_rewards="group",
            importance_sampling_level="token", mask_truncated_completions=False, top_entropy_quantile=1.0,
            # optimizer
            learning_rate=args.lr, optim="adamw_torch", adam_beta1=0.9, adam_beta2=0.95, adam_epsilon=1e-8,
            weight_decay=0.0, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0,
            # no logging, evaluation or saving
            logging_strategy="no", eval_strategy="no", save_strategy="no", report_to="none", disable_tqdm=True,
            log_completions=False,
        )
        ga = config.gradient_accumulation_steps
        if config.generation_batch_size != args.batch_size or config.steps_per_generation != ga:
            raise RuntimeError(f"TRL batch geometry: generation_batch_size {config.generation_batch_size}, "
                               f"steps_per_generation {config.steps_per_generation}, GA {ga}; "
                               f"expected {args.batch_size}, {ga}, {ga}")
        timings: dict[str, list[float]] = {"gen": [], "generate": []}
        self.mark: float | None = None  # when TRL's loop got the CPU back (step start, or end of our callback)
        run = self

        class StepCallback(TrainerCallback):
            def on_step_begin(self, args_, state, control, **kwargs):
                if run.mark is None:
                    run.mark = time.perf_counter()

            def on_step_end(self, args_, state, control, **kwargs):
                seconds = time.perf_counter() - run.mark
                step = state.global_step - 1
                info = rewards[step]
                gen = timings["gen"][step]
                on_step(step, {
                    "seconds": seconds, "gen_s": gen, "train_s": seconds - gen, "generate_s": timings["generate"][step],
                    "reward": info["reward"], "mean_len": sum(info["lengths"]) / len(info["lengths"]),
                    "max_len": max(info["lengths"]), "prompts_match": info["questions"] == shared.step_prompts(step),
                    "zero_var_groups": info["zero_var_groups"],
                })
                run.mark = time.perf_counter()

        self.policy = load_pretrained(args.checkpoint)
        self.trainer = GRPOTrainer(model=self.policy.model, reward_funcs=accuracy, args=config,
                                   train_dataset=Dataset.from_list(rows), processing_class=self.policy.tokenizer,
                                   callbacks=[StepCallback()])

        def timed(fn, key):
            def wrapper(*a, **kw):
                t0 = time.perf_counter()
                try:
                    return fn(*a, **kw)
                finally:
                    timings[key].append(time.perf_counter() - t0)
            return wrapper

        self.trainer._generate_and_score_completions = timed(self.trainer._generate_and_score_completions, "gen")
        self.trainer._generate_single_turn = timed(self.trainer._generate_single_turn, "generate")
        # Same prompt token ids and EOS ids as ours (TRL applies the chat template itself).
        sample = [r["prompt"] for r in rows[:shared.per_step]]
        same_ids = [list(x) for x in self.trainer._tokenize_prompts(sample)[0]] == \
            self.policy.encode_prompts([r["question"] for r in rows[:shared.per_step]])
        same_eos = sorted(self.trainer.eos_token_ids) == eos_ids(self.policy)
        if not (same_ids and same_eos):
            raise RuntimeError(f"TRL prompt ids equal ours: {same_ids}; TRL EOS ids {self.trainer.eos_token_ids}, "
                               f"ours {eos_ids(self.policy)}")
        torch.set_num_threads(args.threads)

    def train(self) -> dict:
        self.trainer.train()
        shutil.rmtree(self.out_dir, ignore_errors=True)
        opt = self.trainer.optimizer
        opt = getattr(opt, "optimizer", opt)  # accelerate's wrapper
        groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()
                   if k in ("lr", "betas", "eps", "weight_decay", "foreach", "fused")} for g in opt.param_groups]
        return {"versions": self.versions, "optimizer": f"{type(opt).__module__}.{type(opt).__name__}",
                "optimizer_groups": groups}


def gradient_check(ours: OursRun, trl_run: TRLRun, args: argparse.Namespace) -> dict:
    """One batch (ours, step 0) through both losses from the same weights: are the gradients equal?

    Ours: `train_step` with the optimizer step disabled. TRL: its `compute_loss` on the same rows,
    prompts left-padded as TRL does, one call per micro-batch, then the same clipping at 1.0.
    """
    import torch

    tr, model = ours.trainer, ours.policy.model
    batch = tr.collect(0)
    tr.optimizer.step = lambda *a, **k: None  # keep the accumulated gradient
    tr.optimizer.zero_grad = lambda *a, **k: None
    tr.train_step(batch)
    trainer, other = trl_run.trainer, trl_run.policy.model
    other.train()
    pad, n = ours.policy.tokenizer.pad_token_id, len(batch.rewards)
    width = max(len(p) for p in batch.prompt_ids)
    prompt_ids = torch.full((n, width), pad, dtype=torch.long)  # (N, P) left-padded
    prompt_mask = torch.zeros((n, width), dtype=torch.long)  # (N, P)
    for i, p in enumerate(batch.prompt_ids):
        prompt_ids[i, width - len(p):] = torch.tensor(p)
        prompt_mask[i, width - len(p):] = 1
    mask = batch.completion_mask.long()  # (N, T)
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": batch.completion_ids,
              "completion_mask": mask, "advantages": batch.advantages}
    trainer.current_gradient_accumulation_steps = args.batch_size // args.micro_batch_size
    for rows in torch.arange(n).split(args.micro_batch_size):
        micro = {k: v[rows] for k, v in inputs.items()}
        trainer.compute_loss(other, {**micro, "num_items_in_batch": mask.sum()}).backward()
    torch.nn.utils.clip_grad_norm_(other.parameters(), 1.0)
    a = torch.cat([p.grad.flatten() for p in model.parameters()]).double()
    b = torch.cat([p.grad.flatten() for p in other.parameters()]).double()
    return {"grad_norm_ours": float(a.norm()), "grad_norm_trl": float(b.norm()),
            "grad_rel_diff": float((a - b).norm() / b.norm().clamp(min=1e-30))}


def worker_main(args: argparse.Namespace) -> None:
    import torch

    shared = Shared(args)
    result: dict = {"loadavg_start": os.getloadavg()[0]}
    if args.worker == "ours":
        ours = OursRun(shared)
        result["setup_rss_kib"] = proc_status_kib("VmRSS")
        for step in range(args.steps):
            emit("step", step=step, ours=ours.step(step))
    elif args.worker == "trl":
        trl_run = TRLRun(shared, lambda step, fields: emit("step", step=step, trl=fields))
        result["setup_rss_kib"] = proc_status_kib("VmRSS")
        result.update(trl_run.train())
    elif args.worker == "gradcheck":
        trl_run = TRLRun(shared, lambda step, fields: None)
        result.update(gradient_check(OursRun(shared), trl_run, args))
        shutil.rmtree(trl_run.out_dir, ignore_errors=True)
    else:  # pair: TRL drives; after each of its optimizer steps, one of ours
        ours = OursRun(shared)

        def on_step(step: int, trl_fields: dict) -> None:
            if not torch.is_grad_enabled():
                raise RuntimeError("grad disabled inside TRL's callback")
            emit("step", step=step, trl=trl_fields, ours=ours.step(step))

        trl_run = TRLRun(shared, on_step)
        result.update(trl_run.train())
    result.update(peak_rss_kib=proc_status_kib("VmHWM"), threads=torch.get_num_threads(),
                  loadavg_end=os.getloadavg()[0])
    emit("result", **result)


# ---------------------------------------------------------------------------------------------
# Parent side: warm starts, runs, summary


def warm_start(preset: str, args: argparse.Namespace, console) -> dict:
    """The preset after a short SFT on 2-digit addition, from the cache or trained now (smollm2: the
    pretrained model as shipped, fetched into seqrl's model cache once)."""
    if preset == "smollm2":
        from seqrl.models.catalog import fetch

        return {"checkpoint": str(fetch("smollm2-135m-instruct")), "cached": True, "sft_steps": 0}
    from seqrl.algos.sft import SFTConfig
    from seqrl.config import load_config

    from _warm_start import cached_sft  # benchmarks/, the script's own folder

    steps = SFT_STEPS[preset]
    run_dir = Path(args.cache_dir) / f"grpo-warm-{preset}-{steps}"

    def config() -> SFTConfig:
        return load_config(SFTConfig, SFT_CONFIG, [
            f"--run.name={run_dir.name}", f"--run.out_dir={run_dir.parent}", "--run.save_every=0",
            "--run.keep_last=1", f"--run.threads={args.threads}", "--run.bf16=false",
            f"--model.preset={preset}", f"--steps={steps}", f"--eval.every={50 if preset == 'small' else 0}",
        ])  # eval.samples 4 (the preset's): the held-out pass@1 of the warm start is reported

    def announce() -> None:
        console.print(f"training the {preset} warm start: SFT {steps} steps as {SFT_CONFIG.relative_to(ROOT)} "
                      f"→ {run_dir}", style="dim")

    return {**cached_sft(run_dir, steps, config, args.retrain, announce), "sft_steps": steps}


def run_worker(kind: str, preset: str, seed: int, steps: int, args: argparse.Namespace, ckpt: str, bar,
               log_dir: Path) -> dict:
    worker = "pair" if kind == "pair_noskip" else kind
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", worker, "--checkpoint", ckpt,
           "--skip-zero", "off" if kind == "pair_noskip" else "on",
           "--seed", str(seed), "--steps", str(steps), "--batch-size", str(args.batch_size),
           "--group-size", str(args.group_size), "--micro-batch-size", str(args.micro_batch_size),
           "--max-new-tokens", str(args.max_new_tokens), "--lr", repr(args.lr), "--loss", args.loss,
           "--threads", str(args.threads), "--precision", "fp32" if kind == "gradcheck" else args.precision]
    log_path = log_dir / f"{preset}-{kind}-seed{seed}.log"

    def on_step(event: dict) -> None:
        fields = {fw: event[fw]["seconds"] for fw in FRAMEWORKS if fw in event}
        bar.advance(1, run=f"{preset}/{kind}/{seed}", **{f"{fw}_s": v for fw, v in fields.items()})

    code, steps_out, result, wall = run_event_worker(cmd, EVENT, args.threads, log_path, ROOT, on_step)
    if code != 0 or not result or len(steps_out) != (0 if kind == "gradcheck" else steps):
        tail = log_path.read_text()[-3000:]
        raise RuntimeError(f"{kind} run ({preset}, seed {seed}) failed with exit code {code} "
                           f"({len(steps_out)}/{steps} steps); log {log_path}:\n{tail}")
    return {"kind": kind, "preset": preset, "seed": seed, "steps": steps_out,
            "wall_s": round(wall, 1), **{k: v for k, v in result.items() if k != "event"}}


def step_stats(runs: list[dict], fw: str) -> dict:
    """Median step figures of trainer `fw` over all steps but each run's first."""
    counted = [s[fw] for r in runs for s in r["steps"][1:]]
    out = {key: statistics.median(s[key] for s in counted) for key in ("seconds", "gen_s", "train_s")}
    if fw == "trl":
        out["generate_s"] = statistics.median(s["generate_s"] for s in counted)
    out["warmup_s"] = statistics.median(r["steps"][0][fw]["seconds"] for r in runs)
    out["run_medians_s"] = [round(statistics.median(s[fw]["seconds"] for s in r["steps"][1:]), 4) for r in runs]
    out["mean_len"] = statistics.fmean(s[fw]["mean_len"] for r in runs for s in r["steps"])
    out["max_len"] = max(s[fw]["max_len"] for r in runs for s in r["steps"])
    out["prompts_match"] = all(s[fw]["prompts_match"] for r in runs for s in r["steps"])
    out["zero_var_groups"] = statistics.fmean(s[fw]["zero_var_groups"] for r in runs for s in r["steps"])
    if fw == "ours":
        out["skipped_rows_frac"] = statistics.fmean(s[fw]["skipped_rows_frac"] for r in runs for s in r["steps"])
    out["steps_counted"] = len(counted)
    return out


def preset_steps(preset: str, args: argparse.Namespace) -> int:
    return {"tiny": args.tiny_steps, "small": args.small_steps, "smollm2": args.smollm2_steps}[preset]


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    if args.worker:
        worker_main(args)
        return None
    import torch
    from rich.console import Console
    from rich.table import Table

    from seqrl.utils.progress import progress_bar

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    console = Console(width=None if sys.stdout.isatty() else 170)
    log_dir = Path(args.cache_dir) / "grpo_vs_trl-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    warm = {preset: warm_start(preset, args, console) for preset in args.presets}

    # Plan: per preset, the paired runs, then the memory runs (ours, TRL, TRL, ours, …).
    plan: list[tuple[str, str, int, int]] = []  # (kind, preset, seed, steps)
    if "tiny" in args.presets:
        plan.append(("gradcheck", "tiny", 0, 1))  # the objectives are equal: same gradient on one batch
    for preset in args.presets:
        n = {"tiny": args.seeds, "small": args.small_repeats, "smollm2": args.smollm2_repeats}[preset]
        steps = preset_steps(preset, args)
        plan += [("pair", preset, seed, steps) for seed in range(n)]
        plan += [("pair_noskip", preset, seed, steps) for seed in range(args.noskip_repeats)]
        for i in range(args.mem_runs):
            plan += [(fw, preset, 100 + i, args.mem_steps) for fw in (FRAMEWORKS if i % 2 == 0 else FRAMEWORKS[::-1])]
    runs: list[dict] = []
    with progress_bar(sum(p[3] for p in plan if p[0] != "gradcheck"), "GRPO steps, seqrl vs TRL") as bar:
        for kind, preset, seed, steps in plan:
            runs.append(run_worker(kind, preset, seed, steps, args, warm[preset]["checkpoint"], bar, log_dir))
    if not args.keep_logs:
        shutil.rmtree(log_dir, ignore_errors=True)
    detail = Path(args.cache_dir) / (f"grpo_vs_trl-runs{'-quick' if args.quick else ''}"
                                     f"{'-bf16' if args.precision == 'bf16' else ''}.json")
    internal = ("worker", "checkpoint", "seed", "steps")
    detail.write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k not in internal},
                                  "warm_starts": warm, "runs": runs}, indent=1))

    results: dict[str, dict] = {}
    for preset in args.presets:
        pairs = [r for r in runs if r["preset"] == preset and r["kind"] == "pair"]
        steps = preset_steps(preset, args)
        last = min(args.last, steps)
        res: dict = {"last": last, "runs": len(pairs), "steps": steps}
        for fw in FRAMEWORKS:
            s = step_stats(pairs, fw)
            finals = [statistics.fmean(st[fw]["reward"] for st in r["steps"][-last:]) for r in pairs]
            s["first_reward"] = statistics.fmean(r["steps"][0][fw]["reward"] for r in pairs)
            s["final_rewards"] = [round(x, 4) for x in finals]
            s["final_reward"] = statistics.fmean(finals)
            mem = [r for r in runs if r["preset"] == preset and r["kind"] == fw]
            s["peak_rss_mib"] = statistics.median(r["peak_rss_kib"] for r in mem) / 1024
            s["peak_rss_runs_mib"] = [round(r["peak_rss_kib"] / 1024, 1) for r in mem]
            s["setup_rss_mib"] = statistics.median(r["setup_rss_kib"] for r in mem) / 1024
            s["separate_s"] = statistics.median(st[fw]["seconds"] for r in mem for st in r["steps"][1:])
            res[fw] = s
        o, t = res["ours"], res["trl"]
        res["step_time_ratio"] = o["seconds"] / t["seconds"]
        res["separate_step_time_ratio"] = o["separate_s"] / t["separate_s"]
        res["peak_rss_ratio"] = o["peak_rss_mib"] / t["peak_rss_mib"]
        res["final_reward_deltas"] = [round(a - b, 4) for a, b in zip(o["final_rewards"], t["final_rewards"])]
        res["final_reward_delta"] = statistics.fmean(a - b for a, b in zip(o["final_rewards"], t["final_rewards"]))
        # Binomial standard error of the delta (each reward is a 0/1 score; steps treated as independent).
        n = len(pairs) * last * args.batch_size
        res["final_reward_delta_se"] = math.sqrt(sum(p * (1 - p) / n for p in (o["final_reward"], t["final_reward"])))
        res["loadavg"] = [round(r[k], 2) for r in pairs for k in ("loadavg_start", "loadavg_end")]
        noskip = [r for r in runs if r["preset"] == preset and r["kind"] == "pair_noskip"]
        if noskip:  # seqrl computes every row, as TRL does: equal work
            res["noskip"] = {fw: step_stats(noskip, fw) for fw in FRAMEWORKS}
            res["noskip"]["step_time_ratio"] = res["noskip"]["ours"]["seconds"] / res["noskip"]["trl"]["seconds"]
            res["noskip"]["train_time_ratio"] = res["noskip"]["ours"]["train_s"] / res["noskip"]["trl"]["train_s"]
        results[preset] = res
    trl_info = next(r for r in runs if r["kind"] in ("pair", "trl"))
    grad = next((r for r in runs if r["kind"] == "gradcheck"), None)

    # ---- readable table (stdout) ----
    table = Table(title=f"GRPO, seqrl vs TRL {trl_info['versions']['trl']}: {args.batch_size} completions/step "
                        f"(G={args.group_size}, micro-batch {args.micro_batch_size}), max_new_tokens "
                        f"{args.max_new_tokens}, T=1.0, β=0, μ=1, loss {args.loss}, lr {args.lr:g}, {args.precision}, "
                        f"{args.threads} thread(s)")
    for col in ("preset", "trainer", "runs×steps", "s/step", "gen+score s", "train s", "HF generate s", "warm-up s",
                "s/step alone", "setup RSS MiB", "peak RSS MiB", "mean len", "reward first → last", "seqrl/TRL"):
        table.add_column(col, justify="left" if col in ("preset", "trainer") else "right")
    for preset, res in results.items():
        for fw in FRAMEWORKS:
            s = res[fw]
            ratio = ""
            if fw == "ours":
                ratio = (f"time {res['step_time_ratio']:.2f}× (alone {res['separate_step_time_ratio']:.2f}×), "
                         f"RSS {res['peak_rss_ratio']:.2f}×")
            table.add_row(
                preset if fw == "ours" else "", "seqrl" if fw == "ours" else "TRL", f"{res['runs']}×{res['steps']}",
                f"{s['seconds']:.3f}", f"{s['gen_s']:.3f}", f"{s['train_s']:.3f}",
                f"{s['generate_s']:.3f}" if "generate_s" in s else "", f"{s['warmup_s']:.2f}",
                f"{s['separate_s']:.3f}", f"{s['setup_rss_mib']:.0f}", f"{s['peak_rss_mib']:.0f}",
                f"{s['mean_len']:.1f}", f"{s['first_reward']:.3f} → {s['final_reward']:.3f}", ratio,
            )
    console.print(table)
    console.print("s/step: median over every step but each run's first, both trainers in one process alternating "
                  "steps; 'alone': the same from the memory runs (one trainer per process). reward last: mean over "
                  "the last " + ", ".join(f"{p} {r['last']}" for p, r in results.items()) + " steps of each run.")
    for preset, res in results.items():
        if "noskip" in res:
            ns = res["noskip"]
            console.print(f"{preset}, seqrl's zero-variance skipping off (equal work): s/step seqrl "
                          f"{ns['ours']['seconds']:.3f} (train {ns['ours']['train_s']:.3f}) TRL {ns['trl']['seconds']:.3f} "
                          f"(train {ns['trl']['train_s']:.3f}), ratio {ns['step_time_ratio']:.2f}× "
                          f"(train {ns['train_time_ratio']:.2f}×)")
        console.print(f"{preset}: zero-variance groups seqrl {res['ours']['zero_var_groups']:.1%} (rows skipped "
                      f"{res['ours']['skipped_rows_frac']:.1%}), TRL {res['trl']['zero_var_groups']:.1%}")
    for preset, res in results.items():
        w = warm[preset]
        how = "cached" if w["cached"] else f"trained now in {w['train_s']} s"
        console.print(f"{preset}: warm start SFT {w['sft_steps']} steps ({how}), held-out greedy accuracy "
                      f"{w.get('greedy_accuracy', float('nan')):.2f}, pass@1 {w.get('sampled_accuracy', float('nan')):.2f}; "
                      f"final reward seqrl "
                      f"{res['ours']['final_rewards']} "
                      f"TRL {res['trl']['final_rewards']}, delta {res['final_reward_delta']:+.4f} ± "
                      f"{res['final_reward_delta_se']:.4f} (s.e.); run medians s/step seqrl "
                      f"{res['ours']['run_medians_s']} TRL {res['trl']['run_medians_s']}; peak RSS per run seqrl "
                      f"{res['ours']['peak_rss_runs_mib']} TRL {res['trl']['peak_rss_runs_mib']}; same prompts every "
                      f"step: {res['ours']['prompts_match'] and res['trl']['prompts_match']}; load average "
                      f"{res['loadavg']}")
    if grad is not None:
        console.print(f"same gradient (tiny, one batch, same weights): |g| seqrl {grad['grad_norm_ours']:.6f} TRL "
                      f"{grad['grad_norm_trl']:.6f}, relative difference {grad['grad_rel_diff']:.1e}")
    console.print(f"TRL optimizer: {trl_info['optimizer']} {trl_info['optimizer_groups']}")

    summary: dict = {"benchmark": "grpo_vs_trl", "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                     "quick": args.quick, "trl_version": trl_info["versions"]["trl"],
                     "transformers_version": trl_info["versions"]["transformers"], "torch_version": torch.__version__,
                     "batch_size": args.batch_size, "group_size": args.group_size,
                     "micro_batch_size": args.micro_batch_size, "max_new_tokens": args.max_new_tokens, "lr": args.lr,
                     "loss": args.loss, "threads": args.threads, "precision": args.precision}
    for key in ("step_time_ratio", "peak_rss_ratio", "final_reward_delta"):
        for preset, res in results.items():
            summary[f"{key}_{preset}"] = round(res[key], 4 if key == "final_reward_delta" else 3)
    if "tiny" in results:
        summary["final_reward_delta_se_tiny"] = round(results["tiny"]["final_reward_delta_se"], 4)
    if grad is not None:
        summary["grad_rel_diff_tiny"] = float(f"{grad['grad_rel_diff']:.2e}")
    for preset, res in results.items():
        summary[f"separate_step_time_ratio_{preset}"] = round(res["separate_step_time_ratio"], 3)
        summary[f"runs_{preset}"] = res["runs"]
        summary[f"steps_{preset}"] = res["steps"]
        for fw in FRAMEWORKS:
            s = res[fw]
            summary[f"{fw}_median_s_{preset}"] = round(s["seconds"], 4)
            summary[f"{fw}_gen_s_{preset}"] = round(s["gen_s"], 4)
            summary[f"{fw}_train_s_{preset}"] = round(s["train_s"], 4)
            summary[f"{fw}_alone_median_s_{preset}"] = round(s["separate_s"], 4)
            summary[f"{fw}_peak_rss_mib_{preset}"] = round(s["peak_rss_mib"], 1)
            summary[f"{fw}_setup_rss_mib_{preset}"] = round(s["setup_rss_mib"], 1)
            summary[f"{fw}_final_reward_{preset}"] = round(s["final_reward"], 4)
            summary[f"{fw}_mean_len_{preset}"] = round(s["mean_len"], 2)
        summary[f"trl_generate_s_{preset}"] = round(res["trl"]["generate_s"], 4)
        summary[f"final_reward_deltas_{preset}"] = res["final_reward_deltas"]
        summary[f"last_steps_{preset}"] = res["last"]
        summary[f"prompts_match_{preset}"] = res["ours"]["prompts_match"] and res["trl"]["prompts_match"]
        summary[f"warm_start_greedy_accuracy_{preset}"] = warm[preset].get("greedy_accuracy")
        summary[f"warm_start_pass1_{preset}"] = warm[preset].get("sampled_accuracy")
        for fw in FRAMEWORKS:
            summary[f"{fw}_zero_var_groups_{preset}"] = round(res[fw]["zero_var_groups"], 3)
        summary[f"ours_skipped_rows_frac_{preset}"] = round(res["ours"]["skipped_rows_frac"], 3)
        if "noskip" in res:
            ns = res["noskip"]
            summary[f"step_time_ratio_noskip_{preset}"] = round(ns["step_time_ratio"], 3)
            summary[f"train_time_ratio_noskip_{preset}"] = round(ns["train_time_ratio"], 3)
            for fw in FRAMEWORKS:
                summary[f"{fw}_noskip_median_s_{preset}"] = round(ns[fw]["seconds"], 4)
                summary[f"{fw}_noskip_train_s_{preset}"] = round(ns[fw]["train_s"], 4)
    caps = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
    summary.update(cpu_capability=torch.backends.cpu.get_cpu_capability(),
                   avx512_bf16=bool(caps.get("avx512_bf16", False)), amx_bf16=bool(caps.get("amx_bf16", False)),
                   load_avg_1_5_15=[round(x, 2) for x in os.getloadavg()])
    summary["total_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    main()
