"""Kernels against their closed forms, batching over classes, and positive semi-definiteness."""

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


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_per_class_parameters_and_psd(name):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(6, 4, generator=g), torch.randn(3, 4, generator=g)
    k = BUILTIN[name](4, batch_shape=(5,))
    k.eval()
    with torch.no_grad():
        for p in k.parameters():  # distinct per-class values
            p.add_(torch.linspace(0, 0.5, p.numel()).view_as(p))
    K, Kxy, d = k(x), k(x, y), k.diag(y)
    assert K.shape == (5, 6, 6) and Kxy.shape == (5, 6, 3) and d.shape == (5, 3)
    assert not torch.allclose(K[0], K[-1])
    assert (torch.linalg.eigvalsh(K.double()) > -1e-4).all()
    full = k(torch.cat([x, y]))
    assert torch.allclose(full[:, :6, 6:], Kxy, atol=1e-5)
    assert torch.allclose(torch.diagonal(full, dim1=-2, dim2=-1)[:, 6:], d, atol=1e-5)


def test_bncosine_normalises_with_batch_statistics_of_all_points():
    k = BNCosineKernel(4)
    x = torch.randn(8, 4) * 10 + 3
    z = k.prepare(x)
    assert torch.allclose(z.norm(dim=-1), torch.ones(8), atol=1e-5)
    assert k.bn.running_mean.abs().sum() > 0  # training mode updated the statistics


def test_gradients_reach_features_and_hyperparameters():
    x = torch.randn(5, 3, requires_grad=True)
    k = RBFKernel(3)
    k(x).sum().backward()
    assert x.grad is not None and k.raw_lengthscale.grad is not None
