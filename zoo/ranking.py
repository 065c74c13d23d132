"""How well a score ranks: detection of unknown-class queries (AUROC, AUPR) and selective
prediction (the risk-coverage curve, AURC and its excess over the oracle's, E-AURC). NumPy only:
reading results imports no torch.

Conventions (fractions, not percent):
- Detection: a higher score says "unknown" (positive). AUROC is the probability that a random
  unknown query scores above a random known one, ties counting one half (the Mann-Whitney
  statistic, from mid-ranks). AUPR is the average precision ``sum_t (R_t - R_{t-1}) P_t`` over
  the distinct score values ``t`` taken as thresholds from the highest down (tied scores enter
  together), unknown queries positive; a random score gets AUPR = the unknown fraction.
- Selective prediction (Geifman & El-Yaniv 2017; Geifman et al. 2019): answer the ``k`` most
  confident of ``n`` queries, ``k = 1..n``; the risk at coverage ``k / n`` is the error rate among
  them. Queries of equal confidence have no order, so the risk is its expectation over their
  orders: the errors of a tied group count in proportion to how many of the group are answered.
  AURC is the mean risk over the ``n`` coverages; the oracle answers every right query before any
  wrong one, and E-AURC = AURC - AURC(oracle) >= 0 depends on the ranking only, not on the error
  rate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["aupr", "auroc", "aurc", "entropy", "excess_aurc", "oracle_aurc", "risk_coverage"]


def entropy(probs: np.ndarray) -> np.ndarray:
    """Predictive entropy ``-sum_c p_c log p_c`` (nats) over the last axis, ``0 log 0 = 0``."""
    p = np.asarray(probs, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return terms.sum(-1)


def _detection_inputs(known: Sequence[float], unknown: Sequence[float]
                      ) -> tuple[np.ndarray, np.ndarray]:
    k = np.asarray(known, dtype=np.float64).ravel()
    u = np.asarray(unknown, dtype=np.float64).ravel()
    if k.size == 0 or u.size == 0:
        raise ValueError(f"detection needs known and unknown queries, got {k.size} known and "
                         f"{u.size} unknown; set unknown_fraction above 0")
    if not (np.isfinite(k).all() and np.isfinite(u).all()):
        raise ValueError("detection scores must be finite")
    return k, u


def auroc(known: Sequence[float], unknown: Sequence[float]) -> float:
    """``P(score(unknown) > score(known)) + P(equal) / 2`` from mid-ranks of the pooled scores."""
    k, u = _detection_inputs(known, unknown)
    pooled = np.concatenate([u, k])
    values, inverse, counts = np.unique(pooled, return_inverse=True, return_counts=True)
    last = np.cumsum(counts)  # rank of each distinct value's last member (1-based)
    mid = last - (counts - 1) / 2.0
    rank_sum = float(mid[inverse[: u.size]].sum())
    return (rank_sum - u.size * (u.size + 1) / 2.0) / (u.size * k.size)


def aupr(known: Sequence[float], unknown: Sequence[float]) -> float:
    """Average precision of detecting the unknown queries (positives) by a higher score, the
    distinct score values as thresholds."""
    k, u = _detection_inputs(known, unknown)
    pooled = np.concatenate([u, k])
    positive = np.concatenate([np.ones(u.size), np.zeros(k.size)])
    values, inverse = np.unique(-pooled, return_inverse=True)  # highest score first
    tp = np.cumsum(np.bincount(inverse, weights=positive, minlength=values.size))
    total = np.cumsum(np.bincount(inverse, minlength=values.size))
    recall = tp / u.size
    precision = tp / total
    return float(np.sum(np.diff(recall, prepend=0.0) * precision))


def risk_coverage(confidence: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """The expected risk at coverage ``k / n``, ``k = 1..n``, of each row of ``confidence [..., n]``
    with ``correct [..., n]`` (1 right, 0 wrong): ``[..., n]``. Ties are spread as the module says."""
    conf = np.asarray(confidence, dtype=np.float64)
    wrong = 1.0 - np.asarray(correct, dtype=np.float64)
    if conf.shape != wrong.shape or conf.ndim == 0 or conf.shape[-1] == 0:
        raise ValueError(f"confidence {conf.shape} and correctness {wrong.shape} need the same "
                         "non-empty shape")
    shape, n = conf.shape, conf.shape[-1]
    conf, wrong = conf.reshape(-1, n), wrong.reshape(-1, n)
    order = np.argsort(-conf, axis=1, kind="stable")
    c = np.take_along_axis(conf, order, 1)
    e = np.take_along_axis(wrong, order, 1)
    new = np.ones(c.shape, dtype=bool)
    new[:, 1:] = c[:, 1:] != c[:, :-1]  # a tied group starts where the confidence changes
    flat_new = new.ravel()
    group = np.cumsum(flat_new) - 1  # global group ids: every row starts a new group
    size = np.bincount(group).astype(np.float64)
    errors = np.bincount(group, weights=e.ravel())
    position = np.broadcast_to(np.arange(n), c.shape).ravel()
    start = position[flat_new]
    before = (np.cumsum(e, axis=1) - e).ravel()[flat_new]  # errors answered before the group
    answered = position - start[group] + 1
    cumulative = before[group] + answered * errors[group] / size[group]
    return (cumulative / (position + 1)).reshape(shape)


def aurc(confidence: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """Area under the risk-coverage curve of each row: the mean of :func:`risk_coverage`."""
    return risk_coverage(confidence, correct).mean(-1)


def oracle_aurc(correct: np.ndarray) -> np.ndarray:
    """AURC of each row when every right query is answered before any wrong one:
    ``(1 / n) sum_{k > n - m} (k - n + m) / k`` for ``m`` errors among ``n``."""
    right = np.asarray(correct, dtype=np.float64)
    n = right.shape[-1]
    m = n - right.sum(-1, keepdims=True)
    k = np.arange(1, n + 1, dtype=np.float64)
    return (np.maximum(k - n + m, 0.0) / k).mean(-1)


def excess_aurc(confidence: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """E-AURC of each row: :func:`aurc` minus :func:`oracle_aurc`."""
    return aurc(confidence, correct) - oracle_aurc(correct)
