"""The reward result every reward function and task verifier returns."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RewardResult:
    """Score of one completion.

    score:  the reward (1.0 correct / 0.0 wrong for binary verifiers).
    reason: why — always set when the score is not full marks (``"no answer found"``,
            ``"not equal: 3 vs 4"``) so a zero is never silent.
    parts:  named sub-scores for rewards made of several parts.
    """

    score: float
    reason: str = ""
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return self.score >= 1.0
