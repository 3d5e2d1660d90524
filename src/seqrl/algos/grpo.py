"""The GRPO family in one loop: GRPO, Dr. GRPO, DAPO, GSPO and RLOO are settings of this file.

    seqrl train grpo --config arith_tiny_grpo [--loss.beta=0.04 ...] [--resume]

One step:
  1. draw `batch_size / group_size` prompts and sample G completions each (`seqrl.rollout`);
     with DAPO dynamic sampling, groups whose rewards are all equal are dropped and more prompts
     are drawn until the batch is full (or `dapo.max_sampling_rounds` is reached);
  2. score every completion with the weighted reward functions (a function that raises or returns
     NaN gives that completion 0 with the reason, counted in `reward/<fn>/errors`; one past its
     reward's time limit or the batch's `reward_budget_s` gets 0, counted in `reward/<fn>/timeouts`);
  3. advantages per group (`seqrl.core.advantages`);
  4. μ = `num_iterations` passes over the batch, each split into `minibatches` optimizer steps,
     each accumulated over micro-batches with the batch's global normalisers, so the gradient does
     not depend on the micro-batch size (`seqrl.core.policy_loss.grpo_loss`).

Old log-probs (π_old). π_old is the policy that sampled the batch. With one update per step (μ = 1,
one minibatch) the batch is used right after sampling, π_old = π_θ, and `logp.detach()` is it: the
ratio is exactly 1 and its gradient is the policy gradient. When the weights change within the step
(μ > 1 or `minibatches` > 1) every minibatch after the first sees an updated policy, so π_old is
recomputed once before the first update with a no-grad forward of the trainer itself (same
precision, same code path, eval mode: no dropout noise) — the first minibatch's ratio is exactly 1
and later ones measure how far the policy moved, which is what clipping bounds. The sampler's own
log-probs are not used as π_old: a different kernel, batch shape or precision makes them differ
slightly, and that difference would be clipped as if the policy had moved. Their mean absolute gap
to the trainer's on the same weights (before the step's first update) is logged as
`stats/sampler_logprob_gap`, so a mismatch is visible. π_ref is likewise computed in eval mode.
Log-probs are those of the sampling distribution, log_softmax(logits / temperature).
"""

from __future__ import annotations

import copy
import sys
import time
from typing import Any
from dataclasses import dataclass, field

import torch

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.grpo_config import VERIFIER_KEYS, VERIFIER_REWARDS, DAPOConfig, GRPOConfig, LossConfig, SamplingConfig
from seqrl.core.advantages import (
    group_advantages,
    reinforce_pp_advantages,
    reinforce_pp_token_advantages,
    rloo_advantages,
    zero_variance_groups,
)
from seqrl.core.policy_loss import grpo_loss
from seqrl.core.shaping import soft_overlong_penalty
from seqrl.evaluation import EvalConfig  # noqa: F401 (re-exported)
from seqrl.models.lm import ModelConfig, Policy, num_parameters
from seqrl.models.lora import LoRAConfig, adapter_disabled, apply_lora, is_lora
from seqrl.rewards.combine import RewardFn, RewardSpec, build_rewards  # noqa: F401 (re-export)
from seqrl.training.api import SampledTrainer
from seqrl.training.loop import Cadence, RunLoop
from seqrl.training.sampled import RewardTally, SampledLearner, SampledSteps, WeightedMeans
from seqrl.training.sampled import build_agent_tools, build_sampled_run, check_rewards_given
from seqrl.training.run import make_optimizer, releases_run_folder
from seqrl.training.update import OptimGroup
from seqrl.types import Problem, Task
from seqrl.utils import dist


@dataclass
class GRPOBatch:
    """One step's completions, grouped: rows g·G … g·G+G−1 answer the same prompt."""

    prompt_ids: list[list[int]]
    """Per row (N)."""
    completion_ids: torch.Tensor
    """(N, T)"""
    completion_mask: torch.Tensor
    """(N, T) 1 on generated tokens."""
    loss_mask: torch.Tensor
    """(N, T) tokens that carry loss (completion_mask minus truncated rows under overlong filtering)."""
    sampler_logprobs: torch.Tensor
    """(N, T) log-probs reported by the sampler."""
    rewards: torch.Tensor
    """(N,) total reward."""
    advantages: torch.Tensor
    """(N,) one advantage per completion, broadcast over its tokens."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Sampling and reward statistics of the step."""


def _pad_rows(rows: list[torch.Tensor], value: float | int) -> torch.Tensor:
    width = max(int(r.shape[0]) for r in rows)
    out = torch.full((len(rows), width), value, dtype=rows[0].dtype)
    for i, r in enumerate(rows):
        out[i, : r.shape[0]] = r
    return out


class GRPOLearner(SampledLearner):
    """Holds the policy, reference model and optimizer; `collect` samples a batch, `train_step` learns from it."""

    def __init__(self, cfg: GRPOConfig, policy: Policy, task: Task, problems: list[Problem],
                 reward_fns: dict[str, tuple[RewardFn, float]] | None = None, agent=None) -> None:
        super().__init__(cfg, policy, problems, reward_fns if reward_fns is not None else build_rewards(cfg.rewards, task),
                         agent)
        self.task = task
        self.optimizer, self.scheduler = make_optimizer(policy.model, cfg.optim, cfg.steps * cfg.num_iterations * cfg.minibatches,
                                                       updates_per_step=cfg.num_iterations * cfg.minibatches)
        # The reference policy (only when β > 0): a frozen copy, or with LoRA the base model itself
        # (the adapter switched off in `_reference_logprobs`), so no second copy of the weights.
        self.ref = None
        if cfg.loss.beta > 0 and not is_lora(policy.model):
            self.ref = copy.deepcopy(policy.model).eval().requires_grad_(False)

    @property
    def max_completion_tokens(self) -> int:
        """L_max of a sample's trained tokens: ``sampling.max_new_tokens``, or with tools the episode's
        ``agent.max_episode_tokens`` (its policy tokens span several turns)."""
        return self.cfg.agent.max_episode_tokens if self.agent is not None else self.cfg.sampling.max_new_tokens

    # -- sampling -------------------------------------------------------------------------------
    def collect(self, step: int) -> GRPOBatch:
        """Sample and score one batch (with dynamic sampling: only groups with distinct rewards)."""
        cfg, g = self.cfg, self.cfg.group_size
        t0 = time.perf_counter()
        kept: list[dict] = []
        n_groups = n_flat = rounds = generated = 0
        tally = RewardTally(self.reward_fns)
        lengths_all, truncated_all, overlong_all = [], [], []
        agent = WeightedMeans()  # multi-turn episodes: their metrics over the step's rounds
        want = cfg.local_prompts_per_step
        while len(kept) < want and (rounds == 0 or (cfg.dapo.dynamic_sampling and rounds < cfg.dapo.max_sampling_rounds)):
            need = want - len(kept)
            rnd = self.sample(step, need, rounds)
            ro, scored, total, truncated = rnd.rollout, rnd.scored, rnd.total, rnd.cut_off  # (n·G,) each
            rounds += 1
            generated += ro.num_generated_tokens
            lengths = ro.lengths  # (n·G,)
            if cfg.dapo.soft_overlong_cache:
                overlong = soft_overlong_penalty(lengths, self.max_completion_tokens, cfg.dapo.soft_overlong_cache)
                total = total + overlong
                overlong_all.append(overlong)
            tally.add(scored)
            for k, v in rnd.agent.items():
                agent.add(k, v, len(ro.texts))
            if rounds == 1:  # run.log_completions: a sample of the step's first round
                self.keep_samples(rnd, total.tolist())
            lengths_all.append(lengths.float())
            truncated_all.append(truncated.float())
            key = total  # (n·G,)
            verifiers = [(name, w) for name, (_, w) in self.reward_fns.items()
                         if name in VERIFIER_KEYS]
            if cfg.dapo.dynamic_sampling and cfg.dapo.filter_key == "accuracy" and verifiers:
                # (the config requires a verifier reward; only reward_fns replaced in code can lack one)
                key = sum(w * torch.tensor(scored.scores[name], dtype=torch.float32) for name, w in verifiers)  # (n·G,)
            flat = zero_variance_groups(key.view(need, g))  # (n,)
            n_groups += need
            n_flat += int(flat.sum())
            groups = [{
                "prompt": ro.prompt_ids[j],
                "ids": list(ro.completion_ids[j * g : (j + 1) * g]),
                "mask": list(ro.completion_mask[j * g : (j + 1) * g]),
                "lp": list(ro.logprobs[j * g : (j + 1) * g]),
                "reward": total[j * g : (j + 1) * g],
                "truncated": truncated[j * g : (j + 1) * g],
            } for j in range(need)]
            kept += [grp for grp, f in zip(groups, flat.tolist()) if not (cfg.dapo.dynamic_sampling and f)]
        exhausted = not kept
        if exhausted:
            # Every group of every round had equal rewards: train on the last round's groups, whose
            # advantages are all zero (no policy gradient), and say so in stats/sampling_exhausted.
            kept = groups
        n_rows = len(kept) * g
        rewards = torch.cat([k["reward"] for k in kept])  # (N,)
        grouped = rewards.view(len(kept), g)  # (B', G)
        completion_ids = _pad_rows([r for k in kept for r in k["ids"]], self.policy.tokenizer.pad_token_id)  # (N, T)
        mask = _pad_rows([r for k in kept for r in k["mask"]], 0.0)  # (N, T)
        truncated = torch.cat([k["truncated"] for k in kept])  # (N,)
        loss_mask = mask * (~truncated).float()[:, None] if cfg.dapo.mask_truncated else mask.clone()  # (N, T)
        token_counts = loss_mask.sum(1).view(len(kept), g)  # (B', G) trained tokens per completion
        global_stats = cfg.loss.advantage == "reinforce_pp" or (cfg.loss.advantage == "grpo" and cfg.loss.scale_rewards == "batch")
        if global_stats and dist.world_size() > 1:
            # batch statistics span every process's groups: compute on all of them, keep this rank's rows
            shares = dist.all_gather_objects(torch.stack([grouped, token_counts]))  # (2, B', G) each
            offset = sum(x.shape[1] for x in shares[: dist.rank()])
            grouped_all, counts_all = torch.cat(shares, dim=1)  # (B_total, G) each
        else:
            offset, grouped_all, counts_all = 0, grouped, token_counts
        if cfg.loss.advantage == "grpo":
            adv = group_advantages(grouped_all, scale=cfg.loss.scale_rewards)  # (B_total, G)
        elif cfg.loss.advantage == "rloo":
            adv = rloo_advantages(grouped_all)  # (B_total, G)
        elif cfg.loss.reinforce_pp_level == "token":
            adv = reinforce_pp_token_advantages(grouped_all, counts_all)  # (B_total, G)
        else:
            adv = reinforce_pp_advantages(grouped_all)  # (B_total, G)
        adv = adv[offset : offset + len(kept)]  # (B', G)
        lengths = torch.cat(lengths_all)
        metrics = {
            "reward/total/mean": float(rewards.mean()),
            "reward/total/std": float(rewards.std()) if n_rows > 1 else 0.0,
            "stats/zero_var_groups": n_flat / max(n_groups, 1),
            "stats/sampling_rounds": float(rounds),
            "stats/groups_kept": 0.0 if exhausted else float(len(kept)),
            "stats/sampling_exhausted": float(exhausted),
            "stats/completion_len_mean": float(lengths.mean()),
            "stats/completion_len_max": float(lengths.max()),
            "stats/truncated_frac": float(torch.cat(truncated_all).mean()),
            "perf/gen_s": time.perf_counter() - t0,
            "perf/gen_tokens": float(generated),
        }
        metrics.update(tally.metrics())
        metrics.update(agent.means())
        if overlong_all:
            metrics["reward/overlong/mean"] = float(torch.cat(overlong_all).mean())
        return GRPOBatch(
            prompt_ids=[k["prompt"] for k in kept for _ in range(g)],
            completion_ids=completion_ids,
            completion_mask=mask,
            loss_mask=loss_mask,
            sampler_logprobs=_pad_rows([r for k in kept for r in k["lp"]], 0.0),
            rewards=rewards,
            advantages=adv.reshape(-1),
            metrics=metrics,
        )

    # -- learning -------------------------------------------------------------------------------
    def _logprobs(self, model, batch: GRPOBatch, rows: torch.Tensor, with_entropy: bool = False):
        return self.token_logprobs(model, [batch.prompt_ids[i] for i in rows.tolist()], batch.completion_ids[rows],
                                   batch.completion_mask[rows], with_entropy)

    def _micro_batches(self, batch: GRPOBatch, rows: torch.Tensor) -> list[torch.Tensor]:
        return self.micro_batches(rows, batch.prompt_ids, batch.completion_mask)

    def _no_grad_logprobs(self, model, batch: GRPOBatch, rows: torch.Tensor | None = None) -> torch.Tensor:
        """log-probs of `rows` (default: all), no graph, eval mode (`eval_rows`); other rows 0."""
        n = batch.completion_ids.shape[0]
        rows = torch.arange(n) if rows is None else rows
        return self.eval_rows(lambda chunk: self._logprobs(model, batch, chunk)[0], model, rows, n, batch.prompt_ids,
                              batch.completion_mask)

    def _reference_logprobs(self, batch: GRPOBatch, rows: torch.Tensor) -> torch.Tensor | None:
        """log π_ref of the batch when β > 0: the frozen copy, or the LoRA base with the adapter off."""
        if self.cfg.loss.beta == 0:
            return None
        if self.ref is not None:
            return self._no_grad_logprobs(self.ref, batch, rows)
        with adapter_disabled(self.policy.model):
            return self._no_grad_logprobs(self.policy.model, batch, rows)

    def active_rows(self, batch: GRPOBatch) -> torch.Tensor:
        """Rows that can change the update: all, unless β = 0 and skip_zero_advantage, when a row
        whose advantage is exactly 0 has loss 0 and gradient 0 (ratio·0, clipped or not) and is skipped."""
        n = len(batch.rewards)
        if not self.cfg.skip_zero_advantage or self.cfg.loss.beta > 0:
            return torch.arange(n)
        return torch.nonzero(batch.advantages != 0).flatten()

    def train_step(self, batch: GRPOBatch) -> dict[str, float]:
        """μ passes of clipped policy-gradient updates on `batch`; returns the step's metrics."""
        cfg, model = self.cfg, self.policy.model
        t0 = time.perf_counter()
        model.train()
        n = len(batch.rewards)
        active = torch.zeros(n, dtype=torch.bool)
        active[self.active_rows(batch)] = True  # (N,)
        rows_needed = torch.nonzero(active).flatten()
        # π_old is the policy that sampled the batch. When the weights change within the step (several
        # passes or several minibatches) it is computed once up front; with a single update it equals
        # the current policy and logp.detach() is it.
        old = self._no_grad_logprobs(model, batch, rows_needed) if cfg.num_iterations > 1 or cfg.minibatches > 1 else None  # (N, T)
        ref = self._reference_logprobs(batch, rows_needed)  # (N, T) or None
        max_tokens = cfg.loss.max_tokens or self.max_completion_tokens
        means = WeightedMeans()
        add = means.add

        def add_sampler_gap(logp: torch.Tensor, rows: torch.Tensor) -> None:
            """|trainer − sampler| log-prob on the sampler's weights (before any update of this step)."""
            full = batch.completion_mask[rows]  # (m, T)
            gap = ((logp - batch.sampler_logprobs[rows]).abs() * full).sum() / full.sum().clamp(min=1)
            add("stats/sampler_logprob_gap", float(gap), float(full.sum()))

        if old is not None and len(rows_needed):
            add_sampler_gap(old[rows_needed], rows_needed)

        gen = torch.Generator().manual_seed(cfg.run.seed + 7919 * int(self.scheduler.last_epoch))
        for _ in range(cfg.num_iterations):
            order = torch.randperm(n, generator=gen) if cfg.minibatches > 1 else torch.arange(n)
            for mb in torch.tensor_split(order, cfg.minibatches):  # exactly `minibatches` parts on every process
                # the normalisers count every row of the minibatch, skipped ones included, on every
                # process (torchrun: the minibatch is the union of each process's share)
                counts = dist.all_reduce_sum(torch.tensor([float(batch.loss_mask[mb].sum()), float(len(mb))],
                                                          dtype=torch.float64))
                num_tokens, num_seqs = float(counts[0].clamp(min=1)), int(counts[1])
                trained = mb[active[mb]]
                mb_loss = 0.0
                for rows in self._micro_batches(batch, trained):
                    logp, entropy = self._logprobs(model, batch, rows, with_entropy=True)  # (m, T)
                    mask = batch.loss_mask[rows]  # (m, T)
                    loss, stats = grpo_loss(
                        logp, old[rows] if old is not None else logp.detach(), batch.advantages[rows], mask,
                        clip_eps_low=cfg.loss.clip_eps_low, clip_eps_high=cfg.loss.clip_eps_high,
                        beta=cfg.loss.beta, ref_logp=ref[rows] if ref is not None else None, kl_kind=cfg.loss.kl_kind,
                        ratio_level=cfg.loss.ratio_level, agg=cfg.loss.agg, max_tokens=max_tokens,
                        num_tokens=num_tokens, num_seqs=num_seqs,
                    )
                    loss.backward()
                    tokens = float(mask.sum())
                    add("loss/policy", loss.item(), 1.0)
                    mb_loss += loss.item()
                    for key, value in stats.items():
                        add(f"stats/{key}", float(value), tokens)
                    full = batch.completion_mask[rows]
                    add("stats/entropy", float((entropy * full).sum() / full.sum().clamp(min=1)), float(full.sum()))
                    if old is None:  # a single update: these log-probs are on the sampler's weights
                        add_sampler_gap(logp.detach(), rows)
                for p in model.parameters():
                    if p.requires_grad and p.grad is None:
                        p.grad = torch.zeros_like(p)  # a fully skipped minibatch still steps (momentum, decay) as before
                mb_loss = float(dist.all_reduce_sum(torch.tensor([mb_loss], dtype=torch.float64))[0])  # every process decides alike
                step = int(self.scheduler.last_epoch) // (cfg.num_iterations * cfg.minibatches)
                # gradients Σ over processes (each loss used the global normalisers), clipped, stepped
                stepped = self.update(step, mb_loss, [OptimGroup("policy", model, self.optimizer, self.scheduler,
                                                                 cfg.optim.grad_clip)])
                add("stats/grad_norm", stepped.norm, 1.0)
                add("stats/lr", stepped.lr, 1.0)
        metrics = means.means()
        # loss/policy: sum over micro-batches is the minibatch loss; report the mean per optimizer step
        metrics["loss/policy"] = means.total("loss/policy") / (cfg.num_iterations * cfg.minibatches)
        metrics["stats/skipped_rows_frac"] = 1.0 - float(active.float().mean())
        metrics["stats/skipped_updates"] = float(self.skipped_updates)
        metrics["perf/train_s"] = time.perf_counter() - t0
        return metrics

    def sync_reference(self) -> None:
        if self.ref is not None:
            self.ref.load_state_dict(self.policy.model.state_dict())



@releases_run_folder
def train(cfg: GRPOConfig, rewards: dict | None = None, policy: Policy | None = None,
          tools: list | None = None, environment_factory: Any = None) -> dict[str, float]:
    """Run GRPO-family training; returns the last logged metrics (held-out accuracy among them).

    rewards: extra reward functions with no import path, ``{"name": fn}`` or ``{"name": (fn, weight)}``
    (seqrl's or TRL's signature, `seqrl.rewards.user`), added to the config's `rewards`.
    policy: a loaded model and tokenizer to train in place instead of loading `cfg.model`.
    tools: functions the policy may call (TRL's ``tools=``), added to the config's ``agent.tools``: with
    any, each sample is a multi-turn episode (`seqrl.agents`), its tool tokens out of the loss.
    environment_factory: TRL's: a class (or factory) whose instance per episode is reset on the row and
    whose public methods are the episode's tools (a dict of them: the rows' ``environment`` column picks
    one); one with ``get_reward`` adds its reward (weight 1). Default: ``agent.env``.

    Under torchrun (`WORLD_SIZE` > 1) every process samples its share of the step's prompts,
    the loss normalisers and the gradients are summed over processes, and rank 0 evaluates, logs
    and writes checkpoints; the model starts identical everywhere (same seed) and stays so.
    """
    cfg.local_prompts_per_step  # noqa: B018 - raises when the prompts do not split over the processes
    agent = build_agent_tools(cfg.agent, tools, environment_factory)  # an environment is checked before the model
    check_rewards_given(cfg, rewards, "GRPOTrainer", agent)
    loop = RunLoop(cfg, "grpo")  # seeded the same on every process: identical initial weights
    main = loop.main
    task, problems, test_problems, reward_fns, policy = build_sampled_run(cfg, loop.device, rewards, policy,
                                                                          agent is not None)
    if cfg.lora.r:
        policy.model = apply_lora(policy.model, cfg.lora)
    trainer = GRPOLearner(cfg, policy, task, problems, reward_fns, agent)
    loop.resume(policy.model, trainer.optimizer, trainer.scheduler, policy.tokenizer)

    def after(i: int, metrics: dict[str, float]) -> None:
        if cfg.loss.ref_sync_every and (i + 1) % cfg.loss.ref_sync_every == 0:
            trainer.sync_reference()

    def on_stop(done: int) -> None:
        if main and trainer.ref is not None and cfg.loss.ref_sync_every and done % cfg.loss.ref_sync_every:
            print(f"note: step {done} is not a reference sync step (loss.ref_sync_every="
                  f"{cfg.loss.ref_sync_every}); a run resumed from it re-syncs the reference there", file=sys.stderr)

    s = cfg.sampling
    same_sampling = (cfg.eval.temperature, cfg.eval.max_new_tokens, s.top_p, s.top_k) == (
        s.temperature, s.max_new_tokens, 1.0, 0)
    # the training reward is the verifier alone, sampled alike: its held-out mean is pass@1, already sampled
    reward = ("pass1" if same_sampling and not cfg.dapo.soft_overlong_cache
              and [(r.name, r.weight) for r in cfg.rewards] == [("task", 1.0)] else "sampled")
    steps = SampledSteps(loop, trainer, task, test_problems, reward, after=after, stopping=on_stop)
    if loop.resume_from is not None:
        if trainer.ref is not None and cfg.loss.ref_sync_every:
            trainer.sync_reference()  # checkpoints fall on sync steps (checked in the config)

    first: dict[str, float] = {}
    if loop.start == 0:
        first = {"model/parameters": float(num_parameters(policy.model)), **steps.evaluate()}
        loop.log_start(first)
    try:
        final = loop.run(cfg.steps, steps, Cadence(eval_every=cfg.eval.every))
    finally:
        if agent is not None:
            agent.close()
    loop.plot(["reward/total/mean", "eval/accuracy", "eval/pass@1", "stats/completion_len_mean", "stats/kl",
               "stats/entropy", "stats/clipfrac_high", "stats/zero_var_groups", "loss/policy"], "grpo.png",
              f"GRPO {cfg.run.name}")
    return {**first, **final}


class GRPOTrainer(SampledTrainer):
    """GRPO called the way TRL's `GRPOTrainer` is, on the same run loop as ``seqrl train grpo``:

        trainer = GRPOTrainer(model="smollm2-135m-instruct", reward_funcs=[reward_len],
                              args=GRPOConfig(output_dir="runs/grpo-len", max_steps=10),
                              train_dataset=dataset)
        trainer.train()

    model: a local folder, a hub id, a catalogue name (``smollm2-135m-instruct``), a preset (``tiny``,
        ``small``: trained from scratch), or a loaded causal LM, trained in place (its tokenizer is
        `processing_class`, else the one saved where the model came from).
    reward_funcs: a function or a list of them (seqrl's or TRL's signature, `seqrl.rewards.user`), or
        strings: an import path ``pkg.module:fn``, else a reward model's folder (`seqrl train rm`), as a
        string is a reward model in TRL. Without it: `args.rewards` (the task's verifier by default).
    args: a `GRPOConfig` (TRL's names accepted: ``GRPOConfig(output_dir=..., learning_rate=...)``).
    train_dataset, eval_dataset: a `datasets.Dataset`, a list of dicts or a local file, in TRL's formats
        (a ``prompt`` column, text or messages; an answer column by name; `seqrl.data.jsonl.JsonlTask`).
        Rows given in memory are written to the run folder's ``data/train.jsonl`` and named in its
        config.yaml, so the folder records what was trained on and ``seqrl train grpo --resume`` can
        continue it. Without eval_dataset ≈ 10% of the prompts are held out by a stable hash (said on
        stderr; ``task.kwargs.test_fraction`` sets the share). Without train_dataset: `args.task`.
    tools: functions the model may call, as TRL's ``tools=`` (type hints and a Google-style docstring):
        each sample is then a multi-turn episode (`args.agent`'s limits; `seqrl.agents`), the tool tokens
        out of the loss.
    environment_factory: as TRL's: a class (or a dict of them, picked by the rows' ``environment``
        column) with one instance per episode, ``reset(**row)`` adding text to the prompt, its public
        methods the tools, an optional ``get_reward()`` (then `reward_funcs` may be left out).

    After `train`, `model` is the trained model (read back from the run's last checkpoint when the
    trainer loaded it) and `save_model` writes it with its tokenizer.
    """

    config_cls = GRPOConfig
    train_fn = train
