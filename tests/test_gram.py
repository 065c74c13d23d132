"""The GP algebra routes of zoo.gram / zoo.gp: the feature (Woodbury) route and the Nystrom
factor give the dense route's answers; a shared kernel with shared sites is factorised once."""

import subprocess
import sys

import pytest
import torch

from zoo.gp import SitePosterior, gaussian_log_marginal
from zoo.gram import FeatureGram, choose_route, inducing_index, nystrom_factor
from zoo.jitter import JitterPolicy
from zoo.kernels import BUILTIN

D64 = torch.float64


def sites(shape, seed=0, zero_some=True):
    g = torch.Generator().manual_seed(seed)
    lam = torch.rand(shape, generator=g, dtype=D64) * 3
    if zero_some:
        lam[..., ::4] = 0  # empty sites
    return lam, torch.randn(shape, generator=g, dtype=D64)


@pytest.mark.parametrize("scale", [1.0, 1e-4])
def test_feature_route_equals_dense_route_on_a_singular_kernel(scale):
    g = torch.Generator().manual_seed(1)
    C, n, D, m = 3, 20, 5, 7
    phi = torch.randn(C, n, D, generator=g, dtype=D64) * scale
    phi[:, 1] = phi[:, 0]  # duplicated point: K singular beyond rank D as well
    phi_q = torch.randn(C, m, D, generator=g, dtype=D64)
    lam, nu = sites((C, n))
    K = phi @ phi.mT
    exact = SitePosterior(K, lam, nu)
    fast = SitePosterior(FeatureGram.of(phi), lam, nu)
    assert type(fast).__name__ == "FeatureSitePosterior"
    for name in ("mean", "var", "alpha", "cov", "logdet_B"):
        assert torch.allclose(getattr(fast, name), getattr(exact, name), atol=1e-8), name
    assert torch.allclose(fast.kl_to_prior(), exact.kl_to_prior(), atol=1e-8)
    kss = phi_q.pow(2).sum(-1) + 0.3  # a prior variance beyond the factor (as in Nystrom)
    for a, b in zip(fast.predict(FeatureGram(phi, phi_q), kss), exact.predict(phi @ phi_q.mT, kss),
                    strict=True):
        assert torch.allclose(a, b, atol=1e-8)
    prior, noise = torch.randn(2, C, n, generator=g, dtype=D64), torch.randn(2, C, n, generator=g,
                                                                            dtype=D64)
    assert torch.allclose(fast.sample(prior, noise), exact.sample(prior, noise), atol=1e-8)


@pytest.mark.parametrize("scale", [1.0, 1e-4])
def test_shared_factor_outer_products_equal_the_dense_route_and_the_batched_products(scale):
    """One factor for every class (expanded with stride 0): ``A`` from the packed outer products
    and ``var = pack(A^-1) @ outer^T`` give the dense route's posterior and the per-class batched
    products' gradients, to 1e-8 in float64, on a singular kernel (duplicated point, tiny scale)."""
    g = torch.Generator().manual_seed(4)
    C, n, D = 4, 25, 6
    phi0 = torch.randn(n, D, generator=g, dtype=D64) * scale
    phi0[1] = phi0[0]
    lam, nu = sites((C, n), seed=5)
    results = {}
    for route in ("outer", "batched", "dense"):
        phi = phi0.clone().requires_grad_()
        if route == "dense":
            K = (phi @ phi.mT).expand(C, n, n)
        else:
            K = FeatureGram.of(phi).expand(C)
            if route == "batched":  # the same factor, not shared: no outer products
                K = FeatureGram.of(phi.expand(C, n, D).clone())
            assert (K.outer is not None) == (route == "outer")
        post = SitePosterior(K, lam, nu)
        values = torch.cat([post.mean.flatten(), post.var.flatten(), post.kl_to_prior(),
                            post.logdet_B])
        (grad,) = torch.autograd.grad(values.sum() + (values**2).sum(), phi)
        results[route] = values.detach(), grad
    for route in ("outer", "batched"):
        assert torch.allclose(results[route][0], results["dense"][0], atol=1e-8), route
    assert torch.allclose(results["outer"][1], results["batched"][1], atol=1e-8)
    assert torch.allclose(results["outer"][1], results["dense"][1], atol=1e-8 * max(1, 1 / scale))


def test_gaussian_log_marginal_on_a_factor_equals_the_dense_one():
    g = torch.Generator().manual_seed(2)
    phi = torch.randn(30, 4, generator=g, dtype=D64)
    y = torch.randn(3, 30, generator=g, dtype=D64)
    K = (phi @ phi.mT).expand(3, 30, 30)
    fast = gaussian_log_marginal(FeatureGram.of(phi).expand(3), y, 0.1)
    assert torch.allclose(fast, gaussian_log_marginal(K, y, 0.1), atol=1e-8)
    # against the density itself
    mvn = torch.distributions.MultivariateNormal(torch.zeros(30, dtype=D64),
                                                 K[0] + 0.1 * torch.eye(30, dtype=D64))
    assert torch.allclose(fast, mvn.log_prob(y), atol=1e-8)


def test_a_shared_kernel_with_shared_sites_is_factorised_once():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(12, 2, generator=g, dtype=D64)
    K = BUILTIN["rbf"](2).double()(x).detach().expand(5, 12, 12)  # one kernel for 5 classes
    lam, nu = torch.full((1, 12), 10.0, dtype=D64), torch.randn(5, 12, generator=g, dtype=D64)
    post = SitePosterior(K, lam, nu)
    assert post.L.shape == (1, 12, 12)
    full = SitePosterior(K.contiguous(), lam.expand(5, 12), nu)
    assert full.L.shape == (5, 12, 12)
    assert torch.allclose(post.mean, full.mean, atol=1e-10)
    assert torch.allclose(post.var, full.var, atol=1e-10)


def test_nystrom_with_every_point_inducing_is_exact():
    g = torch.Generator().manual_seed(4)
    kernel = BUILTIN["rbf"](3, lengthscale=2.0).double()
    x = torch.randn(10, 3, generator=g, dtype=D64)
    K = kernel(x).detach()
    jitter = JitterPolicy()
    phi = nystrom_factor(K, K, lambda A: jitter.cholesky(A))
    assert torch.allclose(phi @ phi.mT, K, atol=1e-8)
    lam, nu = sites((10,), 5)
    assert torch.allclose(SitePosterior(FeatureGram.of(phi), lam, nu).mean,
                          SitePosterior(K, lam, nu).mean, atol=1e-8)
    # fewer inducing points: a PSD approximation from below (K - Q is a Schur complement)
    idx = inducing_index(10, 4, x.device)
    phi = nystrom_factor(K[:, idx], K[idx][:, idx], lambda A: jitter.cholesky(A))
    assert torch.linalg.eigvalsh(K - phi @ phi.mT).min() > -1e-10


def test_route_choice():
    assert choose_route("auto", 1000, 64) == "features"
    assert choose_route("auto", 25, 64) == "dense"  # the quick suite's episodes stay dense
    assert choose_route("auto", 1000, None) == "dense"
    assert choose_route("nystrom", 10, None) == "nystrom"
    with pytest.raises(ValueError, match="feature map"):
        choose_route("features", 10, None)
    with pytest.raises(ValueError, match="unknown"):
        choose_route("woodbury", 10, 3)


@pytest.mark.parametrize("name,options", [("linear", {}), ("cosine", {}), ("bncosine", {}),
                                          ("polynomial", {"order": 1}),
                                          ("polynomial", {"order": 2})])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_feature_maps_reproduce_the_gram_matrix(name, options, batch):
    kernel = BUILTIN[name](5, batch, outputscale=1.7, **options).double().eval()
    z = kernel.prepare(torch.randn(7, 5, dtype=D64))
    phi = kernel.feature_map(z)
    assert phi.shape[-1] == kernel.map_dim(5)
    assert torch.allclose(phi @ phi.mT, kernel.gram(z, z), atol=1e-10)


def test_kernels_without_a_feature_map_say_so():
    assert BUILTIN["rbf"](3).map_dim(3) is None
    assert BUILTIN["polynomial"](3, order=3).map_dim(3) is None


def test_shapes_do_not_import_sympy():
    """``torch.broadcast_shapes`` imports sympy (about a second in every worker process): the Gram
    and kernel shapes use NumPy's rule instead."""
    code = ("import sys, torch\n"
            "from zoo.gram import FeatureGram\n"
            "from zoo.kernels import RBFKernel\n"
            "assert FeatureGram(torch.ones(3, 1, 4, 2), torch.ones(5, 2)).shape == (3, 1, 4, 5)\n"
            "assert RBFKernel(2).base_diag(torch.ones(4, 2)).shape == (4,)\n"
            "assert 'sympy' not in sys.modules, 'sympy was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
