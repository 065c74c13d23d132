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


def _matern_closed_form(r: torch.Tensor, nu: float, ell: float) -> torch.Tensor:
    s = math.sqrt(2 * nu) * r / ell
    return {0.5: 1.0, 1.5: 1 + s, 2.5: 1 + s + s**2 / 3}[nu] * torch.exp(-s)


@pytest.mark.parametrize("nu", [0.5, 1.5, 2.5])
def test_matern_is_exact_at_coincident_and_distinct_points(nu):
    """The closed form at every pair (float64, to rounding): 1 at coincident points, also between
    a support point and an identical query, so ``gram``'s diagonal equals ``diag``; the gradient
    there is finite (0) and elsewhere equals the closed form's."""
    g = torch.Generator().manual_seed(0)
    x = (10 * torch.randn(6, 5, generator=g, dtype=torch.float64)).requires_grad_(True)
    x2 = torch.cat([x[:3], torch.randn(2, 5, generator=g, dtype=torch.float64)])
    k = MaternKernel(5, nu=nu, lengthscale=1.7, outputscale=2.5).double()
    scale, ell = k.outputscale.detach(), float(k.lengthscale.detach())  # 2.5, 1.7 as stored
    K = k(x, x2)
    r = (x[:, None, :] - x2[None, :, :]).pow(2).sum(-1).clamp_min(1e-300).sqrt()
    expected = scale * _matern_closed_form(r, nu, ell)
    torch.testing.assert_close(K, expected, rtol=1e-13, atol=0)
    assert torch.equal(K.diagonal()[:3], scale.expand(3))
    assert torch.equal(k(x).diagonal(), k.diag(x))
    grad, = torch.autograd.grad(K[:, 3:].sum() + K.diagonal()[:3].sum(), x)
    want, = torch.autograd.grad(expected[:, 3:].sum(), x)
    assert bool(torch.isfinite(grad).all())
    torch.testing.assert_close(grad, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("nu", [0.5, 1.5, 2.5])
def test_matern_agrees_with_gpytorch(nu):
    gpytorch = pytest.importorskip("gpytorch")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(7, 3, generator=g, dtype=torch.float64)
    x2 = torch.cat([x[:2], torch.randn(4, 3, generator=g, dtype=torch.float64)])
    ours = MaternKernel(3, nu=nu, lengthscale=0.8, learn_outputscale=False).double()
    theirs = gpytorch.kernels.MaternKernel(nu=nu).double()
    theirs.lengthscale = ours.lengthscale.detach()  # 0.8 as stored
    with torch.no_grad():
        scale = ours.outputscale  # 1 up to the float32 rounding of its stored pre-image
        torch.testing.assert_close(ours(x, x2) / scale, theirs(x, x2).to_dense(), rtol=0,
                                   atol=1e-14)
        torch.testing.assert_close(ours(x) / scale, theirs(x).to_dense(), rtol=0, atol=1e-14)


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

