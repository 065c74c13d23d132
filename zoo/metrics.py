"""Accuracy with confidence intervals and calibration metrics, over per-episode results.

Conventions (fractions, not percent):
- 95% CI of a mean over n episodes: ``1.96 * s / sqrt(n)``, ``s`` the sample standard deviation
  (ddof = 1) of the per-episode accuracies; the normal approximation the few-shot literature uses.
- ECE / MCE: 15 equal-width confidence bins on (0, 1]; ECE = sum_b (n_b / N) |acc_b - conf_b|,
  MCE = max over non-empty bins of |acc_b - conf_b| (Guo et al. 2017).
- NLL: mean of ``-log p(y)``; Brier: mean over queries of ``sum_c (p_c - 1[c = y])^2``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

log = logging.getLogger(__name__)

Z95 = 1.959963984540054
N_BINS = 15


def mean_ci(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of its 95% normal-approximation confidence interval."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return math.nan, math.nan
    if v.size == 1:
        return float(v[0]), math.nan
    return float(v.mean()), float(Z95 * v.std(ddof=1) / math.sqrt(v.size))


def seed_mean_ci(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean over independently trained seeds and the half-width of its 95% Student-t interval
    (``n - 1`` degrees of freedom: with 5 seeds the normal 1.96 would be 2.78). The seed, not the
    episode, is the unit of replication of a training: episodes of one model are not independent
    draws of the method's accuracy. The quantile is ``scipy.special.stdtrit``, the function
    ``scipy.stats.t.ppf`` evaluates (identical numbers) without importing ``scipy.stats``
    (seconds, most of a fresh ``zoo report``)."""
    from scipy.special import stdtrit

    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return math.nan, math.nan
    if v.size == 1:
        return float(v[0]), math.nan
    return float(v.mean()), float(stdtrit(v.size - 1, 0.975) * v.std(ddof=1) / math.sqrt(v.size))


def seed_paired_difference(a: Mapping[int, Sequence[float]], b: Mapping[int, Sequence[float]]
                           ) -> tuple[float, float]:
    """Mean of ``a - b`` that respects seeds: per seed, the mean difference over the episodes
    both were scored on; then :func:`seed_mean_ci` over seeds (a clustered, two-stage estimate)."""
    per_seed = [float(np.mean(np.asarray(a[s], dtype=np.float64)
                              - np.asarray(b[s], dtype=np.float64))) for s in sorted(a)]
    return seed_mean_ci(per_seed)


def paired_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mean of ``a - b`` over the same episodes and its 95% CI half-width."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired results need the same episodes, got {a.size} and {b.size}")
    return mean_ci(a - b)


@dataclass(frozen=True)
class ReliabilityBins:
    edges: np.ndarray  # [B + 1]
    count: np.ndarray  # [B]
    confidence: np.ndarray  # [B] mean confidence per bin (nan where empty)
    accuracy: np.ndarray  # [B]


def reliability_bins(confidence: Sequence[float], correct: Sequence[float],
                     n_bins: int = N_BINS) -> ReliabilityBins:
    conf = np.asarray(confidence, dtype=np.float64)
    corr = np.asarray(correct, dtype=np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # bin b holds (edges[b], edges[b+1]]; a confidence of exactly 0 goes to the first bin
    idx = np.clip(np.searchsorted(edges, conf, side="left") - 1, 0, n_bins - 1)
    count = np.bincount(idx, minlength=n_bins).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.bincount(idx, conf, n_bins) / count
        mean_acc = np.bincount(idx, corr, n_bins) / count
    return ReliabilityBins(edges, count, mean_conf, mean_acc)


def ece_mce(confidence: Sequence[float], correct: Sequence[float],
            n_bins: int = N_BINS) -> tuple[float, float]:
    bins = reliability_bins(confidence, correct, n_bins)
    full = bins.count > 0
    if not full.any():
        return math.nan, math.nan
    gap = np.abs(bins.accuracy[full] - bins.confidence[full])
    return float((bins.count[full] / bins.count.sum() * gap).sum()), float(gap.max())


def query_nll(probs: Tensor, y: Tensor, eps: float = 1e-12) -> Tensor:
    """``-log p(y)`` of each query: ``probs [..., Q, C]``, ``y [..., Q]`` -> ``[..., Q]``."""
    return -probs.gather(-1, y[..., None]).clamp_min(eps).log()[..., 0]


def query_brier(probs: Tensor, y: Tensor) -> Tensor:
    """``sum_c (p_c - 1[c = y])^2`` of each query: ``probs [..., Q, C]`` -> ``[..., Q]``."""
    onehot = torch.nn.functional.one_hot(y, probs.shape[-1]).to(probs.dtype)
    return (probs - onehot).pow(2).sum(-1)


def nll(probs: Tensor, y: Tensor, eps: float = 1e-12) -> float:
    return float(query_nll(probs, y, eps).mean())


def brier(probs: Tensor, y: Tensor) -> float:
    return float(query_brier(probs, y).mean())


def fit_temperature(log_probs: Tensor, y: Tensor, bounds: tuple[float, float] = (1e-4, 1e4)) -> float:
    """The temperature ``T`` minimising the NLL of ``softmax(log_probs / T)`` (fit on validation
    episodes only). A 1-d convex problem in ``1 / T``, hence unimodal in ``log T``: golden-section
    search, no tuning. The bounds are wide on purpose: a GP predictive can be nearly uniform and
    still accurate (its calibrating ``T`` is then far below 1); an optimum at a bound is logged."""
    log_probs, y = log_probs.double(), y.long()

    def loss(log_t: float) -> float:
        return float(torch.nn.functional.cross_entropy(log_probs / math.exp(log_t), y))

    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = loss(a), loss(b)
    for _ in range(80):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = loss(b)
    t = math.exp((lo + hi) / 2)
    if not bounds[0] * 1.01 < t < bounds[1] / 1.01:
        log.warning("temperature fit stopped at its bound T = %.3g (bounds %s)", t, bounds)
    return t


def apply_temperature(probs: Tensor, temperature: float, eps: float = 1e-12) -> Tensor:
    return torch.softmax(probs.clamp_min(eps).log() / temperature, dim=-1)


def episode_records(probs: Tensor, y: Tensor, temperature: float = 1.0) -> list[dict]:
    """The per-episode numbers the runner stores, for ``E`` episodes at once (``probs [E, Q, C]``,
    ``y [E, Q]``), in float64: accuracy, NLL, Brier, and per query the confidence, correctness and
    confidence after ``temperature`` (what calibration metrics are computed from, across
    episodes). One batched computation: per episode it would be ~15 tensor calls each."""
    probs = probs.detach().double().cpu()
    y = y.detach().cpu().long()
    conf, pred = probs.max(-1)
    correct = (pred == y).int()
    columns = {"accuracy": correct.double().mean(-1).tolist(),
               "nll": query_nll(probs, y).mean(-1).tolist(),
               "brier": query_brier(probs, y).mean(-1).tolist(),
               "confidence": conf.tolist(), "correct": correct.tolist(),
               "confidence_calibrated": apply_temperature(probs, temperature).max(-1).values.tolist()}
    return [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]
