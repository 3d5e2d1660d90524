"""PPO with a critic (RLHF recipe: Ziegler et al. 2019, Ouyang et al. 2022), for any reward: verifiers,
a learned reward model (``rewards: [{name: rm, path: ...}]``) or both.

    seqrl train ppo --config arith_tiny_ppo [--loss.beta=0.05 ...] [--resume]

One step:
  1. draw `batch_size / group_size` prompts and sample G completions each (`seqrl.rollout`; G = 1
     is classic PPO, G > 1 lets the group modes below compare samples of one prompt);
  2. score every completion with the weighted reward functions (`seqrl.rewards`); when the task's
     verifier is not among them it still runs, for the `reward/verifier/mean` metric only, so a
     learned reward's score sits beside true accuracy;
  3. with no gradient and in eval mode: log π_old (the policy that sampled), log π_ref (frozen copy
     of the initial policy, when β > 0) and the critic's values V_t of every completion token;
  4. per-token rewards (`seqrl.core.ppo.kl_shaped_rewards`): −β·(log π_old − log π_ref) on each
     token (k1, InstructGPT) and the sequence reward on the last token (`loss.kl_in: reward`), or the
     score alone with β·KL in the policy loss (`loss.kl_in: loss`, the chosen `kl_kind`);
  5. advantages (`loss.advantage`): gae — GAE(γ, λ) per token, whitened over the batch's tokens;
     group — the sequence return normalised within the prompt's G samples (GRPO's estimator; the
     critic is still trained, for its metrics); gae_then_group — GAE per token, then whitened within
     the prompt's group (the seed's hybrid: it removes the per-prompt offset the critic left, so
     prompts weigh equally, but the token-level credit of GAE survives only up to a per-group scale);
  6. μ = `num_iterations` passes over the batch, each split into `minibatches`: the clipped
     surrogate (+ optional entropy bonus) for the policy and the clipped value loss against the GAE
     returns for the critic, one optimizer step each per minibatch.

π_old is computed before the first update (as the GRPO loop does); with a single update (μ = 1, one
minibatch) the ratio uses `logp.detach()`, so with β = 0 the step is the plain policy gradient.
The critic is a separate model (`AutoModelForSequenceClassification`, one label) started from
`critic.path` (e.g. a reward model) or the policy's own weights; V_t is read at the position that
predicts token t. With `critic.shared_backbone` it is a linear head on the policy's last hidden
states instead, trained with the policy's loss + `critic.vf_coef` · value loss through one forward. Checkpoints: the policy in ``checkpoint-N`` (a Hugging Face causal-LM folder), the
critic in ``critic/checkpoint-N`` (written first), both with their optimizers.
"""

from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.ppo_config import CriticConfig, PPOConfig, PPOLossConfig, SamplingConfig  # noqa: F401 (re-exported)
from seqrl.core.advantages import gae, group_advantages
from seqrl.core.masking import masked_mean, masked_whiten
from seqrl.core.policy_loss import aggregate_loss, grpo_loss
from seqrl.core.ppo import clipped_value_loss, explained_variance, group_whiten_tokens, kl_shaped_rewards
from seqrl.evaluation import EvalConfig  # noqa: F401 (re-exported)
from seqrl.models.heads import ValueHead, completion_values, load_scalar_model, pad_sequences
from seqrl.models.lm import ModelConfig, Policy, model_device, num_parameters
from seqrl.prompts import PromptConfig  # noqa: F401 (re-export)
from seqrl.rewards.combine import (
    RewardFn,
    RewardSpec,
    build_reward,
    build_rewards,
    score_completions,
)
from seqrl.rollout.logprobs import token_logprobs
from seqrl.training.api import SampledTrainer
from seqrl.training.loop import Cadence, RunLoop
from seqrl.training.sampled import RewardTally, SampledLearner, SampledSteps, WeightedMeans
from seqrl.training.sampled import build_agent_tools, build_sampled_run, check_rewards_given
from seqrl.training.run import make_optimizer, releases_run_folder
from seqrl.training.update import OptimGroup
from seqrl.types import Problem, Task
from seqrl.utils import dist
from seqrl.utils.dist import bf16_autocast

VERIFIER_KEYS = ("accuracy", "math", "code")


@dataclass
class PPOBatch:
    """One step's completions (rows g·G … g·G+G−1 answer one prompt) and their PPO targets."""

    prompt_ids: list[list[int]]
    completion_ids: torch.Tensor  # (N, T)
    mask: torch.Tensor  # (N, T) 1 on generated tokens
    old_logp: torch.Tensor  # (N, T) π_old, eval mode, no grad
    ref_logp: torch.Tensor | None  # (N, T) π_ref when β > 0
    values: torch.Tensor  # (N, T) V_old
    advantages: torch.Tensor  # (N, T)
    returns: torch.Tensor  # (N, T) GAE returns, the critic's target
    scores: torch.Tensor  # (N,) sequence reward
    metrics: dict[str, float] = field(default_factory=dict)


def compute_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, mode: str, gamma: float,
                       lam: float, group_size: int, whiten: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) (N, T) from per-token rewards and values (`PPOLossConfig.advantage`); the
    returns are GAE's in every mode (the critic's target). Only the mask's tokens are steps: in a
    multi-turn episode the tool tokens between the policy's turns are skipped (GAE's next step, the
    discount's exponent), their advantage and return 0."""
    adv, returns = gae(rewards, values, mask, gamma, lam)  # (N, T) each
    if mode == "gae":
        return (masked_whiten(adv, mask) if whiten else adv), returns
    if mode == "gae_then_group":
        return group_whiten_tokens(adv, mask, group_size), returns
    steps = (mask.cumsum(1) - 1).clamp(min=0)  # (N, T) each token's index among the policy's tokens
    seq_return = (rewards * gamma ** steps * mask).sum(1)  # (N,) the return from the first token (tool tokens skipped)
    per_seq = group_advantages(seq_return.view(-1, group_size)).reshape(-1)  # (N,)
    return per_seq[:, None] * mask, returns


class PPOLearner(SampledLearner):
    """Policy, critic, reference and optimizers; `collect` samples and scores a batch, `train_step` learns."""

    def __init__(self, cfg: PPOConfig, policy: Policy, critic: torch.nn.Module, task: Task, problems: list[Problem],
                 reward_fns: dict[str, tuple[RewardFn, float]] | None = None, agent=None) -> None:
        super().__init__(cfg, policy, problems, reward_fns if reward_fns is not None else build_rewards(cfg.rewards, task),
                         agent)
        self.critic, self.task = critic, task
        self.verifier = None
        if not any(k in self.reward_fns for k in VERIFIER_KEYS):
            self.verifier = {"verifier": (build_reward(RewardSpec("task"), task), 1.0)}
        updates = cfg.steps * cfg.num_iterations * cfg.minibatches
        per_step = cfg.num_iterations * cfg.minibatches
        self.optimizer, self.scheduler = make_optimizer(policy.model, cfg.optim, updates, updates_per_step=per_step)
        self.critic_optimizer, self.critic_scheduler = make_optimizer(critic, cfg.critic.optim, updates,
                                                                      updates_per_step=per_step)
        self.ref = None
        if cfg.loss.beta > 0:
            self.ref = copy.deepcopy(policy.model).eval().requires_grad_(False)

    # -- sampling -------------------------------------------------------------------------------
    def _logprobs(self, model, prompt_ids: list[list[int]], completion_ids: torch.Tensor, entropy_grad: bool = False,
                  mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(log π of each completion token, entropy there) (m, T); the entropy carries a gradient only
        when `entropy_grad` (the entropy bonus, through `_forward`)."""
        if entropy_grad:
            return self._forward(model, prompt_ids, completion_ids)[:2]
        return self.token_logprobs(model, prompt_ids, completion_ids, mask, with_entropy=True)

    def _forward(self, model, prompt_ids: list[list[int]], completion_ids: torch.Tensor,
                 value_head: torch.nn.Module | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One forward: log π and entropy (both with their graphs) and, with `value_head`, V_t from the
        last hidden states at the positions that predict each completion token; (m, T) each."""
        cfg = self.cfg
        dev = model_device(model)
        t = completion_ids.shape[1]
        seqs = [list(p) + completion_ids[i].tolist() for i, p in enumerate(prompt_ids)]
        ids, attn = pad_sequences(seqs, self.policy.tokenizer.pad_token_id)  # (m, L) right-padded
        with bf16_autocast(dev, cfg.run.use_bf16):
            out = model(input_ids=ids.to(dev), attention_mask=attn.to(dev), output_hidden_states=value_head is not None)
            values = value_head(out.hidden_states[-1]) if value_head is not None else None  # (m, L)
        logits = out.logits  # (m, L, V)
        pos = (torch.tensor([len(p) for p in prompt_ids])[:, None] - 1 + torch.arange(t)[None, :]).to(dev)  # (m, T)
        picked = logits.gather(1, pos[..., None].expand(-1, -1, logits.shape[-1])).float()  # (m, T, V)
        logp, entropy = token_logprobs(picked, completion_ids, cfg.sampling.temperature, True, entropy_grad=True)
        if values is not None:
            values = values.float().gather(1, pos).to(completion_ids.device)  # (m, T)
        return logp, entropy, values

    def _values(self, model, prompt_ids, completion_ids) -> torch.Tensor:
        if self.cfg.critic.shared_backbone:  # the head on the policy's backbone (`model` is the policy)
            return self._forward(self.policy.model, prompt_ids, completion_ids, self.critic)[2]
        return completion_values(model, prompt_ids, completion_ids, self.policy.tokenizer.pad_token_id, self.cfg.run.use_bf16)

    def collect(self, step: int) -> PPOBatch:
        """Sample, score, and compute π_old, π_ref, values, KL-shaped rewards, advantages and returns."""
        cfg, g = self.cfg, self.cfg.group_size
        t0 = time.perf_counter()
        rnd = self.sample(step, cfg.local_prompts_per_step)
        ro, scored, cut_off = rnd.rollout, rnd.scored, rnd.cut_off
        scores = rnd.total  # (N,)
        if cfg.missing_eos_penalty:
            scores = scores - cfg.missing_eos_penalty * cut_off.float()
        gen_s = time.perf_counter() - t0
        prompt_ids = [ro.prompt_ids[i // g] for i in range(len(ro.texts))]
        ids, mask = ro.completion_ids.cpu(), ro.completion_mask.float().cpu()  # (N, T)
        n, every = len(prompt_ids), torch.arange(len(prompt_ids))

        def logp(model):  # no graph, eval mode: π_old and π_ref are fixed targets
            return self.eval_rows(lambda r: self._logprobs(model, [prompt_ids[i] for i in r.tolist()], ids[r],
                                                           mask=mask[r])[0].float(), model, every, n, prompt_ids, mask)

        old = logp(self.policy.model)  # (N, T)
        ref = logp(self.ref) if self.ref is not None else None  # (N, T)
        critic = self.policy.model if cfg.critic.shared_backbone else self.critic  # shared: eval mode is the policy's
        values = self.eval_rows(lambda r: self._values(critic, [prompt_ids[i] for i in r.tolist()], ids[r]).float(),
                                critic, every, n, prompt_ids, mask, packed=False)  # (N, T)
        beta_r = cfg.loss.beta if cfg.loss.kl_in == "reward" else 0.0
        token_rewards, kl = kl_shaped_rewards(scores, old, ref, mask, beta_r)  # (N, T)
        if ref is not None and cfg.loss.kl_in == "loss":
            kl = (old - ref) * mask  # (N, T) k1, for the metric
        adv, returns = compute_advantages(token_rewards, values, mask, cfg.loss.advantage, cfg.loss.gamma,
                                          cfg.loss.lam, g, cfg.loss.whiten)
        metrics = {
            "reward/total/mean": float(scores.mean()),
            "reward/total/std": float(scores.std()) if len(scores) > 1 else 0.0,
            "stats/kl": float(masked_mean(kl, mask)),
            "stats/kl_seq": float((kl * mask).sum(1).mean()),
            "stats/returns_mean": float(masked_mean(returns, mask)),
            "stats/values_mean": float(masked_mean(values, mask)),
            "stats/advantages_mean": float(masked_mean(adv, mask)),
            "stats/completion_len_mean": float(mask.sum(1).mean()),
            "stats/truncated_frac": sum(r == "length" for r in ro.finish_reasons) / len(ro.finish_reasons),
            "stats/sampler_logprob_gap": float(((old - ro.logprobs.cpu()).abs() * mask).sum() / mask.sum().clamp(min=1)),
            "perf/gen_s": gen_s,
            "perf/gen_tokens": float(ro.num_generated_tokens),
        }
        ev = explained_variance(values, returns, mask)
        if ev == ev:  # NaN when the returns do not vary
            metrics["stats/explained_variance"] = float(ev)
        tally = RewardTally(self.reward_fns)
        tally.add(scored)
        metrics.update(tally.metrics())
        metrics.update(rnd.agent)  # multi-turn episodes: turns, calls by tool, errors, ends
        self.keep_samples(rnd, scores.tolist())
        if self.verifier is not None:  # true accuracy beside a learned reward
            v = score_completions(self.verifier, rnd.row_problems, ro.texts, cfg.reward_budget_s).scores["verifier"]
            metrics["reward/verifier/mean"] = sum(x for x in v if x == x) / len(v)
        return PPOBatch(prompt_ids, ids, mask, old, ref, values, adv, returns, scores, metrics)

    # -- learning -------------------------------------------------------------------------------
    def train_step(self, batch: PPOBatch) -> dict[str, float]:
        """μ passes × minibatches of clipped policy and value updates; returns the step's metrics."""
        cfg, model, critic = self.cfg, self.policy.model, self.critic
        t0 = time.perf_counter()
        model.train()
        critic.train()
        n = len(batch.scores)
        single = cfg.num_iterations == 1 and cfg.minibatches == 1
        shared = cfg.critic.shared_backbone
        beta_l = cfg.loss.beta if cfg.loss.kl_in == "loss" else 0.0
        means = WeightedMeans()
        add = means.add

        gen = torch.Generator().manual_seed(cfg.run.seed + 7919 * int(self.scheduler.last_epoch))
        for _ in range(cfg.num_iterations):
            order = torch.randperm(n, generator=gen) if cfg.minibatches > 1 else torch.arange(n)
            for mb in torch.tensor_split(order, cfg.minibatches):
                counts = dist.all_reduce_sum(torch.tensor([float(batch.mask[mb].sum()), float(len(mb))],
                                                          dtype=torch.float64))
                num_tokens, num_seqs = float(counts[0].clamp(min=1)), int(counts[1])
                norm = dict(num_tokens=num_tokens, num_seqs=num_seqs)
                mb_losses = torch.zeros(2, dtype=torch.float64)  # the minibatch's policy and value loss
                for rows in self.micro_batches(mb, batch.prompt_ids, batch.mask):
                    prompts = [batch.prompt_ids[i] for i in rows.tolist()]
                    ids, mask = batch.completion_ids[rows], batch.mask[rows]  # (m, T)
                    if shared:
                        logp, entropy, values = self._forward(model, prompts, ids, critic)
                    else:
                        logp, entropy = self._logprobs(model, prompts, ids, entropy_grad=cfg.loss.entropy_coef > 0,
                                                       mask=mask)
                    old = logp.detach() if single else batch.old_logp[rows]
                    loss, stats = grpo_loss(
                        logp, old, batch.advantages[rows], mask, clip_eps_low=cfg.loss.clip_eps_low,
                        clip_eps_high=cfg.loss.clip_eps_high, beta=beta_l,
                        ref_logp=batch.ref_logp[rows] if batch.ref_logp is not None else None,
                        kl_kind=cfg.loss.kl_kind, agg=cfg.loss.agg, **norm)
                    if cfg.loss.entropy_coef > 0:
                        loss = loss - cfg.loss.entropy_coef * aggregate_loss(entropy, mask, cfg.loss.agg, **norm)
                    if not shared:
                        loss.backward()
                        values = self._values(critic, prompts, ids)  # (m, T)
                    vl, vclip = clipped_value_loss(values, batch.values[rows], batch.returns[rows], mask, cfg.loss.value_clip)
                    vloss = aggregate_loss(vl, mask, cfg.loss.agg, **norm)
                    (loss + cfg.critic.vf_coef * vloss).backward() if shared else vloss.backward()
                    tokens = float(mask.sum())
                    add("loss/policy", loss.item(), 1.0)
                    add("loss/value", vloss.item(), 1.0)
                    mb_losses += torch.tensor([loss.item(), vloss.item()], dtype=torch.float64)
                    for key in ("clipfrac_low", "clipfrac_high", "ratio_mean"):
                        add(f"stats/{key}", float(stats[key]), tokens)
                    add("stats/value_clipfrac", float(vclip), tokens)
                    add("stats/entropy", float(masked_mean(entropy.detach(), mask)), tokens)
                policy_loss, value_loss = (float(x) for x in dist.all_reduce_sum(mb_losses))  # alike everywhere
                step = int(self.scheduler.last_epoch) // (cfg.num_iterations * cfg.minibatches)
                # both networks' gradients Σ over processes and clipped; both step, or (skip_step) neither
                stepped = self.update(step, policy_loss, [
                    OptimGroup("policy", model, self.optimizer, self.scheduler, cfg.optim.grad_clip),
                    OptimGroup("value", critic, self.critic_optimizer, self.critic_scheduler,
                               cfg.critic.optim.grad_clip)], value_loss=value_loss)
                for tag, grad_norm in stepped.norms.items():
                    add(f"stats/grad_norm_{tag}", grad_norm, 1.0)
                add("stats/lr", stepped.lrs["policy"], 1.0)
        metrics = means.means()
        updates = cfg.num_iterations * cfg.minibatches
        metrics["loss/policy"] = means.total("loss/policy") / updates  # summed micro-batches = the minibatch loss
        metrics["loss/value"] = means.total("loss/value") / updates
        metrics["stats/skipped_updates"] = float(self.skipped_updates)
        metrics["perf/train_s"] = time.perf_counter() - t0
        return metrics


def check_same_tokenizer(critic_tok, policy_tok, critic_path: str | None) -> None:
    """The critic reads the policy's token ids, so it must share the policy's vocabulary: a critic.path
    with another tokenizer (a reward model on another backbone) is a ValueError naming it, before any step."""
    if critic_path is None or critic_tok.get_vocab() == policy_tok.get_vocab():
        return
    raise ValueError(f"critic.path {critic_path!r}: its tokenizer is not the policy's ({len(critic_tok)} vs "
                     f"{len(policy_tok)} tokens, or other ids); the critic reads the policy's token ids, so start "
                     f"it from a model with the policy's tokenizer (the policy's checkpoint, or a reward model "
                     f"trained from it)")


def check_critic_start(cfg: PPOConfig, policy_in_memory: bool) -> None:
    """A policy given in memory with no folder leaves the critic nothing to start from: a ValueError
    naming critic.path, unless the critic has its own folder or shares the policy's backbone."""
    if policy_in_memory and not (cfg.critic.path or cfg.critic.shared_backbone or cfg.model.path):
        raise ValueError("critic.path: the policy was given in memory and names no folder, so the critic has no "
                         "weights to start from; give a folder (PPOTrainer(value_model=...)) or set "
                         "critic.shared_backbone=true")


def critic_model_config(cfg: PPOConfig) -> ModelConfig:
    """Where the critic starts: critic.path, else the policy's folder, else the policy's preset."""
    path = cfg.critic.path or cfg.model.path
    return ModelConfig(preset=cfg.model.preset, path=path, arch=cfg.model.arch, max_seq_len=cfg.model.max_seq_len,
                       attn_implementation=cfg.model.attn_implementation)


@releases_run_folder
def train(cfg: PPOConfig, rewards: dict | None = None, policy: Policy | None = None,
          tools: list | None = None, environment_factory: Any = None) -> dict[str, float]:
    """Run PPO; returns the last logged metrics (held-out accuracy among them). torchrun as the GRPO loop:
    each process samples its share of the prompts, gradients are summed, rank 0 evaluates and saves
    (advantage whitening uses each process's own share).

    rewards: extra reward functions with no import path, ``{"name": fn}`` or ``{"name": (fn, weight)}``,
    added to the config's `rewards`. policy: a loaded model and tokenizer to train in place.
    tools, environment_factory: as `seqrl.algos.grpo.train`: each sample a multi-turn episode; the critic's
    values, GAE, the KL and the losses read the policy's tokens only."""
    cfg.local_prompts_per_step  # noqa: B018 - raises when the prompts do not split over the processes
    agent = build_agent_tools(cfg.agent, tools, environment_factory)  # an environment is checked before the model
    check_rewards_given(cfg, rewards, "PPOTrainer", agent)
    check_critic_start(cfg, policy is not None)
    loop = RunLoop(cfg, "ppo")
    device = loop.device
    task, problems, test_problems, reward_fns, policy = build_sampled_run(cfg, device, rewards, policy,
                                                                          agent is not None)
    if cfg.critic.shared_backbone:
        critic = ValueHead(policy.model.config.hidden_size)
    else:
        critic, critic_tok = load_scalar_model(critic_model_config(cfg))
        check_same_tokenizer(critic_tok, policy.tokenizer, cfg.critic.path)
    critic.to(device)
    trainer = PPOLearner(cfg, policy, critic, task, problems, reward_fns, agent)
    loop.add_companion("critic", critic, trainer.critic_optimizer, trainer.critic_scheduler)
    loop.resume(policy.model, trainer.optimizer, trainer.scheduler, policy.tokenizer)
    # the held-out reward on fresh samples, unless the training reward is the verifier alone (eval/pass@1)
    steps = SampledSteps(loop, trainer, task, test_problems,
                         "none" if [(r.name, r.weight) for r in cfg.rewards] == [("task", 1.0)] else "sampled")
    first: dict[str, float] = {}
    if loop.start == 0:
        first = {"model/parameters": float(num_parameters(policy.model)),
                 "model/critic_parameters": float(num_parameters(critic)), **steps.evaluate()}
        loop.log_start(first)
    try:
        final = loop.run(cfg.steps, steps, Cadence(eval_every=cfg.eval.every))
    finally:
        if agent is not None:
            agent.close()
    loop.plot(["reward/total/mean", "reward/verifier/mean", "eval/accuracy", "eval/pass@1", "stats/kl", "loss/value",
               "stats/explained_variance", "stats/clipfrac_high", "stats/entropy"], "ppo.png", f"PPO {cfg.run.name}")
    return {**first, **final}


class PPOTrainer(SampledTrainer):
    """PPO with a critic, called the way TRL's trainers are, on the same run loop as ``seqrl train ppo``:

        trainer = PPOTrainer(model="runs/sft_x/checkpoint-400", reward_funcs=["runs/rm_x/checkpoint-4000"],
                             args=PPOConfig(output_dir="runs/ppo-rm", max_steps=200), train_dataset=rows)
        trainer.train()

    model, reward_funcs, args, train_dataset, eval_dataset, processing_class: as `GRPOTrainer`'s (a
        reward model given as its folder is TRL's ``reward_model``; functions and verifiers mix with it).
    value_model: the critic's starting point, a folder with the policy's tokenizer (TRL's
        ``value_model``; sets ``critic.path``). Default: ``args.critic.path``, else the policy's weights.
    tools, environment_factory: as `GRPOTrainer`'s (TRL's shape): multi-turn episodes, the critic's values and
        GAE over the policy's tokens.
    """

    config_cls = PPOConfig
    train_fn = train

    def __init__(self, model: Any, reward_funcs: Any = None, args: PPOConfig | None = None, train_dataset: Any = None,
                 eval_dataset: Any = None, processing_class: Any = None, value_model: Any = None,
                 tools: Any = None, environment_factory: Any = None) -> None:
        super().__init__(model, reward_funcs, args, train_dataset, eval_dataset, processing_class, tools,
                         environment_factory)
        if value_model is not None:
            if not isinstance(value_model, (str, os.PathLike)):
                raise TypeError(f"PPOTrainer(value_model=...): expected the folder of a model with the policy's "
                                f"tokenizer (got {type(value_model).__name__}); save a loaded one with save_pretrained")
            self.args.critic = replace(self.args.critic, path=os.fspath(value_model))
        check_critic_start(self.args, self._in_memory)
