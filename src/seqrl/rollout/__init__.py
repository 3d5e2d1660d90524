"""Generation: batched sampling with a KV cache behind one small interface."""

from seqrl.rollout.engine import Rollouts, SamplingParams, generate

__all__ = ["Rollouts", "SamplingParams", "generate"]
