"""The seed's search entry points, as thin wrappers over `best_of_n`, `beam_search` and `mcts` for one
question: ``model`` is a `Policy`, ``reward_model`` / ``prm`` any scorer (e.g. a `ProcessRewardModel`)."""

from __future__ import annotations

from seqrl.models.lm import Policy
from seqrl.search.best_of_n import Scorer, best_of_n
from seqrl.search.mcts import mcts
from seqrl.search.steps import PolicyStepper
from seqrl.search.tree import beam_search
from seqrl.types import Problem


def _problem(question: str | Problem) -> list[Problem]:
    return [question if isinstance(question, Problem) else Problem(question, "")]


class ReasoningSearch:
    """``ReasoningSearch.best_of_n(model, question, n, reward_model)`` → the PRM-weighted pick."""

    @staticmethod
    def best_of_n(model: Policy, question: str | Problem, n: int, reward_model: Scorer) -> str:
        return best_of_n(_problem(question), model, n, scorer=reward_model, select="weighted").chosen[0]


def beam_search_with_prm(model: Policy, question: str | Problem, beam_width: int, max_steps: int, prm: Scorer,
                         n: int | None = None) -> str:
    """Beam search with N = `n` (default 4 · beam_width) beams, width M = `beam_width`."""
    n = n or 4 * beam_width
    return beam_search(_problem(question), PolicyStepper(model), prm, n=n, beam_width=beam_width,
                       max_steps=max_steps).chosen[0]


def monte_carlo_tree_search(model: Policy, question: str | Problem, num_simulations: int, prm: Scorer) -> str:
    """PUCT MCTS valued by the PRM; the pick is the PRM-weighted vote over the finished solutions found."""
    return mcts(_problem(question), PolicyStepper(model), prm, simulations=num_simulations).chosen[0]
