"""Regression metrics against their definitions: each test fails if a formula is wrong."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from zoo.tasks import regression_metrics as rm


def gaussian_loglik(y, mean, var) -> float:
    return float(stats.norm.logpdf(y.numpy(), mean.numpy(), np.sqrt(var.numpy())).sum())


def test_lmlhd_is_the_exact_gaussian_loglik_when_every_sample_agrees():
    g = torch.Generator().manual_seed(0)
    y = torch.randn(50, 2, generator=g, dtype=torch.float64)
    mean = torch.randn(50, 2, generator=g, dtype=torch.float64)
    var = torch.rand(50, 2, generator=g, dtype=torch.float64) + 0.1
    exact = gaussian_loglik(y, mean, var)
    same = rm.joint_log_likelihood(y, mean.expand(16, -1, -1), var.expand(16, -1, -1))
    assert same == pytest.approx(exact, rel=1e-9)
    assert rm.joint_log_likelihood(y, mean[None], var[None]) == pytest.approx(exact, rel=1e-9)


def test_lmlhd_is_log_mean_exp_of_sample_likelihoods_and_stable_for_784_targets():
    g = torch.Generator().manual_seed(1)
    y = torch.randn(784, 1, generator=g, dtype=torch.float64)
    mean = y + 0.5 * torch.randn(8, 784, 1, generator=g, dtype=torch.float64)
    var = torch.full_like(mean, 0.01)
    per_sample = [gaussian_loglik(y, mean[s], var[s]) for s in range(8)]
    assert max(per_sample) < -5000  # exp() of any of them underflows to 0 in float64
    expected = max(per_sample) + math.log(np.mean(np.exp(np.array(per_sample) - max(per_sample))))
    value = rm.joint_log_likelihood(y, mean, var)
    assert math.isfinite(value) and value == pytest.approx(expected, rel=1e-10)


def test_point_nll_of_one_gaussian():
    y, mean = torch.tensor([[0.3], [1.0]]).double(), torch.tensor([[0.0], [0.5]]).double()
    var = torch.tensor([[1.0], [0.25]]).double()
    expected = -gaussian_loglik(y, mean, var) / 2
    assert rm.point_nll(y, mean[None], var[None]) == pytest.approx(expected, rel=1e-9)


def crps_by_integration(y: float, means, sds) -> float:
    cdf = lambda x: float(np.mean(stats.norm.cdf(x, means, sds)))  # noqa: E731
    lo, hi = min(means) - 12 * max(sds), max(means) + 12 * max(sds)
    left, _ = integrate.quad(lambda x: cdf(x) ** 2, lo, y, limit=200)
    right, _ = integrate.quad(lambda x: (1 - cdf(x)) ** 2, y, hi, limit=200)
    return left + right


@pytest.mark.parametrize("means, sds, y", [([0.0], [1.0], 0.3), ([1.0], [0.2], -0.5),
                                           ([-1.0, 0.5, 2.0], [0.3, 1.0, 0.5], 0.7)])
def test_crps_matches_numerical_integration(means, sds, y):
    mean = torch.tensor(means, dtype=torch.float64)[:, None, None]
    var = torch.tensor(sds, dtype=torch.float64).square()[:, None, None]
    value = rm.crps(torch.tensor([[y]], dtype=torch.float64), mean, var)
    assert value == pytest.approx(crps_by_integration(y, means, sds), rel=1e-6)


def test_crps_in_chunks_equals_crps_at_once(monkeypatch):
    g = torch.Generator().manual_seed(2)
    y, mean = torch.randn(30, 1, generator=g), torch.randn(5, 30, 1, generator=g)
    var = torch.rand(5, 30, 1, generator=g) + 0.1
    whole = rm.crps(y, mean, var)
    monkeypatch.setattr(rm, "PAIR_BUDGET", 25 * 3)
    assert rm.crps(y, mean, var) == pytest.approx(whole, rel=1e-12)


def test_crps_of_many_components_estimates_the_exact_mixture_crps(monkeypatch):
    """Above PAIRWISE_COMPONENTS the pairs s != t are subsampled and the diagonal kept exact: the
    estimate is unbiased over the order of i.i.d. components (a biased weighting of the diagonal
    would shift the mean by ~(1/4 - 1/12) E A(0, 2v) / 2 here)."""
    g = torch.Generator().manual_seed(3)
    y, mean = torch.randn(1, 1, generator=g), 2 * torch.randn(12, 1, 1, generator=g)
    var = torch.rand(12, 1, 1, generator=g) + 0.5
    exact = rm.crps(y, mean, var)
    monkeypatch.setattr(rm, "PAIRWISE_COMPONENTS", 4)
    estimates = [rm.crps(y, mean[p], var[p]) for p in (torch.randperm(12, generator=g)
                                                       for _ in range(3000))]
    assert exact == pytest.approx(float(np.mean(estimates)), abs=3 * float(np.std(estimates)) / 50)


def test_coverage_of_a_calibrated_gaussian_is_nominal():
    g = torch.Generator().manual_seed(3)
    mean = torch.randn(20000, 1, generator=g, dtype=torch.float64)
    sd = torch.rand(20000, 1, generator=g, dtype=torch.float64) + 0.5
    y = mean + sd * torch.randn(20000, 1, generator=g, dtype=torch.float64)
    for level in (0.5, 0.9):
        assert rm.coverage(y, mean[None], sd.square()[None], level) == pytest.approx(level, abs=0.01)
    # too narrow a predictive under-covers
    assert rm.coverage(y, mean[None], (0.5 * sd).square()[None], 0.9) < 0.7


def test_mse_uses_the_mixture_mean():
    y = torch.zeros(1, 1)
    mean = torch.tensor([1.0, -1.0])[:, None, None]
    assert rm.mse(y, mean) == 0.0


def test_the_exact_gaussian_lmlhd_is_the_multivariate_normal_density_per_output_dimension():
    g = torch.Generator().manual_seed(3)
    n, dy = 12, 2
    a = torch.randn(dy, n, n, generator=g, dtype=torch.float64)
    cov = a @ a.transpose(-1, -2) + 0.1 * torch.eye(n, dtype=torch.float64)
    loc = torch.randn(n, dy, generator=g, dtype=torch.float64)
    y = torch.randn(n, dy, generator=g, dtype=torch.float64)
    expected = sum(stats.multivariate_normal(loc[:, d].numpy(), cov[d].numpy()).logpdf(y[:, d].numpy())
                   for d in range(dy))
    assert rm.gaussian_log_likelihood(y, loc, cov) == pytest.approx(expected, rel=1e-10)
    diagonal = torch.rand(n, dy, generator=g, dtype=torch.float64) + 0.2  # factorised: the S = 1 form
    assert rm.gaussian_log_likelihood(y, loc, torch.diag_embed(diagonal.T)) == pytest.approx(
        rm.joint_log_likelihood(y, loc[None], diagonal[None]), rel=1e-12)

