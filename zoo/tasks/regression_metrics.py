"""Scores of a predictive distribution over the targets of one regression task.

The prediction is a uniform mixture of ``S`` factorised Gaussians over the ``N`` targets (``S``
latent samples of a neural process or GP, each giving a per-target mean and variance; ``S = 1``:
one Gaussian). All in float64.

- LMLHD, the joint predictive log-likelihood of all targets (GMM-NP, Volpp et al. 2023, A.3.3):
  ``log (1/S) sum_s prod_n N(y_n | mu_sn, var_sn)``, by log-sum-exp over ``s`` of the summed
  per-target log densities, so it stays finite for N = 784 targets. Where the predictive is one
  Gaussian ``N(loc, cov)`` over all targets (per output dimension), its exact log density
  (:func:`gaussian_log_likelihood`) replaces that Monte Carlo estimate.
- NLL per point: ``-(1/N) sum_n log (1/S) sum_s N(y_n | mu_sn, var_sn)`` (the mixture marginal).
- MSE of the predictive mean ``(1/S) sum_s mu_sn``.
- CRPS of the mixture in closed form (Grimit et al. 2006, eq. 4):
  ``CRPS = (1/S) sum_s A(y - mu_s, var_s) - 1/(2 S^2) sum_{s,t} A(mu_s - mu_t, var_s + var_t)``
  with ``A(m, v) = m (2 Phi(m / sqrt v) - 1) + 2 sqrt v phi(m / sqrt v)``, i.e. ``E|X - y| -
  E|X - X'|/2``; for ``S = 1`` Gneiting & Raftery's Gaussian formula. The pairwise term costs
  ``S^2`` per target: above ``PAIRWISE_COMPONENTS`` components the pairs ``s != t`` are averaged
  over the first that many (an unbiased estimate of their mean for i.i.d. latent samples) and
  weighted ``1 - 1/S`` beside the exact diagonal ``s = t`` (weight ``1/S``); at most
  ``PAIRWISE_COMPONENTS`` components the formula is exact.
- Coverage of the central 50% / 90% interval: the mixture CDF at ``y`` lies in
  ``[(1 - q)/2, (1 + q)/2]``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

PAIR_BUDGET = 2**22
"""Entries of the ``S x S x chunk`` pairwise CRPS term computed at once."""
PAIRWISE_COMPONENTS = 32


def log_normal(y: Tensor, mean: Tensor, var: Tensor) -> Tensor:
    return -0.5 * (torch.log(2 * math.pi * var) + (y - mean).square() / var)


def joint_log_likelihood(y: Tensor, mean: Tensor, var: Tensor) -> float:
    """LMLHD: ``y [N, dy]``, ``mean, var [S, N, dy]``."""
    per_sample = log_normal(y.double(), mean.double(), var.double()).sum((1, 2))
    return float(torch.logsumexp(per_sample, 0) - math.log(per_sample.shape[0]))


def gaussian_log_likelihood(y: Tensor, loc: Tensor, cov: Tensor) -> float:
    """Exact LMLHD of one Gaussian over all targets: ``y, loc [N, dy]``, ``cov [dy, N, N]`` (the
    targets of each output dimension jointly), ``sum_d log N(y_d | loc_d, cov_d)`` by Cholesky."""
    r = (y.double() - loc.double()).T[..., None]  # [dy, N, 1]
    chol = torch.linalg.cholesky(cov.double())
    z = torch.linalg.solve_triangular(chol, r, upper=False)
    n = r.shape[1]
    logdet = 2 * chol.diagonal(dim1=-2, dim2=-1).log().sum()
    return float(-0.5 * (z.square().sum() + logdet + r.shape[0] * n * math.log(2 * math.pi)))


def point_nll(y: Tensor, mean: Tensor, var: Tensor) -> float:
    per_point = log_normal(y.double(), mean.double(), var.double()).sum(-1)  # [S, N]
    return float(-(torch.logsumexp(per_point, 0) - math.log(per_point.shape[0])).mean())


def mse(y: Tensor, mean: Tensor) -> float:
    return float((mean.double().mean(0) - y.double()).square().mean())


def _a(m: Tensor, v: Tensor) -> Tensor:
    """``E|X|`` for ``X ~ N(m, v)``."""
    s = v.sqrt()
    z = m / s
    return m * (2 * torch.special.ndtr(z) - 1) + 2 * s * torch.exp(-0.5 * z.square()) / math.sqrt(
        2 * math.pi)


def crps(y: Tensor, mean: Tensor, var: Tensor) -> float:
    """Mean CRPS over targets and output dimensions (closed form for a Gaussian mixture)."""
    y, mean, var = y.double(), mean.double(), var.double()
    first = _a(y - mean, var).mean(0).flatten()  # [N * dy]
    S = mean.shape[0]
    diagonal = _a(torch.zeros_like(var), 2 * var).mean(0).flatten()
    flat_m = mean[:PAIRWISE_COMPONENTS].flatten(1)  # [k, N * dy]
    flat_v = var[:PAIRWISE_COMPONENTS].flatten(1)
    k = flat_m.shape[0]
    off = torch.zeros_like(first)
    if k > 1:
        chunk = max(1, PAIR_BUDGET // (k * k))
        pairs = torch.cat([
            _a(flat_m[:, None, i:i + chunk] - flat_m[None, :, i:i + chunk],
               flat_v[:, None, i:i + chunk] + flat_v[None, :, i:i + chunk]).sum((0, 1))
            for i in range(0, flat_m.shape[1], chunk)])
        own = _a(torch.zeros_like(flat_v), 2 * flat_v).sum(0)
        off = (pairs - own) / (k * (k - 1))
    second = diagonal / S + (1 - 1 / S) * off
    return float((first - 0.5 * second).mean())


def coverage(y: Tensor, mean: Tensor, var: Tensor, level: float) -> float:
    """Fraction of targets inside the central ``level`` interval of their predictive."""
    y, mean, var = y.double(), mean.double(), var.double()
    cdf = torch.special.ndtr((y - mean) / var.sqrt()).mean(0)
    return float(((cdf - 0.5).abs() <= level / 2).double().mean())
