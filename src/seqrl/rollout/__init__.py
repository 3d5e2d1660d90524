"""Generation: batched sampling with a KV cache behind one small interface."""

from seqrl.rollout.engine import Rollouts, SamplingParams, generate, sample_solutions
from seqrl.rollout.lean import PrefixCache
from seqrl.rollout.logprobs import sequence_logprobs

__all__ = ["PrefixCache", "Rollouts", "SamplingParams", "generate", "sample_solutions", "sequence_logprobs"]
