import pytest

from seqrl.core.metrics import majority_vote, pass_at_k
from seqrl.evaluation import parse_metrics


def test_pass_at_k_matches_enumeration():
    # n=5, c=2, k=2: subsets of 2 among 5 = 10; subsets with no correct = C(3,2) = 3 -> 7/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7, abs=1e-12)
    # k=1 is the plain fraction correct
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8, abs=1e-12)


@pytest.mark.parametrize("n,c,k", [(4, 5, 1), (4, 1, 0), (4, 1, 5), (3, -1, 1)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_majority_vote_ignores_missing_answers_and_breaks_ties_by_first_seen():
    assert majority_vote([None, "7", "8", "8", "7", None]) == ("7", 2)
    assert majority_vote(["5", None, None]) == ("5", 1)


@pytest.mark.parametrize("spec", ["pass@0", "top1", "maj@", "greedy,pass@x"])
def test_parse_metrics_rejects_unknown(spec):
    with pytest.raises(ValueError, match="unknown metric"):
        parse_metrics(spec)
