"""Polya-Gamma moments and samplers against the exact moments of PG(b, c)."""

import math

import pytest
import torch
from scipy import stats
from torch import Tensor

from zoo.gp import DTYPE
from zoo.polyagamma import (
    _h_over_x3,
    polyagamma_mean,
    sample_polyagamma,
    sample_polyagamma_numpy,
    sample_polyagamma_torch,
)


def polyagamma_var(b: Tensor | float, c: Tensor | float) -> Tensor:
    """``Var[w] = b (sinh c - c) / (4 c^3 cosh^2(c/2))`` for ``w ~ PG(b, c)``; ``b/24`` at ``c = 0``.

    Written as ``b (tanh x - x sech^2 x) / (16 x^3)`` with ``x = |c|/2`` (the same function), through
    the sampler's own ``(tanh x - x sech^2 x) / x^3``."""
    x = torch.as_tensor(c, dtype=DTYPE).abs() / 2
    return torch.as_tensor(b, dtype=DTYPE) * _h_over_x3(x) / 16


CS = [0.0, 1e-3, 0.15, 0.5, 3.0, -3.0, 10.0, 50.0, 178.0, 300.0]  # 178: just past the package's jump


def series_moments(b: float, c: float, terms: int = 200_000) -> tuple[float, float]:
    """Mean and variance from the infinite series w = sum_k g_k / (2 pi^2 d_k), independently:
    summed to ``terms``, the remainder of the mean by its integral (that of the variance is
    below 1e-15)."""
    a = abs(c) / (2 * math.pi)
    k = torch.arange(1, terms + 1, dtype=torch.float64) - 0.5
    d = 2 * math.pi**2 * (k**2 + a**2)
    rest = (1 / terms if a == 0 else (math.pi / 2 - math.atan(terms / a)) / a) / (2 * math.pi**2)
    return b * (float((1 / d).sum()) + rest), b * float((1 / d**2).sum())


@pytest.mark.parametrize("c", CS)
def test_closed_form_moments_match_the_series(c):
    mean, var = series_moments(1.5, c)
    assert float(polyagamma_mean(1.5, c)) == pytest.approx(mean, rel=1e-5)
    assert float(polyagamma_var(1.5, c)) == pytest.approx(var, rel=1e-5)


def test_moments_known_values_and_limits():
    assert float(polyagamma_mean(1, 0.0)) == 0.25
    assert float(polyagamma_var(1, 0.0)) == pytest.approx(1 / 24, rel=1e-15)
    for c in (0.3, 2.0, 7.0):
        assert float(polyagamma_mean(1, c)) == pytest.approx(math.tanh(c / 2) / (2 * c), rel=1e-13)
        exact = (math.sinh(c) - c) / (4 * c**3 * math.cosh(c / 2) ** 2)
        assert float(polyagamma_var(1, c)) == pytest.approx(exact, rel=1e-10)
    # the series branch and the closed-form branch agree where they meet (|c|/2 = 0.1)
    edge = torch.tensor([0.2 - 1e-9, 0.2 + 1e-9], dtype=torch.float64)
    for f in (polyagamma_mean, polyagamma_var):
        lo, hi = f(1, edge)
        assert float(lo) == pytest.approx(float(hi), rel=1e-8)


@pytest.mark.parametrize(("sampler", "b"), [(sample_polyagamma_numpy, 1.0),
                                             (sample_polyagamma_numpy, 3.0),
                                             (sample_polyagamma_torch, 1.0),
                                             (sample_polyagamma_torch, 3.5)])
def test_sampler_moments_within_monte_carlo_error(sampler, b):
    n = 40_000
    c = torch.tensor(CS, dtype=torch.float64)
    w = sampler(torch.full((n, len(CS)), b), c.expand(n, -1), torch.Generator().manual_seed(3))
    assert w.shape == (n, len(CS)) and (w > 0).all()
    mean, var = polyagamma_mean(b, c), polyagamma_var(b, c)
    se_mean = (var / n).sqrt()
    fourth = ((w - mean) ** 4).mean(0)
    se_var = ((fourth - var**2).clamp_min(0) / n).sqrt()
    assert ((w.mean(0) - mean).abs() < 5 * se_mean).all(), (w.mean(0), mean)
    assert ((w.var(0) - var).abs() < 5 * se_var + 1e-12).all(), (w.var(0), var)


@pytest.mark.parametrize("c", [0.0, 2.0, 20.0])
def test_torch_sampler_has_the_packages_distribution(c):
    g = torch.Generator().manual_seed(0)
    a = sample_polyagamma_torch(torch.ones(20_000), torch.full((20_000,), c), g)
    b = sample_polyagamma_numpy(torch.ones(20_000), torch.full((20_000,), c), g)
    assert stats.ks_2samp(a.numpy(), b.numpy()).pvalue > 1e-3


def test_zero_shape_is_a_point_mass_and_draws_follow_the_generator():
    b = torch.tensor([0.0, 1.0, 0.0, 2.0])
    c = torch.tensor([1.0, 1.0, -4.0, 0.0])
    for method in ("numpy", "torch"):
        w1 = sample_polyagamma(b, c, torch.Generator().manual_seed(7), method=method)
        w2 = sample_polyagamma(b, c, torch.Generator().manual_seed(7), method=method)
        assert torch.equal(w1, w2)
        assert (w1[b == 0] == 0).all() and (w1[b > 0] > 0).all()
    with pytest.raises(ValueError, match="integer b"):
        sample_polyagamma(b + 0.5, c, torch.Generator(), method="numpy")
    with pytest.raises(ValueError, match="unknown Polya-Gamma sampler"):
        sample_polyagamma(b, c, torch.Generator(), method="nope")
