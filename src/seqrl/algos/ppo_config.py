"""`PPOConfig` and its sections, importable without torch (the command line checks a config before it
loads torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from seqrl.algos.config import AgentConfig, OptimConfig, RunConfig, SamplingConfig, TaskConfig, accepts_trl_names
from seqrl.evaluation import EvalConfig
from seqrl.models.config import ModelConfig
from seqrl.prompts import PromptConfig
from seqrl.rewards.combine import RewardSpec, check_reward_keys

__all__ = ["CriticConfig", "PPOConfig", "PPOLossConfig", "SamplingConfig"]


@dataclass
class PPOLossConfig:
    """Rewards with KL, advantage estimator, policy and value losses."""

    advantage: Literal["gae", "group", "gae_then_group"] = "gae"
    """gae: per-token GAE, whitened over the batch; group: the sequence return normalised within the
    prompt's G samples; gae_then_group: GAE, then whitened within the prompt's group (needs G ≥ 2)."""
    gamma: float = 1.0
    """γ, discount over completion tokens."""
    lam: float = 0.95
    """λ, GAE's bias-variance trade-off."""
    whiten: bool = True
    """gae: whiten the advantages over the batch's tokens (masked_whiten)."""
    clip_eps_low: float = 0.2
    """ε_low: ratio floor 1 − ε_low."""
    clip_eps_high: float = 0.2
    """ε_high: ratio ceiling 1 + ε_high."""
    value_clip: float | None = 0.2
    """c of the clipped value loss, V_old ± c (null: plain squared error)."""
    beta: float = 0.05
    """β, KL coefficient against the frozen initial policy (0: no reference model)."""
    kl_in: Literal["reward", "loss"] = "reward"
    """reward: −β·k1 on every token's reward (InstructGPT); loss: β·kl_kind in the policy loss (GRPO)."""
    kl_kind: Literal["k2", "k3", "k3_ratio"] = "k3"
    """The estimator in the loss when kl_in is loss (`seqrl.core.policy_loss.kl_penalty`)."""
    entropy_coef: float = 0.0
    """Entropy bonus: − coef · mean entropy added to the policy loss."""
    agg: Literal["token_mean", "seq_mean_token_mean"] = "token_mean"
    """Loss aggregation over tokens (policy, value and entropy terms)."""

    def __post_init__(self) -> None:
        for name in ("gamma", "lam"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"loss.{name} must be in [0, 1] (got {getattr(self, name)})")
        if not 0 <= self.clip_eps_low < 1 or self.clip_eps_high < 0:
            raise ValueError("loss.clip_eps_low must be in [0, 1) and loss.clip_eps_high >= 0")
        if self.value_clip is not None and self.value_clip <= 0:
            raise ValueError(f"loss.value_clip must be > 0 or null (got {self.value_clip})")
        if self.beta < 0 or self.entropy_coef < 0:
            raise ValueError("loss.beta and loss.entropy_coef must be >= 0")


@dataclass
class CriticConfig:
    """The value model: a separate scalar-head model with its own optimizer."""

    path: str | None = None
    """Start from this folder (a reward model, or any causal LM); null: the policy's model.path, or a
    fresh preset like the policy's."""
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-4, warmup_steps=0, schedule="constant"))
    shared_backbone: bool = False
    """A linear value head on the policy's last hidden states instead of a separate model: one forward
    gives log-probs and values, and vf_coef · value loss also trains the policy's backbone."""
    vf_coef: float = 0.1
    """Weight of the value loss in the shared backbone's loss (shared_backbone only)."""

    def __post_init__(self) -> None:
        if self.shared_backbone and self.path is not None:
            raise ValueError("critic.path must be null with critic.shared_backbone (the head sits on the policy)")
        if self.vf_coef <= 0:
            raise ValueError(f"critic.vf_coef must be > 0 (got {self.vf_coef})")


@accepts_trl_names
@dataclass
class PPOConfig:
    run: RunConfig = field(default_factory=lambda: RunConfig(name="ppo"))
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=3e-5, warmup_steps=0, schedule="constant"))
    critic: CriticConfig = field(default_factory=CriticConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    loss: PPOLossConfig = field(default_factory=PPOLossConfig)
    rewards: list[RewardSpec] = field(default_factory=lambda: [RewardSpec("task", 1.0)])
    """Weighted reward functions; the sequence reward is Σ weight · score."""
    reward_budget_s: float = 300.0
    """Wall-clock budget for scoring one batch."""
    missing_eos_penalty: float | None = None
    """Subtracted from the sequence reward of a completion cut off at ``sampling.max_new_tokens``
    (no EOS), as TRL's ``missing_eos_penalty``: a learned reward model reads a cut-off answer and a
    finished one alike, so without it PPO can learn to stop mid-answer. None: no penalty."""
    reward_failures: Literal["stop", "continue"] = "stop"
    """A user's reward function that fails (raises, returns no number) on every completion of a batch:
    stop (the run ends with one line naming it and its first error) or continue (those completions
    score 0; counted in ``reward/<fn>/errors``). Failures on some completions never stop the run; the
    first message of each step's is logged as ``reward/<fn>/first_error``."""
    steps: int = 50
    """Sampling-and-update steps."""
    batch_size: int = 128
    """Completions per step."""
    group_size: int = 1
    """G: completions per prompt (≥ 2 for the group advantages)."""
    num_iterations: int = 2
    """μ: passes over each batch."""
    minibatches: int = 2
    """Optimizer steps per pass."""
    micro_batch_size: int = 64
    """Completions per forward/backward (memory only)."""
    agent: AgentConfig = field(default_factory=AgentConfig)
    """Multi-turn episodes with tools and environments (`agent.tools`, `agent.env`, or `PPOTrainer(tools=[...],
    environment_factory=...)`); off without either. The critic's values, GAE and the losses read the
    policy's tokens only (a tool turn is not a decision: GAE's next step is the next policy token)."""
    shared_prompt_forward: Literal["auto", "on", "off"] = "auto"
    """The policy's log-probs (π_old, π_ref, and the update when `loss.entropy_coef` = 0 without a
    shared critic backbone) computing each prompt once per micro-batch, with micro-batches packed by
    completion length (`seqrl.rollout.logprobs.shared_prompt_logprobs`: the same loss and gradient,
    tested); auto: where the model supports it, on: that or an error, off: the padded forward. The
    critic's values and the entropy-bonus forward stay padded."""

    def __post_init__(self) -> None:
        for name in ("steps", "num_iterations", "minibatches", "micro_batch_size", "group_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.loss.advantage != "gae" and self.group_size < 2:
            raise ValueError(f"loss.advantage {self.loss.advantage} needs group_size >= 2 (got {self.group_size})")
        if self.batch_size % self.group_size:
            raise ValueError(f"batch_size ({self.batch_size}) must be divisible by group_size ({self.group_size})")
        if self.batch_size % self.minibatches:
            raise ValueError(f"batch_size ({self.batch_size}) must be divisible by minibatches ({self.minibatches})")
        check_reward_keys(self.rewards)  # an empty list is checked by `train`, which may be given functions
        if self.missing_eos_penalty is not None and not (self.missing_eos_penalty >= 0
                                                         and self.missing_eos_penalty < float("inf")):
            raise ValueError(f"missing_eos_penalty must be a finite number >= 0 or null (got {self.missing_eos_penalty})")

    @property
    def local_prompts_per_step(self) -> int:
        from seqrl.utils import dist  # torch: only when a run starts

        prompts, world = self.batch_size // self.group_size, dist.world_size()
        if prompts % world:
            raise ValueError(f"batch_size / group_size = {prompts} prompts per step must be divisible by the "
                             f"number of processes ({world})")
        return prompts // world
