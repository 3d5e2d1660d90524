"""Generation: batched sampling with a KV cache behind one small interface."""

from seqrl.rollout.engine import Rollouts, SamplingParams, generate, sample_solutions
from seqrl.rollout.logprobs import sequence_logprobs

__all__ = ["Rollouts", "SamplingParams", "generate", "sample_solutions", "sequence_logprobs"]
