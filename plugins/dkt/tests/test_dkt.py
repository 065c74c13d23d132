import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal
from zoo_dkt import DKT

from zoo import Episode
from zoo.kernels import RBFKernel
from zoo.testing import (
    IdentityBackbone,
    check_algebra_routes,
    check_batched_meta_loss,
)


def episode(seed=0, way=3, shot=2, query=2):
    g = torch.Generator().manual_seed(seed)
    sx, qx = torch.randn(way * shot, 3, generator=g), torch.randn(way * query, 3, generator=g)
    return Episode(sx, torch.arange(way).repeat_interleave(shot), qx,
                   torch.arange(way).repeat_interleave(query), way=way, shot=shot,
                   info={"seed": seed})


def test_noise_to_zero_interpolates_the_targets():
    ep = episode()
    at_support = Episode(ep.support_x, ep.support_y, ep.support_x, ep.support_y, ep.way, ep.shot,
                         info=ep.info)
    method = DKT(IdentityBackbone(3), way=3, kernel=RBFKernel(3), noise=1e-7).eval()
    with torch.no_grad():
        mean, var = method.latent(at_support)
    targets = 2 * torch.nn.functional.one_hot(ep.support_y, 3).double() - 1
    assert torch.allclose(mean, targets, atol=1e-4)
    assert (var < 1e-4).all()
    # with a large noise the mean shrinks toward the prior mean instead
    method = DKT(IdentityBackbone(3), way=3, kernel=RBFKernel(3), noise=10.0).eval()
    with torch.no_grad():
        assert method.latent(at_support)[0].abs().max() < 0.5


def test_loss_is_the_closed_form_gaussian_marginal_likelihood():
    ep = episode(1)
    method = DKT(IdentityBackbone(3), way=3, kernel=RBFKernel(3, lengthscale=1.3), noise=0.1)
    with torch.no_grad():
        method.mean.fill_(0.2)
        loss = float(method.meta_loss(ep))
        x = torch.cat([ep.support_x, ep.query_x])
        y = torch.cat([ep.support_y, ep.query_y])
        K = method.kernel(x).double().numpy()
    n = len(y)
    expected = 0.0
    for c in range(3):
        t = np.where(y.numpy() == c, 1.0, -1.0) - 0.2
        expected -= multivariate_normal(np.zeros(n), K + 0.1 * np.eye(n)).logpdf(t) / n
    assert loss == pytest.approx(expected, rel=1e-7)  # float32 noise and kernel


def test_learnable_mean_and_fixed_noise_by_default():
    method = DKT(IdentityBackbone(3), way=2, kernel=RBFKernel(3))
    assert method.raw_noise.requires_grad is False and method.mean.requires_grad
    assert float(method.noise) == pytest.approx(0.1)
    method.meta_loss(episode(way=2)).backward()
    assert method.mean.grad is not None


@pytest.mark.parametrize("kernel", ["cosine", "linear"])
def test_feature_route_equals_dense_route(kernel):
    check_algebra_routes(DKT, "latent", kernel=kernel)
def test_probabilities_equal_an_independent_gp_regression_and_monte_carlo_softmax():
    """Textbook GP regression per class on +-1 targets (dense solves, numpy), then Monte Carlo of
    softmax over the independent class predictives, against the method's prediction."""
    g = torch.Generator().manual_seed(0)
    sx, qx = torch.randn(6, 2, generator=g), torch.randn(3, 2, generator=g)
    sy = torch.tensor([0, 1, 2, 0, 1, 2])
    ep = Episode(sx, sy, qx, torch.tensor([0, 1, 2]), way=3, shot=2, info={"seed": 4})
    method = DKT(IdentityBackbone(2), way=3, kernel=RBFKernel(2)).eval()
    with torch.no_grad():
        method.mean.fill_(0.2)
        probs = method.predict(ep).probs.double().numpy()
    X, Z = sx.double().numpy(), qx.double().numpy()

    def k(a, b):
        return np.exp(-0.5 * ((a[:, None] - b[None]) ** 2).sum(-1))

    A = k(X, X) + 0.1 * np.eye(6)
    targets = 2 * np.eye(3)[sy.numpy()].T - 1  # [C, n]
    mean = 0.2 + k(Z, X) @ np.linalg.solve(A, (targets - 0.2).T)  # [Q, C]
    var = 1 - np.einsum("qn,nq->q", k(Z, X), np.linalg.solve(A, k(X, Z)))  # shared by classes
    rng = np.random.default_rng(1)
    f = mean[None] + np.sqrt(var)[None, :, None] * rng.standard_normal((200_000, 3, 3))
    e = np.exp(f - f.max(-1, keepdims=True))
    mc = (e / e.sum(-1, keepdims=True)).mean(0)
    assert np.allclose(probs, mc, atol=3e-3), (probs, mc)


@pytest.mark.parametrize("dtype, rtol, grad_rtol", [(torch.float32, 1e-6, 1e-5),
                                                    (torch.float64, 1e-10, 1e-10)])
@pytest.mark.parametrize("algebra", ["dense", "features"])
def test_a_batched_meta_batch_equals_the_episode_loop(dtype, rtol, grad_rtol, algebra):
    """Conv4S and the bncosine kernel's BatchNorm1d, each normalising per episode."""
    check_batched_meta_loss("dkt", dtype=dtype, rtol=rtol, grad_rtol=grad_rtol, algebra=algebra)
