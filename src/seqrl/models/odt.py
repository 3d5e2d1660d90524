"""Online Decision Transformer policy (Zheng et al. 2022): the Decision Transformer body with a
tanh-squashed Gaussian action head.

`OnlineDecisionTransformer` is a `seqrl.models.dt.DecisionTransformer` (same tokens, causal mask,
timestep embedding, state normaliser and return scale) whose deterministic tanh head is replaced by
`SquashedGaussianHead`: from the state-token features it predicts the mean μ and log σ of a diagonal
Gaussian over pre-squash actions, log σ squashed into [log_std_min, log_std_max] (official: [−5, 2]);
the action is c + h·tanh(u) on the action bounds (`seqrl.core.odt`).

* `distribution(...)` → (μ, log σ), what the ODT loss needs;
* ``forward`` / `get_action` → the *mean* action c + h·tanh(μ), deterministic — what evaluation uses
  (paper: evaluation with the mean action), so `seqrl.envs.evaluate.evaluate_policy` and every other
  caller of a Decision Transformer work unchanged;
* inside ``with policy.exploring():`` the same calls return a sample c + h·tanh(μ + σ ε), ε drawn from
  torch's global RNG (restored by checkpoints) — what online rollouts use.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from seqrl.core.odt import LOG_STD_MAX, LOG_STD_MIN, squash_log_std, squashed_gaussian_mean, squashed_gaussian_sample
from seqrl.models.dt import DecisionTransformer

__all__ = ["OnlineDecisionTransformer", "SquashedGaussianHead"]


class SquashedGaussianHead(nn.Module):
    """features h (…, d) → μ (…, A), log σ (…, A) with log σ in [log_std_min, log_std_max]."""

    def __init__(self, d: int, action_dim: int, log_std_min: float = LOG_STD_MIN,
                 log_std_max: float = LOG_STD_MAX) -> None:
        super().__init__()
        if not log_std_min < log_std_max:
            raise ValueError(f"SquashedGaussianHead: log_std_min must be < log_std_max "
                             f"(got {log_std_min}, {log_std_max})")
        self.log_std_min, self.log_std_max = float(log_std_min), float(log_std_max)
        self.mu = nn.Linear(d, action_dim)
        self.log_std = nn.Linear(d, action_dim)

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu = self.mu(h)  # (…, A)
        log_std = squash_log_std(self.log_std(h), self.log_std_min, self.log_std_max)  # (…, A)
        return mu, log_std


class OnlineDecisionTransformer(DecisionTransformer):
    """A Decision Transformer with a tanh-squashed Gaussian head (continuous actions only).

    Arguments as `DecisionTransformer` (``action_head`` must be "tanh", the default), plus
    log_std_min / log_std_max: the bounds of log σ (official: −5, 2).
    """

    def __init__(self, state_dim: int, action_dim: int, *, log_std_min: float = LOG_STD_MIN,
                 log_std_max: float = LOG_STD_MAX, **kwargs) -> None:
        if kwargs.get("action_head", "tanh") != "tanh":
            raise ValueError(f"OnlineDecisionTransformer: continuous actions only (action_head 'tanh'; got "
                             f"{kwargs['action_head']!r}); the Online DT's policy is a squashed Gaussian")
        super().__init__(state_dim, action_dim, **kwargs)
        self.head = SquashedGaussianHead(self.embed_state.out_features, action_dim, log_std_min, log_std_max)
        self.head.apply(self._init_weights)
        self.kwargs.update(log_std_min=float(log_std_min), log_std_max=float(log_std_max))
        self.explore = False

    def distribution(self, returns: torch.Tensor, states: torch.Tensor, actions: torch.Tensor,
                     timesteps: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """(μ, log σ) of the pre-squash Gaussian at every step: (B, K, A) each. Inputs as `forward`."""
        return self.head(self.encode(returns, states, actions, timesteps, attention_mask))

    def forward(self, returns: torch.Tensor, states: torch.Tensor, actions: torch.Tensor,
                timesteps: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Actions in [low, high] at every step (B, K, A): the mean c + h·tanh(μ), or a sample while
        `exploring`. Inputs as `DecisionTransformer.forward`."""
        mu, log_std = self.distribution(returns, states, actions, timesteps, attention_mask)  # (B, K, A) each
        if not self.explore:
            return squashed_gaussian_mean(mu, self.action_low, self.action_high)  # (B, K, A)
        noise = torch.randn_like(mu)  # (B, K, A)
        return squashed_gaussian_sample(mu, log_std, noise, self.action_low, self.action_high)[0]  # (B, K, A)

    @contextmanager
    def exploring(self) -> Iterator[OnlineDecisionTransformer]:
        """Within the block, `forward` and `get_action` sample actions instead of returning the mean."""
        previous, self.explore = self.explore, True
        try:
            yield self
        finally:
            self.explore = previous
