"""DKT's predictive against gpytorch's exact GP, in float64.

DKT's class predictive is one GP regression per class on +-1 one-vs-rest targets with a constant
mean: in gpytorch that is a batch of ``C`` independent ``ExactGP`` models (``batch_shape = (C,)``),
the form of the authors' own implementation. gpytorch's ``model.eval()`` posterior of the latent
functions at the queries (Cholesky, no fast predictive variances) is compared with the zoo's
``DKT.latent`` (marginal means and variances) and, for the joint covariance, with the site
posterior DKT builds (``whiten``), by the dense route with a scaled RBF kernel and by the
feature-factor route with the cosine kernel (a linear kernel on L2-normalised features).
"""

import pytest
import torch
from zoo_dkt import DKT

from zoo import Episode
from zoo.kernels import CosineKernel, RBFKernel
from zoo.testing import IdentityBackbone

gpytorch = pytest.importorskip("gpytorch")

WAY, NOISE, MEAN = 3, 0.1, 0.2


class _Batched(gpytorch.models.ExactGP):
    def __init__(self, x, y, likelihood, kernel):
        super().__init__(x, y, likelihood)
        self.mean = gpytorch.means.ConstantMean(batch_shape=torch.Size([WAY]))
        self.kernel = kernel

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean(x), self.kernel(x))


def _episode(seed=0, shot=3, query=4, dim=3):
    g = torch.Generator().manual_seed(seed)
    sx = torch.randn(WAY * shot, dim, generator=g, dtype=torch.float64)
    qx = torch.randn(WAY * query, dim, generator=g, dtype=torch.float64)
    return Episode(sx, torch.arange(WAY).repeat_interleave(shot), qx,
                   torch.arange(WAY).repeat_interleave(query), way=WAY, shot=shot,
                   info={"seed": seed})


def _gpytorch_latent(kernel, x, targets, xq):
    """gpytorch's latent predictive ``f* | y``: mean ``[C, Q]`` and covariance ``[C, Q, Q]``."""
    likelihood = gpytorch.likelihoods.GaussianLikelihood(batch_shape=torch.Size([WAY])).double()
    likelihood.noise = NOISE
    model = _Batched(x.expand(WAY, *x.shape), targets, likelihood, kernel).double()
    model.mean.constant.data.fill_(MEAN)
    model.eval()
    likelihood.eval()
    with torch.no_grad(), gpytorch.settings.fast_computations(False, False, False), \
            gpytorch.settings.fast_pred_var(False), gpytorch.settings.max_cholesky_size(10**6):
        f = model(xq.expand(WAY, *xq.shape))
        return f.mean, f.covariance_matrix, likelihood.noise.detach()[0, 0]


def _dkt(kernel, algebra):
    method = DKT(IdentityBackbone(3), way=WAY, kernel=kernel, noise=NOISE, algebra=algebra)
    method = method.double().eval()
    with torch.no_grad():
        method.mean.fill_(MEAN)
    return method


def _check(method, theirs_kernel, ep, x_their, xq_their):
    targets = DKT.targets(ep.support_y, WAY)
    mean_g, cov_g, noise_g = _gpytorch_latent(theirs_kernel, x_their, targets, xq_their)
    # gpytorch stores the noise as a constrained parameter: use the value it holds
    method.raw_noise.data.fill_(float(torch.log(torch.expm1(noise_g))))
    with torch.no_grad():
        mean, var = method.latent(ep)
    torch.testing.assert_close(mean, mean_g.T, rtol=0, atol=1e-13)
    torch.testing.assert_close(var, torch.diagonal(cov_g, dim1=-2, dim2=-1).T, rtol=0, atol=1e-13)
    assert torch.equal(mean.argmax(-1), mean_g.T.argmax(-1))
    return mean_g, cov_g, noise_g


def test_dense_predictive_mean_and_covariance_agree_with_gpytorch_exact_gp():
    ep = _episode()
    method = _dkt(RBFKernel(3, lengthscale=0.9, outputscale=1.7), "dense")
    theirs = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).double()
    theirs.base_kernel.lengthscale = float(method.kernel.lengthscale.detach())
    theirs.outputscale = float(method.kernel.outputscale.detach())
    method.kernel.raw_lengthscale.data.copy_(theirs.base_kernel.raw_lengthscale.detach()[0, 0])
    method.kernel.raw_outputscale.data.copy_(theirs.raw_outputscale.detach())
    _, cov_g, noise_g = _check(method, theirs, ep, ep.support_x, ep.query_x)
    # the joint covariance of the queries, from the site posterior DKT factorises
    mats = method.kernel_matrices(ep)
    lam = torch.ones(1, len(ep.support_y), dtype=torch.float64) / noise_g
    post = method.posterior(mats.Kss, lam, torch.zeros(WAY, len(ep.support_y),
                                                       dtype=torch.float64), ep)
    V = post.whiten(mats.Ksq)
    Kqq = method.kernel(ep.query_x, ep.query_x)
    cov = Kqq - V.transpose(-1, -2) @ V
    torch.testing.assert_close(cov.expand_as(cov_g), cov_g, rtol=0, atol=1e-13)


def test_feature_route_predictive_agrees_with_gpytorch_linear_kernel_on_normalised_features():
    ep = _episode(1)
    method = _dkt(CosineKernel(3, outputscale=1.3), "features")
    assert method.route(len(ep.support_y), 3) == "features"
    theirs = gpytorch.kernels.LinearKernel().double()
    theirs.variance = float(method.kernel.outputscale.detach())
    method.kernel.raw_outputscale.data.copy_(
        torch.log(torch.expm1(theirs.variance.detach()[0, 0])))
    normalise = torch.nn.functional.normalize
    _check(method, theirs, ep, normalise(ep.support_x, dim=-1), normalise(ep.query_x, dim=-1))
