"""Detection and selective-prediction scores against brute force and hand-computed cases."""

import itertools
import math

import numpy as np
import pytest

from zoo.ranking import aupr, aurc, auroc, entropy, excess_aurc, oracle_aurc, risk_coverage


def pair_count_auroc(known, unknown):
    """The definition: over all (unknown, known) pairs, 1 if the unknown scores higher, 1/2 tied."""
    wins = sum(1.0 if u > k else 0.5 if u == k else 0.0 for u in unknown for k in known)
    return wins / (len(known) * len(unknown))


def threshold_aupr(known, unknown):
    """Average precision by walking every distinct threshold from the top, one at a time."""
    total, previous_recall = 0.0, 0.0
    for t in sorted(set(known) | set(unknown), reverse=True):
        tp = sum(u >= t for u in unknown)
        fp = sum(k >= t for k in known)
        recall = tp / len(unknown)
        total += (recall - previous_recall) * tp / (tp + fp)
        previous_recall = recall
    return total


@pytest.mark.parametrize("seed", range(6))
def test_auroc_and_aupr_equal_brute_force_with_ties(seed):
    rng = np.random.default_rng(seed)
    known = rng.integers(0, 5, size=int(rng.integers(1, 20))).astype(float).tolist()
    unknown = rng.integers(0, 7, size=int(rng.integers(1, 20))).astype(float).tolist()
    assert auroc(known, unknown) == pytest.approx(pair_count_auroc(known, unknown), abs=1e-12)
    assert aupr(known, unknown) == pytest.approx(threshold_aupr(known, unknown), abs=1e-12)


def test_detection_extremes_and_sklearn():
    assert auroc([0, 1], [2, 3]) == 1.0 and auroc([2, 3], [0, 1]) == 0.0
    assert aupr([0, 1], [2, 3]) == 1.0
    assert auroc([1, 1], [1, 1]) == 0.5 and aupr([1, 1, 1], [1]) == pytest.approx(0.25)
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    known, unknown = rng.normal(size=50).round(1), rng.normal(0.5, 1, size=30).round(1)
    y = np.r_[np.zeros(50), np.ones(30)]
    s = np.r_[known, unknown]
    assert auroc(known, unknown) == pytest.approx(metrics.roc_auc_score(y, s), abs=1e-12)
    assert aupr(known, unknown) == pytest.approx(metrics.average_precision_score(y, s), abs=1e-12)


def test_detection_refuses_an_empty_side():
    with pytest.raises(ValueError, match="unknown_fraction"):
        auroc([0.1, 0.2], [])


def test_entropy():
    assert entropy(np.array([1.0, 0.0, 0.0])) == 0.0
    assert entropy(np.full(4, 0.25)) == pytest.approx(math.log(4))
    assert entropy(np.array([[0.5, 0.5], [0.9, 0.1]])) == pytest.approx(
        [math.log(2), -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))])


def test_aurc_hand_computed():
    # confidences 0.9, 0.8, 0.7, 0.6 with correctness 1, 0, 1, 0:
    # risks at k = 1..4 are 0, 1/2, 1/3, 2/4 -> AURC = (0 + 1/2 + 1/3 + 1/2) / 4 = 1/3
    conf, right = np.array([0.7, 0.9, 0.6, 0.8]), np.array([1, 1, 0, 0])
    assert risk_coverage(conf, right) == pytest.approx([0, 1 / 2, 1 / 3, 2 / 4])
    assert aurc(conf, right) == pytest.approx(1 / 3)
    # the oracle answers the two right ones first: risks 0, 0, 1/3, 2/4
    assert oracle_aurc(right) == pytest.approx((1 / 3 + 1 / 2) / 4)
    assert excess_aurc(conf, right) == pytest.approx(1 / 3 - (1 / 3 + 1 / 2) / 4)


def test_aurc_ties_are_the_mean_over_orders():
    rng = np.random.default_rng(3)
    conf = rng.integers(0, 3, size=7).astype(float)
    right = rng.integers(0, 2, size=7)
    orders = [list(p) for p in itertools.permutations(range(7))
              if all(conf[p[i]] >= conf[p[i + 1]] for i in range(6))]  # every descending order
    by_order = [np.mean([np.sum(1 - right[list(p[:k])]) / k for k in range(1, 8)]) for p in orders]
    assert aurc(conf, right) == pytest.approx(np.mean(by_order), abs=1e-12)


def test_oracle_ranking_has_zero_excess_and_rows_are_independent():
    right = np.array([[1, 1, 0, 1, 0, 0], [0, 0, 0, 1, 1, 1]])
    ranked = right + np.array([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6]])  # every right query above every wrong
    assert excess_aurc(ranked, right) == pytest.approx([0.0, 0.0], abs=1e-15)
    worst = 1 - right + 0.01 * np.arange(6)
    assert (excess_aurc(worst, right) > 0).all()
    assert aurc(ranked, right)[1] == pytest.approx(aurc(ranked[1], right[1]))
    assert oracle_aurc(np.ones((1, 5))) == 0.0 and oracle_aurc(np.zeros(4)) == 1.0
