"""`GRPOConfig` and its sections, importable without torch (the command line checks a config before it
loads torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from seqrl.algos.config import AgentConfig, OptimConfig, RunConfig, SamplingConfig, TaskConfig, accepts_trl_names
from seqrl.evaluation import EvalConfig
from seqrl.models.config import LoRAConfig, ModelConfig
from seqrl.prompts import PromptConfig
from seqrl.rewards.combine import RewardSpec, check_reward_keys

__all__ = ["Agg", "DAPOConfig", "GRPOConfig", "LossConfig", "SamplingConfig", "VERIFIER_KEYS", "VERIFIER_REWARDS"]

Agg = Literal["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm", "seq_mean_token_sum"]
"""Loss aggregations (`seqrl.core.policy_loss.AGG_MODES`, the same names; a unit test keeps them equal)."""


VERIFIER_REWARDS = ("task", "math", "code")
"""Rewards that say whether the answer is right (DAPO's dynamic sampling filters on these)."""
VERIFIER_KEYS = ("accuracy", "math", "code")
"""Their metric names (`RewardSpec.key`)."""


@dataclass
class LossConfig:
    """Advantage estimator and policy loss."""

    advantage: Literal["grpo", "rloo", "reinforce_pp"] = "grpo"
    """grpo: group-relative (r − mean_g) / std; rloo: leave-one-out baseline; reinforce_pp: batch-normalised."""
    reinforce_pp_level: Literal["token", "sequence"] = "token"
    """REINFORCE++ whitening over every trained token of the batch, so longer completions weigh more
    (verl, OpenRLHF), or over one reward per completion."""
    scale_rewards: Literal["group", "batch", "none"] = "group"
    """Std used by the grpo advantage: the group's, the batch's, or none (Dr. GRPO)."""
    clip_eps_low: float = 0.2
    """ε_low: ratio floor 1 − ε_low."""
    clip_eps_high: float = 0.2
    """ε_high: ratio ceiling 1 + ε_high (DAPO clip-higher: 0.28)."""
    beta: float = 0.0
    """β: KL coefficient against a frozen reference policy (DeepSeekMath: 0.04); 0 = no reference model."""
    kl_kind: Literal["k1", "k2", "k3", "k3_ratio"] = "k3"
    """KL estimator in the loss (`seqrl.core.policy_loss.kl_penalty`): k3 (GRPO; its gradient is the
    forward KL's, KL(π_ref‖π)), k2 (the reverse KL's gradient), k3_ratio (k3 weighted by π/π_old:
    the reverse KL's gradient, also for off-policy minibatches). k1 has zero expected gradient and is
    refused with β > 0."""
    ratio_level: Literal["token", "sequence"] = "token"
    """Importance ratio per token, or per sequence (π/π_old)^(1/|o|) (GSPO)."""
    agg: Agg = "seq_mean_token_mean"
    """Loss aggregation: GRPO paper, DAPO token-level, Dr. GRPO constant normaliser, plain sum."""
    max_tokens: int = 0
    """Dr. GRPO's constant normaliser (0: sampling.max_new_tokens; with tools agent.max_episode_tokens)."""
    ref_sync_every: int = 0
    """Copy the policy into the reference model every N steps (0: never)."""

    def __post_init__(self) -> None:
        if not 0 <= self.clip_eps_low < 1 or self.clip_eps_high < 0:
            raise ValueError(f"loss.clip_eps_low must be in [0, 1) and loss.clip_eps_high >= 0 "
                             f"(got {self.clip_eps_low}, {self.clip_eps_high})")
        if self.beta < 0:
            raise ValueError(f"loss.beta must be >= 0 (got {self.beta})")
        if self.kl_kind == "k1" and self.beta > 0:
            raise ValueError("loss.kl_kind k1 with loss.beta > 0: k1's expected gradient is zero, so the KL term "
                             "would add noise and no regularisation; use k3 (GRPO), k2 or k3_ratio")
        if self.agg not in get_args(Agg):
            raise ValueError(f"loss.agg must be one of {get_args(Agg)} (got {self.agg!r})")


@dataclass
class DAPOConfig:
    """DAPO's additions (Yu et al. 2025); all off by default."""

    dynamic_sampling: bool = False
    """Drop groups whose rewards are all equal; draw more prompts until the batch is full."""
    max_sampling_rounds: int = 4
    """Cap on sampling rounds per step with dynamic sampling (the batch may stay short; logged)."""
    filter_key: Literal["accuracy", "reward"] = "accuracy"
    """What must vary within a group for dynamic sampling to keep it: accuracy — the verifier rewards
    (task, math, code; weighted) without format shaping or the overlong penalty, as DAPO filters
    (§3.2) — or reward, the total reward with every term."""
    mask_truncated: bool = False
    """Overlong filtering: truncated completions get no loss."""
    soft_overlong_cache: int = 0
    """L_cache of the soft overlong punishment added to the reward (0: off)."""


@accepts_trl_names
@dataclass
class GRPOConfig:
    run: RunConfig = field(default_factory=lambda: RunConfig(name="grpo"))
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-4, warmup_steps=0, schedule="constant"))
    eval: EvalConfig = field(default_factory=EvalConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    """How problems are rendered (system prompt, template, chat template); also for evaluation."""
    loss: LossConfig = field(default_factory=LossConfig)
    dapo: DAPOConfig = field(default_factory=DAPOConfig)
    rewards: list[RewardSpec] = field(default_factory=lambda: [RewardSpec("task", 1.0)])
    """Weighted reward functions; the total reward is Σ weight · score. May be empty when the functions
    are passed in Python (`GRPOTrainer(reward_funcs=...)`, ``train(cfg, rewards=...)``)."""
    reward_budget_s: float = 300.0
    """Wall-clock budget for scoring one batch; completions not scored by then get 0 ("batch budget")."""
    reward_failures: Literal["stop", "continue"] = "stop"
    """A user's reward function that fails (raises, returns no number) on every completion of a batch:
    stop (the run ends with one line naming it and its first error) or continue (those completions
    score 0; counted in ``reward/<fn>/errors``). Failures on some completions never stop the run; the
    first message of each step's is logged as ``reward/<fn>/first_error``."""
    steps: int = 50
    """Sampling-and-update steps."""
    batch_size: int = 128
    """Completions per step (prompts per step = batch_size / group_size)."""
    group_size: int = 8
    """G: completions per prompt."""
    num_iterations: int = 1
    """μ: passes over each batch."""
    minibatches: int = 1
    """Optimizer steps per pass (the batch split into this many minibatches)."""
    micro_batch_size: int = 64
    """Completions per forward/backward (memory only: the gradient does not depend on it)."""
    skip_zero_advantage: bool = True
    """With β = 0, skip the forward/backward of completions whose advantage is exactly 0 (a group
    with equal rewards): their loss and gradient are exactly 0, so the update is unchanged (tested);
    `stats/entropy` and `stats/sampler_logprob_gap` then cover the completions trained on."""
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    """LoRA adapters (`lora.r` > 0) instead of full fine-tuning; needs `model.path` (a trained base)."""
    agent: AgentConfig = field(default_factory=AgentConfig)
    """Multi-turn episodes with tools and environments (`agent.tools`, `agent.env`, or `GRPOTrainer(tools=[...],
    environment_factory=...)`); off without either."""
    shared_prompt_forward: Literal["auto", "on", "off"] = "auto"
    """Training-time log-probs (the update, π_old, π_ref) computing each prompt once per micro-batch,
    its KV cache shared by the group's completions, with micro-batches packed by completion length
    (`seqrl.rollout.logprobs.shared_prompt_logprobs`; the same loss and gradient as the padded
    forward, tested). auto: where the model supports it (a Hugging Face causal LM with a KV cache and
    full attention), else the padded forward with a one-line note; on: that, or an error naming why
    not; off: the padded forward."""

    def __post_init__(self) -> None:
        if self.lora.r and self.model.path is None:
            raise ValueError("lora.r > 0 needs model.path: adapters train on top of a trained base model "
                             "(a preset built from scratch has no saved base weights to reload)")
        if self.lora.r and self.loss.ref_sync_every:
            raise ValueError("loss.ref_sync_every must be 0 with lora: the reference is the frozen base "
                             "(the adapter switched off)")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (got {self.group_size}): a group of one has no baseline")
        if self.batch_size % self.group_size:
            raise ValueError(f"batch_size ({self.batch_size}) must be divisible by group_size ({self.group_size})")
        if self.batch_size % self.minibatches:
            raise ValueError(f"batch_size ({self.batch_size}) must be divisible by minibatches ({self.minibatches})")
        for name in ("steps", "num_iterations", "minibatches", "micro_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")
        check_reward_keys(self.rewards)  # an empty list is checked by `train`, which may be given functions
        if self.loss.ref_sync_every and self.run.save_every and self.run.save_every % self.loss.ref_sync_every:
            raise ValueError(f"run.save_every ({self.run.save_every}) must be a multiple of loss.ref_sync_every "
                             f"({self.loss.ref_sync_every}) so a checkpoint holds the reference policy too")
        if (self.dapo.dynamic_sampling and self.dapo.filter_key == "accuracy"
                and not any(spec.name in VERIFIER_REWARDS for spec in self.rewards)):
            raise ValueError(f"dapo.filter_key accuracy needs a verifier reward ({', '.join(VERIFIER_REWARDS)}) in "
                             f"rewards; add one or set dapo.filter_key=reward")
        if self.dapo.soft_overlong_cache > self.sampling.max_new_tokens:
            raise ValueError("dapo.soft_overlong_cache must be <= sampling.max_new_tokens")

    @property
    def prompts_per_step(self) -> int:
        """Prompts per step over all processes."""
        return self.batch_size // self.group_size

    @property
    def local_prompts_per_step(self) -> int:
        """Prompts per step of this process (torchrun: the step's prompts split evenly over processes)."""
        from seqrl.utils import dist

        world = dist.world_size()
        if self.prompts_per_step % world:
            raise ValueError(f"batch_size / group_size = {self.prompts_per_step} prompts per step must be "
                             f"divisible by the number of processes ({world})")
        return self.prompts_per_step // world
