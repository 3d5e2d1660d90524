#!/usr/bin/env python
"""Reward model: seqrl's `seqrl train rm` (`seqrl.algos.rm.train`) against TRL's `RewardTrainer` on the same work.

    python benchmarks/rm_vs_trl.py --quick      # 2 rounds × 40 steps: 3–8 min at load 6–10 on 2 cores, inputs cached
    python benchmarks/rm_vs_trl.py --model smollm2 --batch-size 8 --steps 10 --repeats 2   # SmolLM2-135M backbone
    python benchmarks/rm_vs_trl.py              # full run: 3 repeats × 150 steps per trainer

Both trainers get the same things:

* the same model and initial weights: the tiny preset after a short SFT on 2-digit addition (the
  warm start of ``grpo_vs_trl.py``, cached under ``runs/bench-cache/``) loaded as
  ``AutoModelForSequenceClassification`` with one label, its fresh ``score`` head drawn once and the
  whole model saved to ``runs/bench-cache/rm-init-tiny``; both trainers load that folder (a checksum
  of the weights at the start of each run is compared);
* the same preference pairs: ``seqrl data preferences`` on that policy (a verified and an unverified
  sample of one prompt, no label noise), split by prompt into train and held-out pairs with seqrl's
  split; the same train pairs in the same order: seqrl's per-epoch permutation for the run seed,
  handed to TRL as its train dataset in that order with ``train_sampling_strategy="sequential"``;
* the same tokens: seqrl scores prompt + completion + EOS; TRL appends the EOS token to each answer
  and tokenizes prompt + answer; the token ids of every train row are checked equal. The character
  tokenizer's pad id (0) is not EOS (1), so transformers' pooling (rightmost non-pad token) and
  seqrl's (last token of the attention mask) read the same position; both right-pad to the longest
  row of the batch (TRL ``pad_to_multiple_of=None``) and score chosen and rejected in one forward;
* the same objective: −log σ(r_c − r_r) + c·mean((r_c + r_r)²) with c = ``--center-coef`` on both
  (TRL's ``center_rewards_coefficient`` defaults to None = off, seqrl's preset arith_tiny_rm uses
  0.01, the value TRL recommends), no margin; TRL's ``max_length`` filter (default 1024 tokens) off
  (``max_length=None``: every pair is shorter than the model's 128-token context, checked by seqrl);
  one gradient check on the first batch from the same weights (relative difference of the two
  gradients, fp32 round-off ≈ 1e-7);
* the same optimisation: ``--batch-size`` pairs per optimizer step in one micro-batch (no gradient
  accumulation), torch AdamW with lr, betas (0.9, 0.95), eps 1e-8, weight decay 0 (seqrl exempts
  embeddings and norms from decay, HF only norms and biases: 0 is the only equal value), constant
  schedule without warm-up, gradient clipping at 1.0;
* fp32 (TRL's ``bf16`` default is on: set off), gradient checkpointing off (TRL's default is on),
  dropout off (TRL ``disable_dropout``; the preset has none), no evaluation or checkpoints during
  training (seqrl writes its one final checkpoint; TRL ``save_strategy="no"``), TRL logging off
  (``logging_strategy="no"``, ``report_to="none"``; seqrl logs every step, which its step times
  include), one process, one torch thread.

Runs: ``--repeats`` rounds, each one seqrl run and one TRL run, each in its own process, the order
alternating between rounds (seqrl, TRL, TRL, seqrl, …); round r uses seed r for both (data order).
Step time is the wall time between the ends of two consecutive optimizer steps, which takes in all
of a trainer's per-step work (batching, padding, forward/backward, clipping, optimizer, its own
bookkeeping and logging): seqrl's from the time stamps of its per-step metric records, TRL's from a
``TrainerCallback.on_step_end``; beside it the process CPU time over the same interval
(``time.process_time``, at seqrl's metric records and at TRL's callback), which the load of other
jobs on a shared machine does not stretch. The first and the last step of each run are not counted (warm-up;
seqrl's last record also holds the held-out evaluation). Per trainer, the median over all counted
steps of all its runs. Peak RSS is each process's ``VmHWM`` at its end (imports, model, data,
training, held-out evaluation; seqrl's run also draws its metrics plot, which imports matplotlib).

Held-out pairwise accuracy: both trained models are scored by the same function
(`seqrl.algos.rm.evaluate_pairs`) on the same held-out pairs; TRL's own ``evaluate()`` accuracy on
them is reported next to it as a cross-check of the pooling. ``rm_pairwise_acc_delta`` is the mean
over rounds of seqrl − TRL (paired: same seed, data and order), with the binomial standard error of
one model's accuracy beside it.

The last printed line is one JSON object: ``rm_step_time_ratio`` (seqrl median s / TRL median s;
< 1: seqrl faster), ``rm_cpu_time_ratio`` (the same for CPU seconds), ``rm_pairwise_acc_delta``,
``rm_peak_rss_ratio``, the raw figures and the machine
(CPU model, ``avx512_bf16`` / ``amx_bf16``, load average). Every step of every run goes to
``runs/bench-cache/rm_vs_trl-runs[-smollm2][-quick].json``.
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
from _machine import machine_info, proc_status_kib, run_event_worker  # noqa: E402 — benchmarks/, the script's own folder

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # runnable from a checkout without installing the package
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

FRAMEWORKS = ("ours", "trl")
SFT_CONFIG = ROOT / "src" / "seqrl" / "configs" / "sft" / "arith_tiny_short.yaml"
SFT_STEPS = 200  # the tiny warm start of grpo_vs_trl.py (same cache folder)
EVENT = "@@rm_vs_trl "  # prefix of the worker's machine-readable stdout lines


# ---------------------------------------------------------------------------------------------
# Arguments


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="2 rounds × 40 steps (≈ 3 min with cached inputs)")
    p.add_argument("--repeats", type=int, default=None, help="rounds of (seqrl, TRL) (default 3; 2 quick)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default 150; 60 quick)")
    p.add_argument("--batch-size", type=int, default=32, help="pairs per optimizer step (one micro-batch)")
    p.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate (constant, no warm-up)")
    p.add_argument("--center-coef", type=float, default=0.01,
                   help="score-centring weight on both (TRL center_rewards_coefficient; 0: off)")
    p.add_argument("--prompts", type=int, default=1500, help="training problems the pairs are sampled from")
    p.add_argument("--heldout-frac", type=float, default=0.2, help="fraction of prompts held out")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (each run)")
    p.add_argument("--shared-prompt-forward", choices=("auto", "on", "off"), default="off",
                   help="seqrl's shared_prompt_forward (on/auto: a pair's shared prompt computed once, the same "
                        "scores up to round-off; off: the padded forward of both sides, TRL's arithmetic)")
    p.add_argument("--model", choices=("tiny", "smollm2"), default="tiny",
                   help="the reward model's backbone: the tiny preset's warm start, or SmolLM2-135M-Instruct as "
                        "`seqrl models get smollm2-135m-instruct` ships it (fresh score head; pad <|endoftext|>, "
                        "not EOS, for both trainers); the pairs are the same texts either way")
    p.add_argument("--cache-dir", default=str(ROOT / "runs" / "bench-cache"), help="warm start, pairs, run details")
    p.add_argument("--retrain", action="store_true", help="build the warm start, pairs and initial RM again")
    p.add_argument("--keep-logs", action="store_true", help="keep each run's stderr (<cache-dir>/rm_vs_trl-logs)")
    # Internal: one run in this process (the parent starts these).
    p.add_argument("--worker", choices=("ours", "trl"), help=argparse.SUPPRESS)
    p.add_argument("--init", help=argparse.SUPPRESS)
    p.add_argument("--pairs", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name, (full, quick) in {"repeats": (3, 2), "steps": (150, 40)}.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if min(args.repeats, args.batch_size, args.threads, args.prompts) < 1:
        p.error("--repeats, --batch-size, --threads and --prompts must be >= 1")
    if args.steps < 4:
        p.error("--steps must be >= 4 (each run's first and last steps are not counted)")
    if not 0 < args.heldout_frac < 1 or args.center_coef < 0:
        p.error("--heldout-frac must be in (0, 1) and --center-coef >= 0")
    return args


# ---------------------------------------------------------------------------------------------
# Worker side: one run in this process


def emit(kind: str, **fields) -> None:
    print(EVENT + json.dumps({"event": kind, **fields}), flush=True)


def weights_checksum(model) -> float:
    import torch

    with torch.no_grad():
        return float(sum(p.double().abs().sum() for p in model.parameters()))


class Data:
    """The preference pairs as seqrl's trainer sees them: split by prompt, encoded, in step order."""

    def __init__(self, args: argparse.Namespace, tokenizer) -> None:
        from seqrl.training.run import batch_indices
        from seqrl.algos.rm import encode_pairs, split_by_prompt
        from seqrl.data.preferences import load_preferences
        from seqrl.prompts import PromptConfig

        prompt = PromptConfig()
        pairs = load_preferences(args.pairs)
        self.train, self.held = split_by_prompt(pairs, args.heldout_frac, tokenizer, prompt)
        self.train_enc = encode_pairs(self.train, tokenizer, prompt, 10**9, False)
        self.held_enc = encode_pairs(self.held, tokenizer, prompt, 10**9, False)
        # The train rows in the order seqrl's trainer draws them for this seed, step by step.
        self.order = [i for step in range(args.steps)
                      for i in batch_indices(step, args.batch_size, len(self.train), args.seed)]


def processed(enc) -> dict:
    """A TRL row already tokenized as seqrl tokenizes it (templated prompt + completion + EOS): a BPE
    tokenizer can merge across the prompt/answer boundary when TRL tokenizes the joined text."""
    return {"chosen_ids": list(enc.chosen), "rejected_ids": list(enc.rejected)}


def trl_trainer(args: argparse.Namespace, model, tokenizer, data: Data, on_step=None):
    """TRL's RewardTrainer with the benchmark's settings on seqrl's train rows in seqrl's order."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import RewardConfig, RewardTrainer

    rows = [processed(data.train_enc[i]) if args.model == "smollm2" else
            {"prompt": data.train[i].prompt, "chosen": data.train[i].chosen, "rejected": data.train[i].rejected}
            for i in data.order]
    out_dir = tempfile.mkdtemp(prefix="rm_vs_trl-")
    config = RewardConfig(
        output_dir=out_dir, seed=args.seed, data_seed=args.seed, use_cpu=True,
        bf16=False, fp16=False, gradient_checkpointing=False, torch_compile=False, disable_dropout=True,
        per_device_train_batch_size=args.batch_size, gradient_accumulation_steps=1, max_steps=args.steps,
        # TRL's evaluate() accuracy is a mean of per-batch means: one batch makes it the plain accuracy
        per_device_eval_batch_size=max(len(data.held), 1),
        train_sampling_strategy="sequential", dataloader_num_workers=0, dataloader_drop_last=False,
        max_length=None, pad_to_multiple_of=None,
        center_rewards_coefficient=args.center_coef if args.center_coef > 0 else None,
        learning_rate=args.lr, optim="adamw_torch", adam_beta1=0.9, adam_beta2=0.95, adam_epsilon=1e-8,
        weight_decay=0.0, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0,
        logging_strategy="no", eval_strategy="no", save_strategy="no", report_to="none", disable_tqdm=True,
    )
    callbacks = []
    if on_step is not None:
        class StepCallback(TrainerCallback):
            def on_step_begin(self, args_, state, control, **kwargs):
                if state.global_step == 0 and on_step.mark is None:
                    on_step.mark, on_step.cpu_mark = time.perf_counter(), time.process_time()

            def on_step_end(self, args_, state, control, **kwargs):
                now, cpu = time.perf_counter(), time.process_time()
                on_step(state.global_step - 1, now - on_step.mark, cpu - on_step.cpu_mark)
                on_step.mark, on_step.cpu_mark = time.perf_counter(), time.process_time()

        on_step.mark = on_step.cpu_mark = None
        callbacks.append(StepCallback())
    trainer = RewardTrainer(model=model, args=config, train_dataset=Dataset.from_list(rows),
                            processing_class=tokenizer, callbacks=callbacks)
    # The same token ids as seqrl's, row by row (TRL adds EOS as text and tokenizes prompt + answer).
    ds = trainer.train_dataset
    ours = [(data.train_enc[i].chosen, data.train_enc[i].rejected) for i in data.order]
    theirs = list(zip(ds["chosen_ids"], ds["rejected_ids"]))
    if len(theirs) != len(ours) or any(list(a) != c or list(b) != r for (c, r), (a, b) in zip(ours, theirs)):
        bad = next((k for k, ((c, r), (a, b)) in enumerate(zip(ours, theirs)) if list(a) != c or list(b) != r), None)
        raise RuntimeError(f"TRL's token ids differ from seqrl's: {len(theirs)} vs {len(ours)} rows, first "
                           f"difference at row {bad}")
    return trainer, out_dir


def worker_ours(args: argparse.Namespace) -> dict:
    """seqrl's trainer end to end (`seqrl.algos.rm.train`), its step times from its metric records."""
    from seqrl.algos.config import OptimConfig, RunConfig
    from seqrl.algos.rm import PreferenceDataConfig, RMConfig, train
    from seqrl.models.lm import ModelConfig
    from seqrl.utils.metrics import MetricsLogger, read_metrics

    out_dir = tempfile.mkdtemp(prefix="rm_vs_trl-")
    cfg = RMConfig(
        run=RunConfig(name="ours", out_dir=out_dir, seed=args.seed, threads=args.threads, bf16=False,
                      progress=False, log_every=1, save_every=0, keep_last=1),
        model=ModelConfig(path=args.init),
        data=PreferenceDataConfig(path=args.pairs, heldout_frac=args.heldout_frac),
        optim=OptimConfig(lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95), warmup_steps=0, schedule="constant",
                          grad_clip=1.0),
        steps=args.steps, batch_size=args.batch_size, micro_batch_size=args.batch_size,
        center_coef=args.center_coef, shared_prompt_forward=args.shared_prompt_forward,
    )
    # The process CPU time at each metric record (seqrl logs every step): the same points as the
    # records' wall-clock stamps, and a measure of work that other jobs' load does not stretch.
    cpu_at: dict[int, float] = {}
    log = MetricsLogger.log

    def log_with_cpu(self, step, metrics):
        cpu_at[step] = time.process_time()
        return log(self, step, metrics)

    MetricsLogger.log = log_with_cpu
    final = train(cfg)
    records = [r for r in read_metrics(Path(out_dir) / "ours" / "metrics.jsonl") if r["step"] >= 1]
    if [r["step"] for r in records] != list(range(1, args.steps + 1)):
        raise RuntimeError("seqrl did not log every step")
    first = min(r["time"] for r in read_metrics(Path(out_dir) / "ours" / "metrics.jsonl"))
    times = [records[0]["time"] - first] + [b["time"] - a["time"] for a, b in zip(records, records[1:])]
    cpu = [cpu_at[s] - cpu_at[s - 1] for s in range(1, args.steps + 1)]
    shutil.rmtree(out_dir, ignore_errors=True)
    for step, seconds in enumerate(times):
        emit("step", step=step, seconds=seconds, cpu_s=cpu[step], inner_s=records[step]["perf/step_s"])
    return {"accuracy": final["eval/pairwise_accuracy"], "margin": final["eval/margin"],
            "heldout_pairs": int(final["eval/pairs"]), "train_loss_last": final["loss/bt"]}


def worker_trl(args: argparse.Namespace) -> dict:
    import torch

    from seqrl.algos.rm import evaluate_pairs
    from seqrl.models.heads import load_scalar_model
    from seqrl.models.lm import ModelConfig

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model, tok = load_scalar_model(ModelConfig(path=args.init))
    checksum = weights_checksum(model)
    data = Data(args, tok)
    trainer, out_dir = trl_trainer(args, model, tok, data, on_step=lambda step, s, c: emit("step", step=step, seconds=s,
                                                                                   cpu_s=c))
    torch.set_num_threads(args.threads)
    trainer.train()
    ev = evaluate_pairs(model, data.held_enc, tok.pad_token_id, args.batch_size, args.center_coef)
    from datasets import Dataset

    held_rows = [processed(e) for e in data.held_enc] if args.model == "smollm2" else \
        [{"prompt": p.prompt, "chosen": p.chosen, "rejected": p.rejected} for p in data.held]
    native = trainer.evaluate(eval_dataset=Dataset.from_list(held_rows))
    shutil.rmtree(out_dir, ignore_errors=True)
    import transformers
    import trl

    opt = trainer.optimizer
    opt = getattr(opt, "optimizer", opt)  # accelerate's wrapper
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()
               if k in ("lr", "betas", "eps", "weight_decay", "foreach", "fused")} for g in opt.param_groups]
    return {"accuracy": ev["eval/pairwise_accuracy"], "margin": ev["eval/margin"], "heldout_pairs": len(data.held_enc),
            "native_eval_accuracy": native.get("eval_accuracy"), "init_checksum": checksum,
            "versions": {"trl": trl.__version__, "transformers": transformers.__version__},
            "optimizer": f"{type(opt).__module__}.{type(opt).__name__}", "optimizer_groups": groups}


def worker_gradcheck(args: argparse.Namespace) -> dict:
    """The first batch of seed 0 through both losses from the same weights: are the gradients equal?"""
    import torch

    from seqrl.algos.rm import pair_scores
    from seqrl.core.preference import bradley_terry_loss
    from seqrl.models.heads import load_scalar_model
    from seqrl.models.lm import ModelConfig

    torch.set_num_threads(args.threads)
    ours, tok = load_scalar_model(ModelConfig(path=args.init))
    other, tok2 = load_scalar_model(ModelConfig(path=args.init))
    data = Data(args, tok)
    ours.train()
    mb = [data.train_enc[i] for i in data.order[:args.batch_size]]
    c, r = pair_scores(ours, mb, tok.pad_token_id)
    loss_ours, _ = bradley_terry_loss(c, r, torch.zeros(len(mb)), args.center_coef)
    loss_ours.backward()
    trainer, out_dir = trl_trainer(args, other, tok2, data)
    other.train()
    batch = next(iter(trainer.get_train_dataloader()))
    loss_trl = trainer.compute_loss(other, dict(batch))
    loss_trl.backward()
    shutil.rmtree(out_dir, ignore_errors=True)
    a = torch.cat([p.grad.flatten() for p in ours.parameters()]).double()
    b = torch.cat([p.grad.flatten() for p in other.parameters()]).double()
    return {"loss_ours": loss_ours.item(), "loss_trl": loss_trl.item(), "grad_norm_ours": float(a.norm()),
            "grad_norm_trl": float(b.norm()), "grad_rel_diff": float((a - b).norm() / b.norm().clamp(min=1e-30))}


def worker_main(args: argparse.Namespace) -> None:
    result: dict = {"loadavg_start": os.getloadavg()[0]}
    if args.worker == "ours":
        result.update(worker_ours(args))
        import torch

        from seqrl.models.heads import load_scalar_model
        from seqrl.models.lm import ModelConfig

        result["init_checksum"] = weights_checksum(load_scalar_model(ModelConfig(path=args.init))[0])
        result["threads"] = torch.get_num_threads()
    else:
        result.update(worker_trl(args))
        import torch

        result["threads"] = torch.get_num_threads()
    result.update(peak_rss_kib=proc_status_kib("VmHWM"), loadavg_end=os.getloadavg()[0])
    emit("result", **result)


# ---------------------------------------------------------------------------------------------
# Parent side: inputs, runs, summary


def prepare_inputs(args: argparse.Namespace, console) -> dict:
    """The warm start (cached SFT), the preference pairs sampled from it and the initial reward model."""
    import torch

    from seqrl.algos.rm import build_preferences, write_jsonl
    from seqrl.algos.sft import SFTConfig
    from seqrl.config import load_config
    from seqrl.data import get_task
    from seqrl.models.heads import load_scalar_model
    from seqrl.models.lm import ModelConfig

    from _warm_start import cached_sft  # benchmarks/, the script's own folder

    cache = Path(args.cache_dir)
    run_dir = cache / f"grpo-warm-tiny-{SFT_STEPS}"

    def config() -> SFTConfig:
        return load_config(SFTConfig, SFT_CONFIG, [
            f"--run.name={run_dir.name}", f"--run.out_dir={run_dir.parent}", "--run.save_every=0",
            "--run.keep_last=1", f"--run.threads={args.threads}", "--run.bf16=false",
            "--model.preset=tiny", f"--steps={SFT_STEPS}", "--eval.every=0",
        ])

    warm = cached_sft(run_dir, SFT_STEPS, config, args.retrain, lambda: console.print(
        f"training the tiny warm start: SFT {SFT_STEPS} steps as {SFT_CONFIG.relative_to(ROOT)} → {run_dir}",
        style="dim"))
    pairs_path = cache / f"rm-prefs-tiny-{args.prompts}.jsonl"
    info: dict = {"warm_start": warm, "pairs": str(pairs_path)}
    if args.retrain or not warm["cached"] or not pairs_path.exists():
        pairs_path.unlink(missing_ok=True)
        console.print(f"sampling preference pairs: {args.prompts} prompts × 4 samples → {pairs_path}", style="dim")
        t0 = time.perf_counter()
        torch.set_num_threads(args.threads)
        rows, stats = build_preferences(warm["checkpoint"], get_task("arith", digits=2), args.prompts, samples=4,
                                        label_noise=0.0, seed=0, temperature=1.0, max_new_tokens=48)
        write_jsonl(rows, pairs_path)
        (cache / f"rm-prefs-tiny-{args.prompts}.stats.json").write_text(json.dumps(
            {**stats, "build_s": round(time.perf_counter() - t0, 1)}))
    info["pair_stats"] = json.loads((cache / f"rm-prefs-tiny-{args.prompts}.stats.json").read_text())
    init_dir = cache / f"rm-init-{args.model}"
    if args.retrain or not warm["cached"] or not (init_dir / "config.json").exists():
        shutil.rmtree(init_dir, ignore_errors=True)
        torch.manual_seed(0)  # the fresh score head
        if args.model == "smollm2":
            from seqrl.models.catalog import fetch

            model, tok = load_scalar_model(ModelConfig(path=str(fetch("smollm2-135m-instruct"))))
            if tok.pad_token_id == tok.eos_token_id:  # pooling at the last non-pad token needs pad != EOS
                tok.pad_token = "<|endoftext|>"
                model.config.pad_token_id = tok.pad_token_id
        else:
            model, tok = load_scalar_model(ModelConfig(path=warm["checkpoint"]))
        model.save_pretrained(init_dir)
        tok.save_pretrained(init_dir)
    info["init"] = str(init_dir)
    return info


def run_worker(kind: str, seed: int, args: argparse.Namespace, inputs: dict, bar, log_dir: Path) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--init", inputs["init"],
           "--pairs", inputs["pairs"], "--seed", str(seed), "--steps", str(args.steps),
           "--batch-size", str(args.batch_size), "--lr", repr(args.lr), "--center-coef", repr(args.center_coef),
           "--heldout-frac", repr(args.heldout_frac), "--threads", str(args.threads),
           "--shared-prompt-forward", args.shared_prompt_forward, "--model", args.model]
    log_path = log_dir / f"{kind}-seed{seed}.log"

    def on_step(event: dict) -> None:
        if kind != "ours":  # seqrl's steps arrive together at the end of its run
            bar.advance(1, run=f"{kind}/{seed}", s=event["seconds"])

    code, steps_out, result, wall = run_event_worker(cmd, EVENT, args.threads, log_path, ROOT, on_step)
    want = args.steps
    if code != 0 or not result or len(steps_out) != want:
        tail = log_path.read_text()[-3000:]
        raise RuntimeError(f"{kind} run (seed {seed}) failed with exit code {code} ({len(steps_out)}/{want} "
                           f"steps); log {log_path}:\n{tail}")
    if kind == "ours":
        bar.advance(len(steps_out), run=f"ours/{seed}")
    return {"kind": kind, "seed": seed, "steps": steps_out, "wall_s": round(wall, 1),
            **{k: v for k, v in result.items() if k != "event"}}


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
    load_start = [round(x, 2) for x in os.getloadavg()]
    console = Console(width=None if sys.stdout.isatty() else 170)
    log_dir = Path(args.cache_dir) / "rm_vs_trl-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    inputs = prepare_inputs(args, console)

    # The objectives are equal: the same gradient on one batch (in this process; the runs have their own).
    grad = worker_gradcheck(argparse.Namespace(**{**vars(args), "init": inputs["init"], "pairs": inputs["pairs"],
                                                   "seed": 0}))
    runs: list[dict] = []
    plan = [(fw, r) for r in range(args.repeats) for fw in (FRAMEWORKS if r % 2 == 0 else FRAMEWORKS[::-1])]
    with progress_bar(len(plan) * args.steps, "RM steps, seqrl vs TRL") as bar:
        for kind, seed in plan:
            runs.append(run_worker(kind, seed, args, inputs, bar, log_dir))
    if not args.keep_logs:
        shutil.rmtree(log_dir, ignore_errors=True)
    tag = ("" if args.model == "tiny" else f"-{args.model}") + ("-quick" if args.quick else "")
    detail = Path(args.cache_dir) / f"rm_vs_trl-runs{tag}.json"
    internal = ("worker", "init", "pairs", "seed")
    detail.write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k not in internal},
                                  "inputs": inputs, "runs": runs}, indent=1))

    res: dict = {}
    for fw in FRAMEWORKS:
        mine = [r for r in runs if r["kind"] == fw]
        counted = [s["seconds"] for r in mine for s in r["steps"][1:-1]]
        res[fw] = {
            "median_s": statistics.median(counted),
            "cpu_median_s": statistics.median(s["cpu_s"] for r in mine for s in r["steps"][1:-1]),
            "run_medians_s": [round(statistics.median(s["seconds"] for s in r["steps"][1:-1]), 4) for r in mine],
            "warmup_s": statistics.median(r["steps"][0]["seconds"] for r in mine),
            "accuracy": statistics.fmean(r["accuracy"] for r in mine),
            "accuracies": [round(r["accuracy"], 4) for r in mine],
            "margin": statistics.fmean(r["margin"] for r in mine),
            "peak_rss_mib": statistics.median(r["peak_rss_kib"] for r in mine) / 1024,
            "peak_rss_runs_mib": [round(r["peak_rss_kib"] / 1024, 1) for r in mine],
            "wall_s": [r["wall_s"] for r in mine],
            "init_checksums": {r["init_checksum"] for r in mine},
        }
        if fw == "ours":
            res[fw]["inner_median_s"] = statistics.median(s["inner_s"] for r in mine for s in r["steps"][1:-1])
        else:
            res[fw]["native_accuracies"] = [round(r["native_eval_accuracy"], 4) for r in mine]
    o, t = res["ours"], res["trl"]
    same_init = len(o["init_checksums"] | t["init_checksums"]) == 1
    deltas = [a - b for a, b in zip(o["accuracies"], t["accuracies"])]
    n_held = runs[0]["heldout_pairs"]
    acc_se = math.sqrt(max(t["accuracy"] * (1 - t["accuracy"]), 1e-12) / n_held)
    trl_info = next(r for r in runs if r["kind"] == "trl")
    load_end = [round(x, 2) for x in os.getloadavg()]

    table = Table(title=f"Reward model, seqrl vs TRL {trl_info['versions']['trl']} RewardTrainer: "
                        f"{args.batch_size} pairs/step, {args.steps} steps, lr {args.lr:g}, center {args.center_coef:g}, "
                        f"fp32, {args.threads} thread(s), {args.repeats} rounds")
    for col in ("trainer", "s/step (median)", "run medians", "first step s", "held-out acc per run", "mean acc",
                "margin", "peak RSS MiB", "run wall s"):
        table.add_column(col, justify="left" if col == "trainer" else "right")
    for fw in FRAMEWORKS:
        s = res[fw]
        table.add_row("seqrl" if fw == "ours" else "TRL", f"{s['median_s']:.4f}", str(s["run_medians_s"]),
                      f"{s['warmup_s']:.3f}", str(s["accuracies"]), f"{s['accuracy']:.4f}", f"{s['margin']:.3f}",
                      f"{s['peak_rss_mib']:.0f}", str(s["wall_s"]))
    console.print(table)
    console.print(f"step time ratio seqrl/TRL {o['median_s'] / t['median_s']:.3f}, process CPU time per step "
                  f"{o['cpu_median_s']:.4f} / {t['cpu_median_s']:.4f} s = {o['cpu_median_s'] / t['cpu_median_s']:.3f} "
                  f"(seqrl's in-step timer: "
                  f"{o['inner_median_s']:.4f} s); held-out accuracy delta seqrl − TRL {statistics.fmean(deltas):+.4f} "
                  f"per round {[round(d, 4) for d in deltas]} ({n_held} held-out pairs, s.e. of one accuracy "
                  f"{acc_se:.3f}); TRL's own evaluate() accuracy {t['native_accuracies']}; same initial weights: "
                  f"{same_init}; gradient check: loss seqrl {grad['loss_ours']:.6f} TRL {grad['loss_trl']:.6f}, "
                  f"relative gradient difference {grad['grad_rel_diff']:.1e}; pairs {inputs['pair_stats']}")
    console.print(f"TRL optimizer: {trl_info['optimizer']} {trl_info['optimizer_groups']}")

    summary = {
        "benchmark": "rm_vs_trl", "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "quick": args.quick,
        "rm_step_time_ratio": round(o["median_s"] / t["median_s"], 3),
        "rm_cpu_time_ratio": round(o["cpu_median_s"] / t["cpu_median_s"], 3),
        "rm_pairwise_acc_delta": round(statistics.fmean(deltas), 4),
        "rm_pairwise_acc_deltas": [round(d, 4) for d in deltas],
        "rm_peak_rss_ratio": round(o["peak_rss_mib"] / t["peak_rss_mib"], 3),
        "ours_median_s": round(o["median_s"], 4), "trl_median_s": round(t["median_s"], 4),
        "ours_inner_median_s": round(o["inner_median_s"], 4),
        "ours_cpu_median_s": round(o["cpu_median_s"], 4), "trl_cpu_median_s": round(t["cpu_median_s"], 4),
        "ours_run_medians_s": o["run_medians_s"], "trl_run_medians_s": t["run_medians_s"],
        "ours_pairwise_acc": round(o["accuracy"], 4), "trl_pairwise_acc": round(t["accuracy"], 4),
        "trl_native_eval_acc": t["native_accuracies"], "acc_se": round(acc_se, 4),
        "ours_peak_rss_mib": round(o["peak_rss_mib"], 1), "trl_peak_rss_mib": round(t["peak_rss_mib"], 1),
        "same_init_weights": same_init, "grad_rel_diff": float(f"{grad['grad_rel_diff']:.2e}"),
        "heldout_pairs": n_held, "train_pairs": int(inputs["pair_stats"]["pairs"]) - n_held,
        "repeats": args.repeats, "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
        "center_coef": args.center_coef, "threads": args.threads, "shared_prompt_forward": args.shared_prompt_forward,
        "model": args.model,
        "trl_version": trl_info["versions"]["trl"], "transformers_version": trl_info["versions"]["transformers"],
        "torch_version": torch.__version__,
        **machine_info(), "load_avg_start_1_5_15": load_start, "load_avg_end_1_5_15": load_end,
        "total_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    main()
