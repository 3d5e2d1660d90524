"""Generation: batched sampling with a KV cache behind one small interface."""

from seqrl.rollout.engine import Rollouts, SamplingParams, generate
from seqrl.rollout.logprobs import sequence_logprobs

__all__ = ["Rollouts", "SamplingParams", "generate", "sequence_logprobs"]
