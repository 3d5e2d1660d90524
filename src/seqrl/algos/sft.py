"""Supervised fine-tuning on a task's worked solutions (prompt tokens masked out).

    seqrl train sft --config arith_tiny [--optim.lr=3e-4 ...] [--resume]

The data order is a pure function of (seed, step): batch `s` holds positions s·B … s·B+B−1 of a
per-epoch permutation of the training problems. With optimizer, scheduler and RNG restored from
the checkpoint, a resumed run therefore repeats an uninterrupted one exactly.
"""

from __future__ import annotations

import time
import torch

from seqrl.algos.common import (
    OptimConfig,
    RunConfig,
    RunGuard,
    TaskConfig,
    batch_indices,
    resume_and_open_log,
    make_optimizer,
    prepare_run_dir,
    releases_run_folder,
    set_threads,
)
from seqrl.algos.sft_config import SFTConfig
from seqrl.core.losses import IGNORE_INDEX
from seqrl.evaluation import EvalConfig, run_evaluation
from seqrl.models.lm import ModelConfig, load_policy, num_parameters
from seqrl.prompts import check_template
from seqrl.training.finetune import accumulate_gradients, collate, encode_examples  # noqa: F401 (re-exported)
from seqrl.utils import dist
from seqrl.utils.checkpoint import latest_checkpoint, save_checkpoint
from seqrl.utils.metrics import read_metrics
from seqrl.utils.plots import plot_metrics
from seqrl.utils.progress import progress_bar
from seqrl.utils.seeding import seed_everything


@releases_run_folder
def train(cfg: SFTConfig) -> dict[str, float]:
    """Run SFT; returns the final metrics (held-out greedy accuracy among them)."""
    device = cfg.run.torch_device
    dist.init_distributed(device)
    main, world = dist.is_main(), dist.world_size()
    if cfg.batch_size % (world * cfg.grad_accum):
        raise ValueError(f"batch_size ({cfg.batch_size}) must be divisible by the processes × grad_accum "
                         f"({world} × {cfg.grad_accum})")
    set_threads(cfg.run.threads)
    seed_everything(cfg.run.seed)  # the same on every process: identical initial weights
    resume_from = prepare_run_dir(cfg.run, cfg) if main else None
    dist.barrier()
    if not main and cfg.run.resume:
        resume_from = latest_checkpoint(cfg.run.dir)
    run_dir = cfg.run.dir
    placement = cfg.run.announce()

    task = cfg.task.build()
    train_problems = task.problems("train", cfg.task.n_train, cfg.task.seed)
    test_problems = task.problems("test", cfg.task.n_test, cfg.task.seed)
    check_template(cfg.prompt, train_problems + test_problems)
    policy = load_policy(cfg.model, device)
    policy.prompt = cfg.prompt
    model, tok = policy.model, policy.tokenizer
    examples = encode_examples(policy, train_problems)
    optimizer, scheduler = make_optimizer(model, cfg.optim, cfg.steps)

    resume_from, state, start, logger = resume_and_open_log(run_dir, resume_from, model, optimizer, scheduler, main)
    if start == 0 and main:
        logger.log(0, {"model/parameters": num_parameters(model), "data/train_examples": len(examples), **placement})

    def run_eval() -> dict[str, float]:
        out = run_evaluation(policy, task, test_problems, cfg.eval, cfg.run.seed) if main else {}
        dist.barrier()
        return out

    def save(step: int) -> None:
        if main:
            save_checkpoint(run_dir, step, model, tok, optimizer, scheduler, keep_last=cfg.run.keep_last,
                            state={"skipped_updates": guard.skipped})
        dist.barrier()

    micro = cfg.batch_size // cfg.grad_accum // world  # torchrun: each process takes 1/world of every batch
    final: dict[str, float] = {}
    model.train()
    guard = RunGuard(cfg.run, model, state.get("skipped_updates", 0))
    with progress_bar(cfg.steps, f"sft {cfg.run.name}", disable=not (cfg.run.progress and main)) as bar, guard:
        bar.advance(start)
        try:
            for step in range(start, cfg.steps):
                t0 = time.perf_counter()
                idx = batch_indices(step, cfg.batch_size, len(examples), cfg.run.seed)
                share = len(idx) // world
                idx = idx[dist.rank() * share : (dist.rank() + 1) * share]
                chunks = [{k: v.to(device) for k, v in collate([examples[i] for i in idx[j : j + micro]],
                                                                tok.pad_token_id).items()}
                          for j in range(0, len(idx), micro)]
                n_tokens = int(dist.all_reduce_sum(torch.tensor(
                    [float(sum(int((c["labels"][:, 1:] != IGNORE_INDEX).sum()) for c in chunks))]))[0])
                loss_sum, n_tokens = accumulate_gradients(model, chunks, cfg.run.use_bf16, device.type, n_tokens)
                if world > 1:
                    dist.all_reduce_grads(model)  # Σ over processes: each loss used the global token count
                    loss_sum = float(dist.all_reduce_sum(torch.tensor([loss_sum], dtype=torch.float64))[0])
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    model.parameters(), cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
                )
                lr = scheduler.get_last_lr()[0]
                if guard.check_finite(step + 1, loss=loss_sum / max(n_tokens, 1), grad_norm=grad_norm):
                    optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                done = step + 1
                step_s = time.perf_counter() - t0
                metrics = {}
                if done % cfg.run.log_every == 0 or done == cfg.steps:
                    metrics = {"loss/sft": loss_sum / n_tokens, "stats/grad_norm": float(grad_norm),
                               "stats/lr": lr, "stats/skipped_updates": guard.skipped, "perf/step_s": step_s,
                               "perf/tokens_per_s": n_tokens / step_s}
                if (cfg.eval.every and done % cfg.eval.every == 0) or done == cfg.steps:
                    metrics.update(run_eval())
                    model.train()
                if metrics:
                    if main:
                        logger.log(done, metrics)
                    final.update(metrics)
                scheduled = (cfg.run.save_every and done % cfg.run.save_every == 0) or done == cfg.steps
                stopping = guard.stop_requested() and done < cfg.steps
                if scheduled or stopping:
                    save(done)
                if stopping:
                    guard.stop(done)
                bar.advance(1, loss=loss_sum / n_tokens, **({"acc": final["eval/accuracy"]} if "eval/accuracy" in final else {}))
        finally:
            if logger is not None:
                logger.close()
    if main:
        plot_metrics(read_metrics(run_dir / "metrics.jsonl"), ["loss/sft", "eval/accuracy", "stats/lr", "stats/grad_norm"],
                     run_dir / "plots" / "sft.png", title=f"SFT {cfg.run.name}")
    return final
