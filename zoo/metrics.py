"""Accuracy with confidence intervals and calibration metrics, over per-episode results. The
functions of tensors use their methods (torch is imported by whoever made them), so reading
results imports no torch.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor

log = logging.getLogger(__name__)

__all__ = ["N_BINS", "ReliabilityBins", "apply_temperature", "brier", "calibrated_confidence",
           "ece_mce", "fit_temperature", "mean_ci", "nll", "paired_difference", "query_brier",
           "query_nll", "reliability_bins", "seed_mean_ci", "seed_paired_difference"]

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
    """``sum_c (p_c - 1[c = y])^2 = sum_c p_c^2 - 2 p_y + 1`` of each query: ``probs [..., Q, C]``
    -> ``[..., Q]`` (the expanded form: no one-hot matrix)."""
    return (probs * probs).sum(-1) - 2 * probs.gather(-1, y[..., None])[..., 0] + 1


def nll(probs: Tensor, y: Tensor, eps: float = 1e-12) -> float:
    return float(query_nll(probs, y, eps).mean())


def brier(probs: Tensor, y: Tensor) -> float:
    return float(query_brier(probs, y).mean())


UNIFORM_SPREAD = 1e-9
"""Log-probabilities of one query that differ by less than this are equal: uniform predictions
(a nearly uniform GP predictive that is still accurate differs by far more)."""


def fit_temperature(log_probs: Tensor, y: Tensor, bounds: tuple[float, float] = (1e-4, 1e4),
                    what: str = "") -> float:
    """The temperature ``T`` minimising the NLL of ``softmax(log_probs / T)`` (fit on validation
    episodes only). In ``b = 1 / T`` the NLL ``L(b) = mean_i [logsumexp_c(b z_ic) - b z_iy]`` is
    convex, with ``L'(b) = mean_i (E_b[z_i] - z_iy)`` and ``L''(b) = mean_i Var_b[z_i] >= 0``
    (moments under ``softmax(b z_i)``), so the root of ``L'`` is found by Newton's method, kept
    inside a bracket where ``L'`` changes sign (:func:`log_newton_root`): ~5-10 evaluations of
    the moments, against ~80 of the NLL for a golden-section search. No tuning. The bounds are
    wide on purpose: a GP predictive can be nearly uniform and still accurate (its calibrating
    ``T`` is then far below 1); an optimum at a bound is logged, naming ``what`` was fitted."""
    z = log_probs.detach().double().cpu().numpy()
    d = z - z.max(1, keepdims=True)  # moments of z shifted per row: exp(b d) <= 1, no overflow
    d_y = np.take_along_axis(d, y.long().cpu().numpy()[:, None], 1)[:, 0]

    def slope(b: float) -> tuple[float, float]:
        """``L'(b)`` and ``L''(b)``."""
        w = np.exp(b * d)
        total = w.sum(1)
        mean = (w * d).sum(1) / total
        second = (w * d * d).sum(1) / total
        return float((mean - d_y).mean()), float(np.maximum(second - mean * mean, 0).mean())

    b, _ = log_newton_root(slope, 1 / bounds[1], 1 / bounds[0])
    t = 1 / b
    if d.size and float(np.abs(d).max()) < UNIFORM_SPREAD:
        log.warning("%sthe predictions are uniform (every class equally likely for every "
                    "validation query): the model has collapsed and scores chance, whatever its "
                    "temperature; a learning rate too large does this (lower --set lr=...)",
                    f"{what}: " if what else "")
    elif not bounds[0] * 1.01 < t < bounds[1] / 1.01:
        log.warning("%stemperature fit stopped at its bound T = %.3g (bounds %s)",
                    f"{what}: " if what else "", t, bounds)
    return t


def log_newton_root(slope: Callable[[float], tuple[float, float]], lo: float, hi: float,
                    tol: float = 1e-13, most: int = 100) -> tuple[float, int]:
    """The root in ``[lo, hi]`` (``0 < lo < hi``) of an increasing ``g`` given by ``slope(b) =
    (g(b), g'(b))``, and the evaluations it took: ``lo`` where ``g(lo) >= 0``, ``hi`` where ``g(hi)
    <= 0``, else Newton's method in ``log b`` (``dg / dlog b = b g'``, the scale of bounds set
    in decades) from ``b = 1`` (clipped to the bracket), the bracket narrowed at each
    evaluation by the sign of ``g`` and a geometric bisection wherever a Newton step would leave
    it. It stops at an exact zero, at a Newton step under ``tol`` in ``log b`` (taken, even onto
    the bracket's end: a root is where the iteration converged, also where it converged onto
    the end of the bracket it narrowed), or at a bracket narrower than ``tol``."""
    g_lo, _ = slope(lo)
    if g_lo >= 0:
        return lo, 1
    g_hi, _ = slope(hi)
    if g_hi <= 0:
        return hi, 2
    b, evaluations = min(max(1.0, lo), hi), 2
    for _ in range(most):
        g, h = slope(b)
        evaluations += 1
        if g == 0:
            break
        if g < 0:
            lo = b
        else:
            hi = b
        step = g / (b * h) if h > 0 else math.inf
        if abs(step) <= tol:
            b *= math.exp(-step)
            break
        if math.log(lo) < math.log(b) - step < math.log(hi):
            b *= math.exp(-step)
        else:
            b = math.sqrt(lo * hi)
            if math.log(hi / lo) <= tol:
                break
    return b, evaluations


def calibrated_confidence(probs: Tensor, temperature: float, eps: float = 1e-12) -> Tensor:
    """``max_c`` of :func:`apply_temperature`, ``1 / sum_c exp((log p_c - max_c' log p_c') / T)``
    (the largest class keeps the largest probability for ``T > 0``), without the softmax: torch's
    softmax over a last dimension of a few classes costs ~5x these element-wise calls."""
    log_p = probs.clamp_min(eps).log()
    return ((log_p - log_p.max(-1, keepdim=True).values) / temperature).exp().sum(-1).reciprocal()


def apply_temperature(probs: Tensor, temperature: float, eps: float = 1e-12) -> Tensor:
    import torch

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
               "confidence_calibrated": calibrated_confidence(probs, temperature).tolist()}
    return [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]
