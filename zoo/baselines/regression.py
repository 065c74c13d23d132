"""Regression baselines: a context-blind Gaussian and an exact GP whose hyper-parameters are
meta-learned.

- ``constant``: every target ``~ N(mu, sigma^2)`` with ``mu, sigma`` learned across tasks (the
  family's marginal); it ignores the context, so any method that uses the context must beat it.
- ``gp``: exact GP regression with an RBF kernel (Rasmussen & Williams 2006, eq. 2.22-2.24), zero
  mean, lengthscale, signal variance and noise meta-learned by the joint log-likelihood of the
  targets given the context; its prediction is the exact Gaussian predictive of the targets
  (``joint``: posterior mean, posterior covariance plus noise), by which it is scored, and
  ``samples`` latent functions at the targets (each target ``N(f_s(x), noise^2)``), drawn with the
  episode's own generator, the form a neural process's prediction has (Thompson sampling uses
  them). On GP-sample tasks with the right hyper-parameters it is the oracle.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.hparams import HParam
from zoo.tasks.methods import RegressionMethod
from zoo.tasks.regression import RegressionEpisode, RegressionPrediction

JITTER = 1e-6


class ConstantGaussian(RegressionMethod):
    name = "constant"
    hyperparameters = {"lr": HParam(5e-2, gt=0, doc="Adam learning rate of the mean and scale")}

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.mu = nn.Parameter(torch.zeros(self.y_dim))
        self.raw_sigma = nn.Parameter(torch.zeros(self.y_dim))

    def _gaussian(self, n: int) -> tuple[Tensor, Tensor]:
        var = F.softplus(self.raw_sigma).square() + 1e-6
        return self.mu.expand(n, -1), var.expand(n, -1)

    meta_loss_name = "Gaussian negative log-likelihood per target value"

    def meta_loss(self, episode: RegressionEpisode) -> Tensor:
        mean, var = self._gaussian(len(episode.target_y))
        return F.gaussian_nll_loss(mean, episode.target_y, var, full=True)

    def predict(self, episode: RegressionEpisode) -> RegressionPrediction:
        return RegressionPrediction.gaussian(*self._gaussian(len(episode.target_y)))


class ExactGP(RegressionMethod):
    name = "gp"
    hyperparameters = {
        "lr": HParam(1e-2, gt=0, doc="Adam learning rate of the kernel hyper-parameters"),
        "lengthscale": HParam(0.75, gt=0, doc="initial RBF lengthscale"),
        "variance": HParam(0.75, gt=0, doc="initial signal variance"),
        "noise": HParam(0.1, gt=0, doc="initial observation-noise variance"),
        "samples": HParam(256, ge=1, doc="latent draws of the predictive (Thompson sampling); "
                                         "scores use the exact Gaussian"),
    }

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        h = self.hparams
        log = lambda v: torch.tensor(math.log(v), dtype=torch.float64)  # noqa: E731
        self.log_lengthscale = nn.Parameter(log(h["lengthscale"]))
        self.log_variance = nn.Parameter(log(h["variance"]))
        self.log_noise = nn.Parameter(log(h["noise"]))

    def kernel(self, a: Tensor, b: Tensor) -> Tensor:
        d2 = torch.cdist(a.double(), b.double()).square()
        return self.log_variance.exp() * torch.exp(-0.5 * d2 / self.log_lengthscale.exp() ** 2)

    def posterior(self, episode: RegressionEpisode) -> tuple[Tensor, Tensor]:
        """Mean ``[N, dy]`` and covariance ``[N, N]`` of the latent function at the targets."""
        xc, yc, xt = episode.context_x, episode.context_y.double(), episode.target_x
        ktt = self.kernel(xt, xt)
        if len(xc) == 0:
            return torch.zeros(len(xt), self.y_dim, dtype=torch.float64), ktt
        noise = self.log_noise.exp() ** 2
        l = torch.linalg.cholesky(self.kernel(xc, xc) + noise * torch.eye(len(xc), dtype=ktt.dtype))
        v = torch.linalg.solve_triangular(l, self.kernel(xc, xt), upper=False)
        alpha = torch.cholesky_solve(yc, l)
        return self.kernel(xt, xc) @ alpha, ktt - v.T @ v

    def noisy(self, cov: Tensor) -> Tensor:
        """The targets' covariance from the latent one: plus the observation noise and the jitter."""
        eye = torch.eye(len(cov), dtype=cov.dtype, device=cov.device)
        return cov + (self.log_noise.exp() ** 2 + JITTER) * eye

    meta_loss_name = "negative log-likelihood of the targets given the context, per target value"

    def meta_loss(self, episode: RegressionEpisode) -> Tensor:
        """Minus the exact joint log-likelihood of the targets given the context, per target."""
        mean, cov = self.posterior(episode)
        dist = torch.distributions.MultivariateNormal(
            mean.T, scale_tril=torch.linalg.cholesky(self.noisy(cov)))
        return -dist.log_prob(episode.target_y.double().T).sum() / (len(mean) * self.y_dim)

    def predict(self, episode: RegressionEpisode) -> RegressionPrediction:
        mean, cov = self.posterior(episode)
        n, s = len(mean), int(self.hparams["samples"])
        g = torch.Generator().manual_seed(int(episode.info.get("seed", 0)))
        eps = torch.randn((s, n, self.y_dim), generator=g, dtype=torch.float64)
        l = torch.linalg.cholesky(cov + JITTER * torch.eye(n, dtype=cov.dtype))
        f = mean + torch.einsum("ij,sjd->sid", l, eps.to(mean.device))
        var = (self.log_noise.exp() ** 2).expand_as(f)
        return RegressionPrediction(f.float(), var.float(),
                                    joint=(mean, self.noisy(cov).expand(self.y_dim, n, n)))
