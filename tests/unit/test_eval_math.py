import pytest

from seqrl.core.metrics import majority_vote, pass_at_k, rate_diff_se
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


def test_rate_diff_se_by_hand():
    # p0 = 0.5, p1 = 0.9, n = 100: sqrt(0.25/100 + 0.09/100) = sqrt(0.0034) = 0.0583095…
    assert rate_diff_se(0.5, 0.9, 100) == pytest.approx(0.0034 ** 0.5, rel=1e-12)
    # symmetric in its rates, and it falls as 1/sqrt(n): 4x the outcomes, half the error
    assert rate_diff_se(0.9, 0.5, 100) == rate_diff_se(0.5, 0.9, 100)
    assert rate_diff_se(0.5, 0.9, 400) == pytest.approx(rate_diff_se(0.5, 0.9, 100) / 2, rel=1e-12)
    assert rate_diff_se(0.0, 0.0, 5) == 0.0


@pytest.mark.parametrize("args, field", [((0.5, 0.5, 0), "n >= 1"), ((-0.1, 0.5, 10), "before"),
                                          ((0.5, 1.5, 10), "after")])
def test_rate_diff_se_rejects_bad_input_by_name(args, field):
    with pytest.raises(ValueError, match=field):
        rate_diff_se(*args)


def test_votes_group_answers_the_verdict_rules_call_equal():
    """Three spellings of the right answer outvote two of a wrong one (grouped by raw strings, 999 won)."""
    from seqrl.answers import answer_key
    from seqrl.search.best_of_n import choose

    answers = ["999", "1,000", "999", "1000", "1000.0"]
    assert majority_vote(answers) == ("999", 2)
    assert majority_vote(answers, key=answer_key) == ("1,000", 3)
    assert choose(answers, None, "majority") == 1
    assert choose(answers, [0.3, 0.3, 0.3, 0.2, 0.2], "weighted") == 1   # 1000: 0.7 beats 999: 0.6
    assert choose(answers, [0.4, 0.3, 0.4, 0.2, 0.2], "weighted") == 0   # 999: 0.8 beats 1000: 0.7
    assert [answer_key(a) for a in answers] == ["999", "1000", "999", "1000", "1000"]
