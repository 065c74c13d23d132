"""The exact GP marginal likelihood DKT maximises (``zoo.inference.gaussian_log_marginal``), by the
dense Cholesky route and by the feature-factor route, against gpytorch's exact marginal
log-likelihood with an RBF kernel and a Gaussian likelihood: value and gradients."""

import pytest
import torch

from zoo.gram import FeatureGram
from zoo.inference import gaussian_log_marginal

gpytorch = pytest.importorskip("gpytorch")


class _Exact(gpytorch.models.ExactGP):
    def __init__(self, x, y, likelihood, kernel):
        super().__init__(x, y, likelihood)
        self.mean = gpytorch.means.ZeroMean()
        self.kernel = kernel

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean(x), self.kernel(x))


def _gpytorch_log_marginal(kernel, x, y, noise):
    likelihood = gpytorch.likelihoods.GaussianLikelihood().double()
    likelihood.noise = noise
    model = _Exact(x, y, likelihood, kernel).double()
    model.train()
    likelihood.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    with gpytorch.settings.fast_computations(False, False, False):   # Cholesky, as the zoo
        # gpytorch divides by the number of targets; its noise as stored (a constrained parameter)
        return mll(model(x), y) * len(y), likelihood.noise.detach()[0]


def test_dense_marginal_likelihood_and_its_gradient_agree_with_gpytorch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(12, 3, generator=g, dtype=torch.float64)
    y = torch.sin(x.sum(1)) + 0.1 * torch.randn(12, generator=g, dtype=torch.float64)
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).double()
    kernel.base_kernel.lengthscale = 0.9
    kernel.outputscale = 1.7
    theirs, noise = _gpytorch_log_marginal(kernel, x, y, 0.05)
    ell, scale = kernel.base_kernel.lengthscale, kernel.outputscale
    K = scale * torch.exp(-0.5 * torch.cdist(x, x).pow(2) / ell.pow(2))
    ours = gaussian_log_marginal(K, y, noise)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=0)
    params = [kernel.base_kernel.raw_lengthscale, kernel.raw_outputscale]
    want = torch.autograd.grad(theirs, params, retain_graph=True)
    got = torch.autograd.grad(ours, params)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_feature_route_agrees_with_gpytorch_linear_kernel():
    """DKT's linear kernel on features: ``K = Phi Phi^T``, done in ``D x D`` by the zoo."""
    g = torch.Generator().manual_seed(1)
    phi = torch.randn(15, 4, generator=g, dtype=torch.float64)
    y = phi @ torch.randn(4, generator=g, dtype=torch.float64) \
        + 0.2 * torch.randn(15, generator=g, dtype=torch.float64)
    kernel = gpytorch.kernels.LinearKernel().double()
    kernel.variance = 1.0
    theirs, noise = _gpytorch_log_marginal(kernel, phi, y, 0.3)
    root = phi * kernel.variance.detach().sqrt()   # the variance as stored
    ours = gaussian_log_marginal(FeatureGram.of(root), y, noise)
    dense = gaussian_log_marginal(root @ root.T, y, noise)
    torch.testing.assert_close(ours, theirs.detach(), rtol=1e-12, atol=0)
    torch.testing.assert_close(dense, theirs.detach(), rtol=1e-12, atol=0)
