"""The two ways a fitted control variate becomes an estimate (Sun 2023, §3.3, Eqs. 3.7-3.9):

* ``split`` (unbiased): fit ``g`` on the first ``m = N // 2`` samples, report the mean of
  ``f - g`` over the other ``n = N - m``; the intercept cancels, and given the fitting half the
  estimate is unbiased with variance ``Var[f - g] / n``;
* ``intercept`` (biased but consistent, Remark 3.3.2): fit ``f ~ beta + g`` on all ``N`` samples
  and report ``beta``; usually far more accurate at small ``N``, and what the vv-CV experiments
  report (§4.3).

``intercept`` is the default of the closed-form CVs (polynomial, control functional, vv-CV) and
``split`` that of the neural and meta-learned CVs, as in the thesis's experiments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import Tensor

from zoo.errors import HyperParameterError

MODES = ("intercept", "split")


@dataclass
class CVEstimate:
    """Estimates ``[..., K]`` of ``K`` integrals per task and their standard errors."""

    value: Tensor
    stderr: Tensor


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise HyperParameterError(f"control-variate estimate {mode!r}: use one of {MODES}")
    return mode


def fit_size(n: int, mode: str) -> int:
    """How many of ``n`` samples fit the CV: all (``intercept``) or the first half (``split``)."""
    if mode == "split" and n < 2:
        raise HyperParameterError(f"the split estimator needs at least 2 samples, got {n}")
    return n if mode == "intercept" else n // 2


def from_residuals(residual: Tensor) -> CVEstimate:
    """The split estimate from held-out residuals ``f - g`` ``[..., n, K]``."""
    n = residual.shape[-2]
    stderr = residual.std(-2) / math.sqrt(n) if n > 1 else residual.new_full(
        residual.shape[:-2] + residual.shape[-1:], math.nan)
    return CVEstimate(residual.mean(-2), stderr)


def from_intercept(beta: Tensor, residual: Tensor, parameters: int) -> CVEstimate:
    """The fitted intercept ``beta [..., K]`` with the regression standard error from the fitted
    residuals ``[..., N, K]`` and the number of fitted parameters (NaN if not over-determined)."""
    n = residual.shape[-2]
    dof = n - parameters - 1
    if dof <= 0:
        return CVEstimate(beta, beta.new_full(beta.shape, math.nan))
    return CVEstimate(beta, (residual.pow(2).sum(-2) / dof).sqrt() / math.sqrt(n))
