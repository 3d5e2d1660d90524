"""Test-time search with scorers: best-of-N (first, majority, max, weighted), step-level beam search,
DVTS and MCTS (`tree_search`, `mcts`), automatic step labels."""

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
from seqrl.search.mcts import mcts
from seqrl.search.steps import PolicyStepper, Step, Stepper
from seqrl.search.tree import SearchResult, beam_search, dvts, tree_search
from seqrl.search.wrappers import ReasoningSearch, beam_search_with_prm, monte_carlo_tree_search

__all__ = ["SELECT", "Account", "BestOfN", "PolicySampler", "Sampler", "Scorer", "VerifierScorer", "best_of_n",
           "best_of_n_with_prm", "choose", "mcts", "PolicyStepper", "Step", "Stepper", "SearchResult",
           "beam_search", "dvts", "tree_search", "ReasoningSearch", "beam_search_with_prm", "monte_carlo_tree_search"]
