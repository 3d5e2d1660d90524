"""A trained PRM or ORM (`seqrl train prm|orm`) as a reward function for GRPO.

    rewards: [{name: prm, path: runs/prm_arith_tiny/checkpoint-300, aggregation: min}]

Each completion's step scores (one forward pass per completion, batched) are aggregated into one
reward in [0, 1]. A completion with no steps, or one too long for the reward model's context, scores
0 with the reason; the model never raises on model output.
"""

from __future__ import annotations

from seqrl.core.search import AGGREGATIONS, aggregate_step_scores
from seqrl.models.prm import ProcessRewardModel, StepsTooLongError
from seqrl.types import Problem, RewardResult


class LearnedStepReward:
    """``(problems, completions) -> list[RewardResult]`` from a PRM/ORM checkpoint folder."""

    def __init__(self, path: str, aggregation: str = "min", batch_size: int = 32):
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"reward aggregation must be one of {AGGREGATIONS} (got {aggregation!r})")
        self.prm = ProcessRewardModel.load(path)
        self.aggregation, self.batch_size = aggregation, batch_size
        self.__name__ = self.prm.kind

    def __call__(self, problems: list[Problem], completions: list[str]) -> list[RewardResult]:
        try:
            scores = self.prm.score(problems, completions, self.batch_size)
        except StepsTooLongError:  # find the long ones; the others keep their scores
            scores = []
            for p, c in zip(problems, completions):
                try:
                    scores.append(self.prm.score([p], [c])[0])
                except StepsTooLongError as e:
                    scores.append(e)
        out = []
        for s in scores:
            if isinstance(s, StepsTooLongError):
                out.append(RewardResult(0.0, f"too long for the {self.prm.kind}: {s}"))
            elif not s:
                out.append(RewardResult(0.0, "no steps"))
            else:
                value = aggregate_step_scores(s, self.aggregation)
                out.append(RewardResult(value, f"{self.prm.kind} {self.aggregation} over {len(s)} step(s)"))
        return out
