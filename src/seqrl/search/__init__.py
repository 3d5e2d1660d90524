"""Test-time search with scorers: best-of-N (first, majority, max, weighted), automatic step labels."""

from seqrl.search.best_of_n import (
    SELECT,
    Account,
    BestOfN,
    PolicySampler,
    Sampler,
    Scorer,
    VerifierScorer,
    best_of_n,
    best_of_n_with_prm,
    choose,
)

__all__ = ["SELECT", "Account", "BestOfN", "PolicySampler", "Sampler", "Scorer", "VerifierScorer", "best_of_n",
           "best_of_n_with_prm", "choose"]
