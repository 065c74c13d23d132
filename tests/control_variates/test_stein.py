"""Stein operators and kernels (Sun 2023, §3.2, Eq. 3.5, Thm 4.2.1): the Stein identity, positive
semidefiniteness, closed-form kernel derivatives against autograd, and the matrix-valued kernel's
special cases."""

from __future__ import annotations

import pytest
import torch

from zoo.kernels import Kernel, PolynomialKernel, RBFKernel
from zoo.stein import GaussianPosteriorScore, GaussianScore, first_order, second_order
from zoo.stein_kernels import (
    BoundaryKernel,
    PreconditionedRBFKernel,
    ProductKernel,
    autograd_derivatives,
    derivatives,
    matrix_stein_kernel,
    stein_kernel,
)

D = torch.float64


def gaussian(d: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(d, generator=g, dtype=D)
    root = torch.randn(d, d, generator=g, dtype=D) / d**0.5 + torch.eye(d, dtype=D)
    cov = root @ root.T
    return mean, cov, root, g


def mlp(d: int, out: int, seed: int):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(d, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, out)).double()


@pytest.mark.parametrize("out", [1, 3])
def test_stein_identity_for_random_networks(out):
    d = 3
    mean, cov, root, g = gaussian(d)
    x = mean + torch.randn(200_000, d, generator=g, dtype=D) @ root.T
    s = GaussianScore(mean, cov)(x)
    net = mlp(d, out, 1)
    field = (lambda z: net(z)[..., 0]) if out == 1 else net
    for values in (first_order(field, x, s, create_graph=False),
                   second_order(lambda z: net(z).sum(-1), x, s, create_graph=False)):
        stderr = values.std() / len(values) ** 0.5
        assert abs(values.mean()) < 4 * stderr
        assert values.std() > 1e-3  # not identically zero


def test_second_order_is_first_order_of_the_gradient():
    d = 2
    x = torch.randn(50, d, dtype=D)
    s = -x

    def u(z):
        return torch.sin(z).prod(-1) + z[..., 0] ** 3

    def grad(z):
        return torch.stack([torch.cos(z[..., 0]) * torch.sin(z[..., 1]) + 3 * z[..., 0] ** 2,
                            torch.sin(z[..., 0]) * torch.cos(z[..., 1])], -1)

    torch.testing.assert_close(second_order(u, x, s), first_order(grad, x, s))


def test_gaussian_posterior_score_is_the_gradient_of_the_log_density():
    d = 2
    mean, cov, _, g = gaussian(d, 3)
    A = torch.randn(3, d, generator=g, dtype=D)
    noise = torch.diag(torch.tensor([0.5, 1.0, 2.0], dtype=D))
    y = torch.randn(3, generator=g, dtype=D)
    score = GaussianPosteriorScore(mean, cov, A, noise, y)
    x = torch.randn(5, d, generator=g, dtype=D, requires_grad=True)
    logp = (torch.distributions.MultivariateNormal(mean, cov).log_prob(x)
            + torch.distributions.MultivariateNormal(x @ A.T, noise).log_prob(y))
    (grad,) = torch.autograd.grad(logp.sum(), x)
    torch.testing.assert_close(score(x), grad)


class RationalQuadratic(Kernel):
    """``(1 + |x - y|^2 / 2)^-1``: a kernel with no closed-form derivatives here (autograd)."""

    def base(self, x1, x2):
        return 1 / (1 + 0.5 * (x1[..., :, None, :] - x2[..., None, :, :]).pow(2).sum(-1))


KERNELS = {
    "rbf": lambda d: RBFKernel(d, lengthscale=0.7, outputscale=1.3),
    "preconditioned-rbf": lambda d: PreconditionedRBFKernel(d, lengthscale=0.9, alpha=0.3),
    "polynomial-2": lambda d: PolynomialKernel(d, order=2, offset=0.5),
    "polynomial-3": lambda d: PolynomialKernel(d, order=3, offset=1.0),
    "product": lambda d: ProductKernel.rbf([0.5 + 0.3 * j for j in range(d)]),
    "boundary-rbf": lambda d: BoundaryKernel(RBFKernel(d, lengthscale=0.6)),
    "rational-quadratic": lambda d: RationalQuadratic(d),
}


@pytest.mark.parametrize("name", [n for n in KERNELS if n != "rational-quadratic"])
def test_closed_form_derivatives_equal_autograd(name):
    d = 3
    kernel = KERNELS[name](d).double()
    x, y = torch.randn(6, d, dtype=D), torch.randn(5, d, dtype=D)
    exact, auto = derivatives(kernel, x, y), autograd_derivatives(kernel, x, y)
    for a, b in zip(exact, auto):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_product_of_one_dimensional_rbfs_is_the_ard_rbf():
    x, y = torch.randn(4, 2, dtype=D), torch.randn(3, 2, dtype=D)
    product = ProductKernel.rbf([0.5, 2.0]).double()
    torch.testing.assert_close(product(x, y), RBFKernel(2, lengthscale=1.0).double()(
        x / torch.tensor([0.5, 2.0], dtype=D), y / torch.tensor([0.5, 2.0], dtype=D)))


@pytest.mark.parametrize("name", list(KERNELS))
def test_stein_kernel_has_zero_mean_and_is_psd(name):
    d = 2
    mean, cov, root, g = gaussian(d, 5)
    score = GaussianScore(mean, cov)
    kernel = KERNELS[name](d).double()
    x = mean + torch.randn(20_000, d, generator=g, dtype=D) @ root.T
    y = mean + torch.randn(3, d, generator=g, dtype=D) @ root.T
    k0 = stein_kernel(kernel, x, y, score(x), score(y)).detach()
    stderr = k0.std(0) / len(x) ** 0.5
    assert (k0.mean(0).abs() < 4 * stderr).all()
    z = mean + torch.randn(200, d, generator=g, dtype=D) @ root.T
    gram = stein_kernel(kernel, z, z, score(z), score(z)).detach()
    torch.testing.assert_close(gram, gram.T)
    eig = torch.linalg.eigvalsh(gram)
    assert eig.min() >= -1e-8 * eig.abs().max()


def test_matrix_stein_kernel_special_cases():
    d, T = 2, 3
    kernel = RBFKernel(d, lengthscale=0.8).double()
    x, y = torch.randn(5, d, dtype=D), torch.randn(4, d, dtype=D)
    k0 = stein_kernel(kernel, x, y, -x, -y).detach()
    one = torch.ones(1, 1, dtype=D)
    K1 = matrix_stein_kernel(kernel, one, x, y, -x[None], -y[None]).detach()
    torch.testing.assert_close(K1[..., 0, 0], k0)  # T = 1, B = 1
    root = torch.randn(T, T, dtype=D)
    B = root @ root.T
    same = matrix_stein_kernel(kernel, B, x, y, (-x).expand(T, -1, -1),
                               (-y).expand(T, -1, -1)).detach()
    torch.testing.assert_close(same, B * k0[..., None, None])  # equal distributions: B (x) k0
    # different distributions: K0(x, y) = K0(y, x)^T, the Gram matrix is PSD, and entry t of the
    # Stein kernel has zero mean under pi_t but not under another pi_t'
    shifts = torch.tensor([[0.0, 0.0], [1.5, -1.0], [0.5, 0.5]], dtype=D)
    sx, sy = -(x - shifts[:, None]), -(y - shifts[:, None])
    K = matrix_stein_kernel(kernel, B, x, y, sx, sy).detach()
    Kt = matrix_stein_kernel(kernel, B, y, x, sy, sx).detach()
    torch.testing.assert_close(K, Kt.permute(1, 0, 3, 2))
    z = torch.randn(40, d, dtype=D)
    sz = -(z - shifts[:, None])
    G = matrix_stein_kernel(kernel, B, z, z, sz, sz).detach().permute(0, 2, 1, 3).reshape(120, 120)
    eig = torch.linalg.eigvalsh(G)
    assert eig.min() >= -1e-8 * eig.abs().max()
    draws = torch.randn(200_000, d, dtype=D) + shifts[1]
    sd = -(draws - shifts[:, None])
    column = matrix_stein_kernel(kernel, B, draws, y[:1], sd, sy[:, :1]).detach()[:, 0]
    mean, stderr = column.mean(0), column.std(0) / len(draws) ** 0.5
    assert (mean[1].abs() < 4 * stderr[1]).all()  # under pi_1, row 1 is zero-mean
    assert (mean[0].abs() > 10 * stderr[0]).any()  # row 0 is not


def test_boundary_stein_kernel_has_zero_mean_under_the_uniform_and_is_psd():
    kernel = BoundaryKernel(RBFKernel(2, lengthscale=0.5)).double()
    g = torch.Generator().manual_seed(0)
    x = torch.rand(200_000, 2, generator=g, dtype=D)
    y = torch.rand(3, 2, generator=g, dtype=D)
    k0 = stein_kernel(kernel, x, y, torch.zeros_like(x), torch.zeros_like(y)).detach()
    assert (k0.mean(0).abs() < 4 * k0.std(0) / len(x) ** 0.5).all()
    z = torch.rand(100, 2, generator=g, dtype=D)
    eig = torch.linalg.eigvalsh(stein_kernel(kernel, z, z, 0 * z, 0 * z).detach())
    assert eig.min() >= -1e-8 * eig.abs().max()
