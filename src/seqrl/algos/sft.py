"""Supervised fine-tuning on a task's worked solutions (prompt tokens masked out).

    seqrl train sft --config arith_tiny [--optim.lr=3e-4 ...] [--resume]

The data order is a pure function of (seed, step): batch `s` holds positions s·B … s·B+B−1 of a
per-epoch permutation of the training problems. With optimizer, scheduler and RNG restored from
the checkpoint, a resumed run therefore repeats an uninterrupted one exactly.
"""

from __future__ import annotations

import time

import torch

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig  # noqa: F401 (re-exported)
from seqrl.algos.sft_config import SFTConfig
from seqrl.core.losses import IGNORE_INDEX
from seqrl.evaluation import EvalConfig, run_evaluation  # noqa: F401 (re-exported)
from seqrl.models.lm import ModelConfig, load_policy, num_parameters  # noqa: F401 (re-exported)
from seqrl.prompts import check_template
from seqrl.training.api import RowsTrainer, jsonl_task
from seqrl.training.finetune import accumulate_gradients, collate, encode_examples  # noqa: F401 (re-exported)
from seqrl.training.loop import Cadence, RunLoop
from seqrl.training.run import batch_indices, make_optimizer, releases_run_folder
from seqrl.utils import dist


class SFT:
    """SFT as a run-loop method: one step is a batch of worked solutions (1/world of it on each process),
    the token-mean NLL over the whole batch, one update."""

    def __init__(self, cfg: SFTConfig, loop: RunLoop, policy, task, test_problems, examples) -> None:
        self.cfg, self.loop, self.policy, self.task, self.test_problems = cfg, loop, policy, task, test_problems
        self.examples = examples
        self.micro = cfg.batch_size // cfg.grad_accum // dist.world_size()  # torchrun: 1/world of every batch
        self.live: dict[str, float] = {}  # the bar's loss, every step

    def step(self, i: int, log: bool) -> dict[str, float]:
        cfg, model, tok, device, world = self.cfg, self.policy.model, self.policy.tokenizer, self.loop.device, dist.world_size()
        t0 = time.perf_counter()
        idx = batch_indices(i, cfg.batch_size, len(self.examples), cfg.run.seed)
        share = len(idx) // world
        idx = idx[dist.rank() * share : (dist.rank() + 1) * share]
        chunks = [{k: v.to(device) for k, v in collate([self.examples[j] for j in idx[c : c + self.micro]],
                                                        tok.pad_token_id).items()}
                  for c in range(0, len(idx), self.micro)]
        n_tokens = int(dist.all_reduce_sum(torch.tensor(
            [float(sum(int((c["labels"][:, 1:] != IGNORE_INDEX).sum()) for c in chunks))]))[0])
        loss_sum, n_tokens = accumulate_gradients(model, chunks, cfg.run.use_bf16, device.type, n_tokens)
        if world > 1:
            loss_sum = float(dist.all_reduce_sum(torch.tensor([loss_sum], dtype=torch.float64))[0])
        stepped = self.loop.update(i, loss_sum / max(n_tokens, 1))  # gradients Σ over processes: each loss used
        step_s = time.perf_counter() - t0  # the global token count
        self.live["loss"] = loss_sum / n_tokens
        return {"loss/sft": loss_sum / n_tokens, "stats/grad_norm": stepped.norm, "stats/lr": stepped.lr,
                "perf/step_s": step_s, "perf/tokens_per_s": n_tokens / step_s} if log else {}

    def evaluate(self) -> dict[str, float]:
        out = run_evaluation(self.policy, self.task, self.test_problems, self.cfg.eval, self.cfg.run.seed) \
            if self.loop.main else {}
        dist.barrier()
        self.policy.model.train()
        return out

    def show(self, metrics: dict[str, float]) -> dict[str, float]:
        return {**self.live, **({"acc": metrics["eval/accuracy"]} if "eval/accuracy" in metrics else {})}


@releases_run_folder
def train(cfg: SFTConfig) -> dict[str, float]:
    """Run SFT; returns the final metrics (held-out greedy accuracy among them)."""
    world = dist.world_size()
    if cfg.batch_size % (world * cfg.grad_accum):
        raise ValueError(f"batch_size ({cfg.batch_size}) must be divisible by the processes × grad_accum "
                         f"({world} × {cfg.grad_accum})")
    loop = RunLoop(cfg, "sft")  # seeded the same on every process: identical initial weights
    task = cfg.task.build()
    train_problems = task.problems("train", cfg.task.n_train, cfg.task.seed)
    test_problems = task.problems("test", cfg.task.n_test, cfg.task.seed)
    check_template(cfg.prompt, train_problems + test_problems)
    policy = load_policy(cfg.model, loop.device)
    policy.prompt = cfg.prompt
    examples = encode_examples(policy, train_problems, cfg.target)
    optimizer, scheduler = make_optimizer(policy.model, cfg.optim, cfg.steps)
    loop.resume(policy.model, optimizer, scheduler, policy.tokenizer)
    loop.log_start({"model/parameters": num_parameters(policy.model), "data/train_examples": len(examples)})
    policy.model.train()
    final = loop.run(cfg.steps, SFT(cfg, loop, policy, task, test_problems, examples), Cadence(eval_every=cfg.eval.every))
    loop.plot(["loss/sft", "eval/accuracy", "stats/lr", "stats/grad_norm"], "sft.png", f"SFT {cfg.run.name}")
    return final


class SFTTrainer(RowsTrainer):
    """Supervised fine-tuning called the way TRL's `SFTTrainer` is, on the run loop of ``seqrl train sft``:

        trainer = SFTTrainer(model="smollm2-135m-instruct", args=SFTConfig(output_dir="runs/sft", max_steps=100),
                             train_dataset=rows)
        trainer.train()

    model: a folder, hub id, catalogue name or preset. args: an `SFTConfig` (TRL's names accepted).
    train_dataset, eval_dataset: TRL's prompt–completion rows (``prompt`` + ``completion``, text or
        messages) or conversations (``messages``), as a `datasets.Dataset`, a list of dicts or a file; the
        model learns each row's reply as written (``target: completion``) with the prompt masked out.
        Rows given in memory are written to the run folder's ``data/train.jsonl`` (with a split column for
        eval_dataset) and named by its config.yaml. Without train_dataset: `args.task`'s worked solutions.
    `model` is the trained model after `train`; `save_model` writes it with its tokenizer.
    """

    config_cls = SFTConfig
    data_file = "train.jsonl"
    rows = "TRL's prompt-completion rows or conversations"
    needs_rows = False

    def _run(self) -> dict[str, float]:
        cfg = self.args
        train_dataset, eval_dataset = self._data
        if train_dataset is not None:
            name, kwargs = jsonl_task("SFTTrainer", cfg.run.dir, cfg.run.resume, train_dataset, eval_dataset,
                                      cfg.task.kwargs, ("prompt_field", "answer_field", "test_fraction"))
            cfg.task = TaskConfig(name=name, kwargs=kwargs, n_train=-1, n_test=-1, seed=cfg.task.seed)
            cfg.target = "completion"
        return train(cfg)  # not train_fn: SFT's rows are a task, not a data section
