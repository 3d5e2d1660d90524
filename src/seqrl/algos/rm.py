"""Reward model: a scalar head on a causal LM trained with the Bradley–Terry loss on preference pairs.

    seqrl data preferences --policy runs/sft_arith_tiny_short/checkpoint-200 --task arith --out prefs.jsonl
    seqrl train rm --config arith_tiny_rm [--data.path=prefs.jsonl ...] [--resume]

The model is `AutoModelForSequenceClassification` (one label) started from `model.path` (a policy
checkpoint: its backbone, a fresh head) or a preset; it scores prompt + completion + EOS at the last
real token (`seqrl.models.heads`). Each step takes `batch_size` pairs at consecutive positions of a
per-epoch permutation (a pure function of seed and step, so a resumed run repeats an uninterrupted
one exactly), scores chosen and rejected in one forward per micro-batch and minimises
−log σ(r_c − r_r − margin) + center_coef · (r_c + r_r)² (`seqrl.core.preference`). Pairs are split
into train and held-out *by prompt* (no prompt in both); held-out pairwise accuracy and mean margin
are logged. The checkpoint folder loads back with `AutoModelForSequenceClassification` and works as a
reward anywhere: ``rewards: [{name: rm, path: runs/<name>/checkpoint-N}]``.

The synthetic builder (`build_preferences`) samples a policy on a task's training problems and
pairs, per prompt, a completion the verifier accepts (chosen) with one it rejects; `label_noise`
swaps a pair's sides with that probability, to study how a learned reward is exploited.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.algos.rm_config import PreferenceDataConfig, RMConfig  # noqa: F401 (re-exported)
from seqrl.core.preference import bradley_terry_loss
from seqrl.data.preferences import PreferencePair, load_preferences
from seqrl.models.heads import encode_pair, load_scalar_model, pad_sequences, sequence_scores, shared_prefix_pair_scores
from seqrl.models.lm import ModelConfig, load_pretrained, num_parameters
from seqrl.prompts import PromptConfig, render_prompt
from seqrl.rewards.combine import RewardSpec, build_reward, score_completions
from seqrl.rollout import sample_solutions
from seqrl.rollout.logprobs import use_shared_prompt_forward
from seqrl.training.api import RowsTrainer
from seqrl.training.loop import Cadence, RunLoop
from seqrl.training.run import batch_indices, make_optimizer, releases_run_folder
from seqrl.types import Problem, Task
from seqrl.utils import dist
from seqrl.utils.checkpoint import apply_user_mode
from seqrl.utils.hf import quiet


@dataclass
class EncodedPair:
    chosen: list[int]
    rejected: list[int]
    margin: float


def prompt_text(pair: PreferencePair, tokenizer, prompt: PromptConfig) -> str:
    """A pair's prompt as the model reads it: text as written, messages through the chat template."""
    if isinstance(pair.prompt, str):
        return pair.prompt
    last_user = next((m["content"] for m in reversed(pair.prompt) if m["role"] == "user"), "")
    return render_prompt(tokenizer, Problem(last_user, "", messages=pair.prompt), prompt)


def encode_pairs(pairs: list[PreferencePair], tokenizer, prompt: PromptConfig, max_len: int,
                 use_margin: bool) -> list[EncodedPair]:
    """Token ids of both sides of each pair; a side longer than the context or a missing margin is
    an error naming the row."""
    out = []
    for pair in pairs:
        text = prompt_text(pair, tokenizer, prompt)
        c, r = encode_pair(tokenizer, text, pair.chosen), encode_pair(tokenizer, text, pair.rejected)
        if max(len(c), len(r)) > max_len:
            raise ValueError(f"{pair.where}: {max(len(c), len(r))} tokens, more than the model's context of "
                             f"{max_len} (model.max_seq_len)")
        if use_margin and pair.margin is None:
            raise ValueError(f"{pair.where}: data.use_margin is set but the row has no 'margin' field")
        out.append(EncodedPair(c, r, pair.margin if use_margin else 0.0))
    return out


def split_by_prompt(pairs: list[PreferencePair], heldout_frac: float, tokenizer, prompt: PromptConfig
                    ) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """(train, held-out): a prompt's pairs all land on one side, by a stable hash of its text."""
    train, held = [], []
    for pair in pairs:
        h = int(hashlib.sha256(prompt_text(pair, tokenizer, prompt).encode()).hexdigest()[:8], 16) / 16**8
        (held if h < heldout_frac else train).append(pair)
    if not train or not held:
        raise ValueError(f"data.heldout_frac {heldout_frac} over {len(pairs)} pairs leaves "
                         f"{len(train)} train and {len(held)} held-out; give more pairs (distinct prompts) "
                         f"or another heldout_frac")
    return train, held


def pair_scores(model, pairs: list[EncodedPair], pad_id: int, bf16: bool = False, shared: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(r_chosen, r_rejected) (m,) each, from one forward over the 2m sequences (`shared`: a pair's
    shared start computed once, `shared_prefix_pair_scores`)."""
    if shared:
        return shared_prefix_pair_scores(model, [p.chosen for p in pairs], [p.rejected for p in pairs], pad_id, bf16)
    ids, attn = pad_sequences([p.chosen for p in pairs] + [p.rejected for p in pairs], pad_id)  # (2m, L)
    scores = sequence_scores(model, ids, attn, bf16)  # (2m,)
    return scores[: len(pairs)], scores[len(pairs) :]


@torch.no_grad()
def evaluate_pairs(model, pairs: list[EncodedPair], pad_id: int, batch: int, center_coef: float = 0.0,
                   bf16: bool = False, shared: bool = False) -> dict[str, float]:
    """Held-out pairwise accuracy, mean margin r_c − r_r and BT loss, in eval mode."""
    was = model.training
    model.eval()
    cs, rs = [], []
    for i in range(0, len(pairs), batch):
        c, r = pair_scores(model, pairs[i : i + batch], pad_id, bf16, shared)
        cs.append(c.cpu())
        rs.append(r.cpu())
    model.train(was)
    c, r = torch.cat(cs).double(), torch.cat(rs).double()
    margins = torch.tensor([p.margin for p in pairs], dtype=torch.float64)
    loss, stats = bradley_terry_loss(c, r, margins, center_coef)
    return {"eval/pairwise_accuracy": float(stats["accuracy"]), "eval/margin": float(stats["margin"]),
            "eval/loss": float(loss), "eval/score_mean": float(torch.cat([c, r]).mean()), "eval/pairs": float(len(pairs))}


class RewardModelling:
    """The reward model as a run-loop method: one step is a batch of preference pairs (1/world on each
    process), the Bradley–Terry loss over the batch, one update; the evaluation is held-out pairwise accuracy."""

    def __init__(self, cfg: RMConfig, loop: RunLoop, model, tok, train_enc, held_enc, shared: bool) -> None:
        self.cfg, self.loop, self.model, self.tok = cfg, loop, model, tok
        self.train_enc, self.held_enc, self.shared = train_enc, held_enc, shared
        self.share = cfg.batch_size // dist.world_size()
        self.live: dict[str, float] = {}  # the bar's loss, every step

    def step(self, i: int, log: bool) -> dict[str, float]:
        cfg, bf16 = self.cfg, self.cfg.run.use_bf16
        t0 = time.perf_counter()
        idx = batch_indices(i, cfg.batch_size, len(self.train_enc), cfg.run.seed)
        idx = idx[dist.rank() * self.share : (dist.rank() + 1) * self.share]
        sums = torch.zeros(4, dtype=torch.float64)  # loss, correct, margin, pairs
        for j in range(0, len(idx), cfg.micro_batch_size):
            mb = [self.train_enc[k] for k in idx[j : j + cfg.micro_batch_size]]
            c, r = pair_scores(self.model, mb, self.tok.pad_token_id, bf16, self.shared)
            margins = torch.tensor([p.margin for p in mb], device=c.device)
            loss, stats = bradley_terry_loss(c, r, margins, cfg.center_coef)
            (loss * len(mb) / cfg.batch_size).backward()  # the batch mean, summed over micro-batches and processes
            sums += torch.tensor([loss.item() * len(mb), float(stats["accuracy"]) * len(mb),
                                  float(stats["margin"]) * len(mb), len(mb)], dtype=torch.float64)
        if dist.world_size() > 1:
            sums = dist.all_reduce_sum(sums)
        n = float(sums[3])
        stepped = self.loop.update(i, float(sums[0]) / n)
        self.live["loss"] = float(sums[0]) / n
        if not log:
            return {}
        return {"loss/bt": float(sums[0]) / n, "stats/accuracy": float(sums[1]) / n,
                "stats/margin": float(sums[2]) / n, "stats/grad_norm": stepped.norm, "stats/lr": stepped.lr,
                "perf/step_s": time.perf_counter() - t0}

    def evaluate(self) -> dict[str, float]:
        cfg = self.cfg
        out = evaluate_pairs(self.model, self.held_enc, self.tok.pad_token_id, cfg.micro_batch_size, cfg.center_coef,
                             cfg.run.use_bf16, self.shared) if self.loop.main else {}
        dist.barrier()
        return out

    def show(self, m: dict[str, float]) -> dict[str, float]:
        return {**self.live, **({"acc": m["eval/pairwise_accuracy"]} if "eval/pairwise_accuracy" in m else {})}


@releases_run_folder
def train(cfg: RMConfig) -> dict[str, float]:
    """Train a reward model; returns the final metrics (held-out pairwise accuracy among them)."""
    world = dist.world_size()
    if cfg.batch_size % world:
        raise ValueError(f"batch_size ({cfg.batch_size}) must be divisible by the number of processes ({world})")
    if not cfg.data.path:
        raise ValueError("data.path must name the preference data (TRL format: prompt, chosen, rejected); "
                         "`seqrl data preferences` builds a synthetic set")
    loop = RunLoop(cfg, "rm")
    device = loop.device

    model, tok = load_scalar_model(cfg.model)
    model.to(device).train()
    shared = use_shared_prompt_forward(cfg.shared_prompt_forward, model)
    max_len = int(model.config.max_position_embeddings)
    pairs = load_preferences(cfg.data.path, cfg.data.limit, cfg.data.split_field)
    if cfg.data.split_field:
        train_pairs, held_pairs = [p for p in pairs if p.split == "train"], [p for p in pairs if p.split == "test"]
        if not train_pairs or not held_pairs:
            raise ValueError(f"data.split_field {cfg.data.split_field!r}: {len(train_pairs)} train and {len(held_pairs)} "
                             f"test rows in {cfg.data.path}; both are needed")
    else:
        train_pairs, held_pairs = split_by_prompt(pairs, cfg.data.heldout_frac, tok, cfg.prompt)
    train_enc = encode_pairs(train_pairs, tok, cfg.prompt, max_len, cfg.data.use_margin)
    held_enc = encode_pairs(held_pairs, tok, cfg.prompt, max_len, cfg.data.use_margin)
    optimizer, scheduler = make_optimizer(model, cfg.optim, cfg.steps)

    loop.resume(model, optimizer, scheduler, tok)

    method = RewardModelling(cfg, loop, model, tok, train_enc, held_enc, shared)
    first: dict[str, float] = {}
    if loop.start == 0:
        first = {"model/parameters": float(num_parameters(model)), "data/train_pairs": float(len(train_enc)),
                 "data/heldout_pairs": float(len(held_enc)), **method.evaluate()}
        loop.log_start(first)
    final = loop.run(cfg.steps, method, Cadence(eval_every=cfg.eval.every))
    loop.plot(["loss/bt", "stats/accuracy", "eval/pairwise_accuracy", "eval/margin", "stats/grad_norm"], "rm.png",
              f"RM {cfg.run.name}")
    return {**first, **final}


class RewardTrainer(RowsTrainer):
    """A reward model trained the way TRL's `RewardTrainer` is called, on the run loop of ``seqrl train rm``:

        trainer = RewardTrainer(model="runs/sft/checkpoint-200", args=RMConfig(output_dir="runs/rm", max_steps=300),
                                train_dataset=pairs, eval_dataset=held_out_pairs)
        trainer.train()

    model: a folder (a policy checkpoint: its backbone and a fresh head), a hub id, a catalogue name or a
        preset. args: an `RMConfig` (TRL's names accepted, `center_rewards_coefficient` among them).
    train_dataset, eval_dataset: TRL's preference rows (``prompt``/``chosen``/``rejected``, text or
        messages, or implicit prompts) as a `datasets.Dataset`, a list of dicts or a file. Rows given in
        memory are written to the run folder's ``data/pairs.jsonl`` (with a split column for eval_dataset)
        and named by its config.yaml. Without eval_dataset, ``data.heldout_frac`` of the prompts are
        held out by a stable hash.
    After `train`, `model` is the trained reward model (`AutoModelForSequenceClassification`) and
    `save_model` writes it with its tokenizer.
    """

    config_cls = RMConfig
    data_file = "pairs.jsonl"
    rows = "TRL's preference rows: prompt, chosen, rejected"
    train_fn = staticmethod(train)

    def _load(self, checkpoint: Path):
        return load_scalar_model(ModelConfig(path=str(checkpoint)))  # (model, tokenizer)

    def _model_of(self, trained):
        return trained[0]

    def _save(self, trained, out: Path) -> None:
        model, tok = trained
        with quiet():
            model.save_pretrained(out, safe_serialization=True)
        tok.save_pretrained(out)
        apply_user_mode(out)


def build_preferences(policy_path: str, task: Task, n_prompts: int, samples: int = 4, label_noise: float = 0.0,
                      seed: int = 0, temperature: float = 1.0, max_new_tokens: int = 64,
                      prompt: PromptConfig | None = None, task_seed: int = 0, device: str = "cpu",
                      pairs_per_prompt: int = 1, progress: bool = False) -> tuple[list[dict], dict[str, float]]:
    """Synthetic preference rows from a policy: per training problem, `samples` completions at
    `temperature`, scored by the task's verifier (bounded, `seqrl.rewards`); a prompt with at least
    one accepted (score ≥ 1) and one rejected (score < 1) completion gives up to `pairs_per_prompt`
    pairs {prompt: the rendered prompt text, chosen: accepted, rejected: rejected} (`pair_samples`).
    With probability `label_noise` a pair's sides are swapped (its ``flipped`` column says so).
    Returns (rows, stats)."""
    if samples < 2:
        raise ValueError(f"samples must be >= 2 (got {samples}): a pair needs two completions of one prompt")
    if not 0 <= label_noise <= 1:
        raise ValueError(f"label_noise must be in [0, 1] (got {label_noise})")
    policy = load_pretrained(policy_path)
    policy.model.to(dist.resolve_device(device)).eval()
    policy.prompt = prompt or PromptConfig()
    problems = task.problems("train", n_prompts, task_seed)
    # 128 prompts per call: one call over every prompt held all their sequences at once (12 GB at 8000 × 8)
    texts = [t for group in sample_solutions(policy, problems, samples, temperature, max_new_tokens, seed, progress=progress)
             for t in group]
    verifier = {"accuracy": (build_reward(RewardSpec("task"), task), 1.0)}
    scored = score_completions(verifier, [problems[i // samples] for i in range(len(texts))], texts)
    ok = scored.scores["accuracy"]
    rows = pair_samples([policy.prompt_text(p) for p in problems], [p.uid for p in problems], texts, ok,
                        samples, label_noise, seed, pairs_per_prompt)
    stats = {"prompts": float(len(problems)), "pairs": float(len(rows)),
             "sample_accuracy": sum(s >= 1.0 for s in ok) / max(len(ok), 1),
             "flipped": float(sum(r["flipped"] for r in rows))}
    return rows, stats


def pair_samples(prompts: list[str], uids: list[str], texts: list[str], verdicts: list[float], samples: int,
                 label_noise: float, seed: int, pairs_per_prompt: int = 1) -> list[dict]:
    """Preference rows from `samples` consecutive completions per prompt and their verifier scores:
    the i-th distinct accepted completion (score ≥ 1) is chosen against the i-th distinct rejected one
    (score < 1, or NaN), for i up to `pairs_per_prompt` and the shorter side, so no completion is in
    two rows; a prompt without both gives no row. Each row is swapped with probability `label_noise`
    (seeded)."""
    if len(texts) != len(prompts) * samples or len(verdicts) != len(texts):
        raise ValueError(f"pair_samples: {len(prompts)} prompts × {samples} samples, but {len(texts)} texts "
                         f"and {len(verdicts)} verdicts")
    if pairs_per_prompt < 1:
        raise ValueError(f"pairs_per_prompt must be >= 1 (got {pairs_per_prompt})")
    rng = random.Random(seed)
    rows = []
    for j, (prompt, uid) in enumerate(zip(prompts, uids)):
        group = list(zip(texts[j * samples : (j + 1) * samples], verdicts[j * samples : (j + 1) * samples]))
        good = list(dict.fromkeys(t for t, s in group if s >= 1.0))  # distinct, in sampling order
        bad = list(dict.fromkeys(t for t, s in group if not s >= 1.0))
        for g, b in list(zip(good, bad))[:pairs_per_prompt]:
            flipped = rng.random() < label_noise
            chosen, rejected = (b, g) if flipped else (g, b)
            rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected, "uid": uid, "flipped": flipped})
    return rows


def write_jsonl(rows: list[dict], out: str | Path) -> Path:
    """Rows to a new JSONL file (an existing file is refused, never overwritten)."""
    out = Path(out)
    if out.exists():
        raise ValueError(f"{out} already exists; choose another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return out
