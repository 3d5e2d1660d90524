"""Training process (PRM) and outcome (ORM) reward models on step-labelled solutions.

    seqrl train prm --config arith_tiny_prm [--data.path=labels.jsonl] [--resume]
    seqrl train orm --config arith_tiny_prm

Data: a stepwise file (TRL's ``{"prompt", "completions", "labels"}``, e.g. from
``seqrl data prm-labels``) split into train/held-out rows by problem (a seeded permutation of the
distinct prompts: no held-out problem is trained on), or, without a
file, exactly labelled arithmetic solutions from the task's train and test splits: a policy's own
samples with ``data.policy`` (`policy_arith_examples`: a step is good iff it and every step before it
are right), else gold steps with one value moved (`corrupted_arith_examples`).

    seqrl train prm --config arith_tiny_prm --model.path=runs/sft/checkpoint-200 \
        --data.policy=runs/sft/checkpoint-200 --optim.lr=1e-3
 A PRM learns a label at the last token of every step, an ORM one label (the last
step's) at the last step's end; the loss is the (soft-label) cross-entropy `step_label_loss`.
A solution longer than the context loses the steps that do not fit (counted in
``data/dropped_steps``; an ORM drops the whole solution) or, with ``data.overlong: error``, stops.

The data order is a pure function of (seed, step), so a resumed run repeats an uninterrupted one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.prm_config import PRMConfig, PRMDataConfig  # noqa: F401 (re-exported)
from seqrl.core.search import binary_auc, step_label_loss
from seqrl.data.stepwise import (StepExample, corrupted_arith_examples, policy_arith_examples, read_stepwise,
                                 read_stepwise_split)
from seqrl.models.heads import pad_positions
from seqrl.models.lm import ModelConfig, num_parameters
from seqrl.models.prm import ProcessRewardModel, pad_right
from seqrl.rollout import sample_solutions
from seqrl.training.api import RowsTrainer
from seqrl.training.loop import Cadence, RunLoop
from seqrl.training.run import batch_indices, make_optimizer, releases_run_folder
from seqrl.utils.dist import bf16_autocast

IGNORE = -1.0  # target of positions without a label


@dataclass
class Example:
    """One solution laid out for training: token ids, label positions and their targets."""

    ids: list[int]
    ends: list[int]
    labels: list[float]


def encode_examples(prm: ProcessRewardModel, rows: list[StepExample], overlong: str = "drop",
                    where: str = "data") -> tuple[list[Example], int]:
    """Lay out `rows` for `prm`'s kind; returns (examples, steps dropped for the context).

    PRM: a label at each step end; ORM: the last step's label at the last step end. Steps past the
    context are dropped and counted (an ORM drops the whole solution: its label sits at the end), or
    raise `StepsTooLongError`-style ValueErrors naming the row with overlong="error".
    """
    out, dropped = [], 0
    limit = prm.max_seq_len
    prompts: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        if row.prompt not in prompts:
            prompts[row.prompt] = prm.prompt_ids(row.prompt)
        enc = prm.encode(row.prompt, row.completions, prompts[row.prompt])
        fit = sum(e < limit for e in enc.ends)
        if fit < len(enc.ends):
            if overlong == "error":
                raise ValueError(f"{where} row {i + 1}: {len(enc.ids)} tokens with its {len(enc.ends)} steps, more than "
                                 f"the model's context of {limit} (model.max_seq_len; or data.overlong: drop)")
            keep = 0 if prm.kind == "orm" else fit
            dropped += len(enc.ends) - keep
            if keep == 0:
                continue
            enc.ids, enc.ends = enc.ids[: enc.ends[keep - 1] + 1], enc.ends[:keep]
        labels = list(row.labels[: len(enc.ends)])
        if prm.kind == "orm":
            enc.ends, labels = enc.ends[-1:], labels[-1:]
        out.append(Example(enc.ids, enc.ends, labels))
    return out, dropped


def collate(examples: list[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ids and mask, and (B, L) targets: the label at each labelled position, `IGNORE` elsewhere."""
    ids, mask = pad_right([e.ids for e in examples], pad_id)  # (B, L)
    targets = torch.full(ids.shape, IGNORE, dtype=torch.float32)  # (B, L)
    for i, e in enumerate(examples):
        targets[i, e.ends] = torch.tensor(e.labels, dtype=torch.float32)
    return {"input_ids": ids, "attention_mask": mask, "targets": targets}


def batch_loss(prm: ProcessRewardModel, batch: dict[str, torch.Tensor], bf16: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, scores at labelled positions (N,), their targets (N,)) of one collated batch."""
    dev = batch["input_ids"].device
    labelled = (batch["targets"] >= 0).cpu()  # (B, L)
    index, valid = pad_positions([row.nonzero()[:, 0].tolist() for row in labelled])  # (B, P) each, in order
    index, valid = index.to(dev), valid.to(dev)
    with bf16_autocast(dev, bf16):
        logits = prm.logits_at(batch["input_ids"], batch["attention_mask"], index)  # (B, P, C)
    picked, y = logits[valid], batch["targets"].gather(1, index)[valid]  # (N, C), (N,): as logits[labelled]
    return step_label_loss(picked, y, prm.head), prm.probs(picked.detach()), y


@torch.no_grad()
def evaluate_examples(prm: ProcessRewardModel, examples: list[Example], batch_size: int) -> dict[str, float]:
    """Held-out loss, step accuracy (score ≥ ½ vs label ≥ ½) and AUC of the scores against the labels."""
    was_training = prm.model.training
    prm.model.eval()
    dev = next(prm.model.parameters()).device
    pad = prm.tokenizer.pad_token_id or 0
    scores, labels, loss_sum = [], [], 0.0
    for start in range(0, len(examples), batch_size):
        batch = {k: v.to(dev) for k, v in collate(examples[start:start + batch_size], pad).items()}
        loss, p, y = batch_loss(prm, batch)
        loss_sum += float(loss) * len(y)
        scores += p.cpu().tolist()
        labels += (y >= 0.5).cpu().tolist()
    if was_training:
        prm.model.train()
    n = max(len(scores), 1)
    return {"eval/loss": loss_sum / n, "eval/step_accuracy": sum((s >= 0.5) == l for s, l in zip(scores, labels)) / n,
            "eval/auc": binary_auc(scores, labels), "eval/label_balance": sum(labels) / n}


def split_by_prompt(rows: list[StepExample], test_fraction: float, seed: int
                    ) -> tuple[list[StepExample], list[StepExample]]:
    """(train, held-out) rows, held out by problem: a seeded permutation of the distinct prompts, the
    first round(test_fraction · prompts) of them (at least one) held out with every row they have, so
    no held-out problem was seen in training (several labelled solutions per problem is the rule for
    Math-Shepherd labels). Row order is kept within each side."""
    prompts = list(dict.fromkeys(r.prompt for r in rows))
    if len(prompts) < 2:
        return list(rows), []
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(seed)).tolist()
    n_test = min(len(prompts) - 1, max(1, round(test_fraction * len(prompts))))
    held = {prompts[i] for i in order[:n_test]}
    return [r for r in rows if r.prompt not in held], [r for r in rows if r.prompt in held]


def policy_rows(cfg: PRMConfig, task, train: list, test: list, device=None
                ) -> tuple[list[StepExample], list[StepExample]]:
    """(train rows, held-out rows) from `cfg.data.policy`'s own samples, exactly labelled
    (`policy_arith_examples`); a task without exact step truth is a ValueError."""
    if not task.name.startswith("arith") or not all(p.steps for p in train[:10]):
        raise ValueError(f"data.policy: task {cfg.task.name!r} has no exact step truth to label the policy's "
                         "solutions with; label them by rollouts with `seqrl data prm-labels --policy "
                         f"{cfg.data.policy} --task {cfg.task.name} --out labels.jsonl` and pass data.path=labels.jsonl")
    from seqrl.models.lm import load_policy

    d = cfg.data
    policy = load_policy(ModelConfig(path=d.policy), device)
    policy.model.eval()
    args = (d.samples, d.temperature, d.max_new_tokens)
    seed = cfg.task.seed
    rows = [policy_arith_examples(ps, sample_solutions(policy, ps, *args, seed=seed + 10_000 * i,
                                                       progress=cfg.run.progress))
            for i, ps in enumerate((train, test))]
    del policy
    if d.corrupted > 0:
        rows[0] += corrupted_arith_examples(train[: round(d.corrupted * len(train))], seed=seed)
    return rows[0], rows[1]


def load_rows(cfg: PRMConfig, device=None) -> tuple[list[StepExample], list[StepExample], str]:
    """(train rows, held-out rows, where they came from)."""
    if cfg.data.path is not None and cfg.data.split_field:
        train, test = read_stepwise_split(cfg.data.path, cfg.data.split_field)
        if not train or not test:
            raise ValueError(f"data.split_field {cfg.data.split_field!r}: {len(train)} train and {len(test)} test rows "
                             f"in {cfg.data.path}; both are needed")
        return train, test, cfg.data.path
    if cfg.data.path is not None:
        rows = read_stepwise(cfg.data.path)
        train, test = split_by_prompt(rows, cfg.data.test_fraction, cfg.task.seed)
        if not train or not test:
            raise ValueError(f"data.path {cfg.data.path}: {len(rows)} row(s) of {len({r.prompt for r in rows})} "
                             "distinct prompt(s); need at least 2 prompts for a held-out split by problem")
        return train, test, cfg.data.path
    task = cfg.task.build()
    train = task.problems("train", cfg.task.n_train, cfg.task.seed)
    test = task.problems("test", cfg.task.n_test, cfg.task.seed)
    if cfg.data.policy is not None:
        train_rows, test_rows = policy_rows(cfg, task, train, test, device)
        return train_rows, test_rows, f"task {cfg.task.name} sampled by {cfg.data.policy}"
    if not all(p.steps for p in train[:10]):
        raise ValueError(f"task {cfg.task.name!r} has no worked steps; give data.path (a stepwise file)")
    return (corrupted_arith_examples(train, seed=cfg.task.seed),
            corrupted_arith_examples(test, seed=cfg.task.seed + 1), f"task {cfg.task.name}")


class StepScoring:
    """The PRM (or ORM) as a run-loop method: one step is a batch of solutions, the loss at their step
    boundaries (the last one for an ORM), one update; the evaluation is held-out AUC and step accuracy."""

    def __init__(self, cfg: PRMConfig, loop: RunLoop, prm: ProcessRewardModel, examples, test_examples, source: str):
        self.cfg, self.loop, self.prm, self.examples, self.test_examples = cfg, loop, prm, examples, test_examples
        self.source = source
        self.live: dict[str, float] = {}  # the bar's loss, every step

    def step(self, i: int, log: bool) -> dict[str, float]:
        cfg, prm = self.cfg, self.prm
        t0 = time.perf_counter()
        idx = batch_indices(i, cfg.batch_size, len(self.examples), cfg.run.seed)
        batch = {k: v.to(self.loop.device)
                 for k, v in collate([self.examples[j] for j in idx], prm.tokenizer.pad_token_id or 0).items()}
        loss, p, y = batch_loss(prm, batch, cfg.run.use_bf16)
        loss.backward()
        loss = float(loss.detach())
        stepped = self.loop.update(i, loss)
        self.live["loss"] = loss
        if not log:
            return {}
        step_s = time.perf_counter() - t0
        return {f"loss/{cfg.kind}": loss, "stats/step_accuracy": float(((p >= 0.5) == (y >= 0.5)).float().mean()),
                "stats/label_balance": float((y >= 0.5).float().mean()), "stats/grad_norm": stepped.norm,
                "stats/lr": stepped.lr, "perf/step_s": step_s,
                "perf/tokens_per_s": float(batch["attention_mask"].sum()) / step_s}

    def evaluate(self) -> dict[str, float]:
        return evaluate_examples(self.prm, self.test_examples, self.cfg.eval.batch_size)

    def state(self) -> dict:
        return {"prm": {"kind": self.cfg.kind, "head": self.cfg.head, "source": self.source}}

    def show(self, m: dict[str, float]) -> dict[str, float]:
        return {**self.live, **({"auc": m["eval/auc"]} if "eval/auc" in m else {})}


@releases_run_folder
def train(cfg: PRMConfig) -> dict[str, float]:
    """Train a PRM or ORM; returns the final metrics (held-out AUC and step accuracy among them)."""
    loop = RunLoop(cfg, cfg.kind, distributed=False)
    device = loop.device

    train_rows, test_rows, source = load_rows(cfg, device)
    prm = ProcessRewardModel.build(cfg.model, cfg.kind, cfg.head, device)
    model, tok = prm.model, prm.tokenizer
    examples, dropped = encode_examples(prm, train_rows, cfg.data.overlong, f"{source} (train)")
    test_examples, test_dropped = encode_examples(prm, test_rows, cfg.data.overlong, f"{source} (held-out)")
    if not examples or not test_examples:
        raise ValueError(f"{source}: no solution fits the context of {prm.max_seq_len} tokens (model.max_seq_len)")
    optimizer, scheduler = make_optimizer(model, cfg.optim, cfg.steps)
    loop.resume(model, optimizer, scheduler, tok)
    labels = [y for e in examples for y in e.labels]
    loop.log_start({"model/parameters": num_parameters(model), "data/train_examples": len(examples),
                    "data/test_examples": len(test_examples), "data/train_steps": len(labels),
                    "data/dropped_steps": dropped + test_dropped,
                    "data/label_balance": sum(y >= 0.5 for y in labels) / len(labels)})
    model.train()
    final = loop.run(cfg.steps, StepScoring(cfg, loop, prm, examples, test_examples, source),
                     Cadence(eval_every=cfg.eval.every))
    name = cfg.kind
    loop.plot([f"loss/{name}", "stats/step_accuracy", "eval/auc", "eval/loss"], f"{name}.png",
              f"{name.upper()} {cfg.run.name}")
    return final


class PRMTrainer(RowsTrainer):
    """A process reward model trained the way TRL's `PRMTrainer` is called, on the run loop of
    ``seqrl train prm``:

        trainer = PRMTrainer(model="runs/sft/checkpoint-200", args=PRMConfig(output_dir="runs/prm", max_steps=300),
                             train_dataset=rows, eval_dataset=held_out_rows)
        trainer.train()

    model: a folder (a policy checkpoint: its backbone and a fresh head), a hub id, a catalogue name or a
        preset. args: a `PRMConfig` (TRL's names accepted; ``kind: orm`` trains an outcome model).
    train_dataset, eval_dataset: TRL's stepwise rows (``prompt``, ``completions``: the steps,
        ``labels``: one per step) as a `datasets.Dataset`, a list of dicts or a file. Rows given in memory
        are written to the run folder's ``data/steps.jsonl`` (with a split column for eval_dataset) and
        named by its config.yaml. Without eval_dataset, ``data.test_fraction`` of the prompts are held out.
    After `train`, `model` is the trained `ProcessRewardModel` (`.score`, `.score_steps`) and
    `save_model` writes it.
    """

    config_cls = PRMConfig
    data_file = "steps.jsonl"
    rows = "TRL's stepwise rows: prompt, completions, labels"
    train_fn = staticmethod(train)

    def _load(self, checkpoint: Path) -> ProcessRewardModel:
        return ProcessRewardModel.load(checkpoint)

    def _model_of(self, trained: ProcessRewardModel) -> ProcessRewardModel:
        return trained

    def _save(self, trained: ProcessRewardModel, out: Path) -> None:
        trained.save(out)
