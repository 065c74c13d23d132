"""Kernels against their closed forms (batching, positive semi-definiteness and gradients are
checked for every registered kernel by zoo.testing.check_kernel, in test_conformance.py)."""

import math

import pytest
import torch

from zoo.kernels import BUILTIN, BNCosineKernel, MaternKernel, PolynomialKernel, RBFKernel

X = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])


def test_rbf_closed_form():
    k = RBFKernel(2, lengthscale=2.0, outputscale=3.0)
    K = k(X).detach()
    assert math.isclose(K[0, 1], 3 * math.exp(-1 / 8), rel_tol=1e-6)
    assert math.isclose(K[1, 2], 3 * math.exp(-5 / 8), rel_tol=1e-6)
    assert torch.allclose(k.diag(X), torch.full((3,), 3.0))


def test_matern_half_is_exponential():
    k = MaternKernel(2, nu=0.5, lengthscale=1.5)
    assert math.isclose(k(X)[1, 2].item(), math.exp(-math.sqrt(5) / 1.5), rel_tol=1e-5)
    with pytest.raises(ValueError, match="nu"):
        MaternKernel(2, nu=1.0)


def test_polynomial_order_one_is_linear_plus_offset():
    k = PolynomialKernel(2, order=1, offset=0.5)
    assert torch.allclose(k(X), X @ X.T + 0.5, atol=1e-6)
    k2 = PolynomialKernel(2, order=2, offset=1.0)
    assert torch.allclose(k2(X), (X @ X.T + 1.0) ** 2, atol=1e-5)


def test_cosine_normalises():
    K = BUILTIN["cosine"](2)(X[1:] * torch.tensor([[5.0], [0.1]]))
    assert torch.allclose(K, torch.tensor([[1.0, 0.0], [0.0, 1.0]]), atol=1e-6)


def test_bncosine_normalises_with_batch_statistics_of_all_points():
    k = BNCosineKernel(4)
    x = torch.randn(8, 4) * 10 + 3
    z = k.prepare(x)
    assert torch.allclose(z.norm(dim=-1), torch.ones(8), atol=1e-5)
    assert k.bn.running_mean.abs().sum() > 0  # training mode updated the statistics

