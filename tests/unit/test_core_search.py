"""Search math against hand-computed values (float64): aggregation, weighted vote, AUC."""

from __future__ import annotations

import math

import pytest

from seqrl.core.search import AGGREGATIONS, EmptyStepsError, aggregate_step_scores, binary_auc, weighted_vote


def test_aggregations_hand_values():
    s = [0.5, 0.25, 0.8]
    assert aggregate_step_scores(s, "min") == 0.25
    assert aggregate_step_scores(s, "last") == 0.8
    assert aggregate_step_scores(s, "prod") == pytest.approx(0.1, abs=1e-15)  # 0.5·0.25·0.8
    assert aggregate_step_scores(s, "mean") == pytest.approx(1.55 / 3, abs=1e-15)
    for how in AGGREGATIONS:  # one step: every rule gives that step's score
        assert aggregate_step_scores([0.7], how) == pytest.approx(0.7, abs=1e-15)


@pytest.mark.parametrize("how", AGGREGATIONS)
def test_empty_step_list_is_a_named_error(how):
    with pytest.raises(EmptyStepsError, match=f"\\({how}\\).*no steps"):
        aggregate_step_scores([], how)


def test_unknown_aggregation():
    with pytest.raises(ValueError, match="aggregation must be one of"):
        aggregate_step_scores([1.0], "max")


def test_weighted_vote_sums_per_answer():
    # 7: 0.3 + 0.3 = 0.6 beats 8: 0.5; None takes no part even with a large weight
    assert weighted_vote(["7", "8", "7", None], [0.3, 0.5, 0.3, 10.0]) == ("7", pytest.approx(0.6, abs=1e-15))


def test_weighted_vote_ties_break_by_first_appearance_whatever_the_hash():
    # both answers sum to 1.0 exactly; the first seen wins, in either order
    assert weighted_vote(["b", "a", "a"], [1.0, 0.5, 0.5])[0] == "b"
    assert weighted_vote(["a", "a", "b"], [0.5, 0.5, 1.0])[0] == "a"


def test_auc_hand_values():
    assert binary_auc([0.1, 0.2, 0.3, 0.4], [False, False, True, True]) == 1.0
    assert binary_auc([0.1, 0.2, 0.3, 0.4], [True, True, False, False]) == 0.0
    assert binary_auc([0.5, 0.5, 0.5], [True, False, False]) == 0.5  # all ties: ½ each
    # positives 0.8, 0.3; negatives 0.5, 0.1: pairs (0.8>0.5, 0.8>0.1, 0.3<0.5, 0.3>0.1) → 3/4
    assert binary_auc([0.8, 0.5, 0.3, 0.1], [True, False, True, False]) == 0.75
    assert math.isnan(binary_auc([0.1, 0.2], [True, True]))


def test_step_label_loss_hand_values():
    import torch

    from seqrl.core.search import step_label_loss

    # 2class: logits (0, ln 3) → p1 = 3/4; y = 1 → −ln 3/4; y = 0.5 → −½(ln ¾ + ln ¼)
    logits = torch.tensor([[0.0, math.log(3.0)], [0.0, math.log(3.0)]], dtype=torch.float64)
    got = step_label_loss(logits, torch.tensor([1.0, 0.5]), "2class")
    want = (-math.log(0.75) - 0.5 * (math.log(0.75) + math.log(0.25))) / 2
    assert float(got) == pytest.approx(want, abs=1e-6)
    # scalar: logit ln 3 → p = 3/4; y = 0 → −ln ¼
    assert float(step_label_loss(torch.tensor([[math.log(3.0)]]), torch.tensor([0.0]), "scalar")) == pytest.approx(
        -math.log(0.25), abs=1e-6)
    empty = step_label_loss(torch.zeros((0, 2), requires_grad=True), torch.zeros(0), "2class")
    assert float(empty.detach()) == 0.0 and empty.requires_grad
