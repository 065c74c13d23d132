"""Weight-space members of the latent-Gaussian family: a Gaussian over a linear head's weights.

With features ``phi(x) [D]`` and independent class weights ``w_c ~ N(mu_c, Sigma_c)``, the latent
``f_c(x) = phi(x)^T w_c`` is Gaussian with mean ``phi^T mu_c`` and variance ``phi^T Sigma_c phi``;
the probabilities follow from the family's shared expectation step. Under the prior
``w_c ~ N(0, s I)`` this is the GP with the linear kernel ``k(x, x') = s phi(x)^T phi(x')``, and
conditioning on the same Gaussian sites gives the same predictive (``tests/test_families.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.episode import Episode
from zoo.families.latent_gaussian import LatentGaussianMethod
from zoo.gp import DTYPE


def linear_gaussian_marginals(phi: Tensor, mean: Tensor, cov: Tensor) -> tuple[Tensor, Tensor]:
    """Latent marginals ``[Q, C]`` of ``f_c = phi^T w_c`` for features ``phi [Q, D]`` and weights
    ``w_c ~ N(mean[c], cov[c])`` (``[C, D]``, ``[C, D, D]``)."""
    phi = phi.to(DTYPE)
    f_mean = phi @ mean.T
    f_var = torch.einsum("qd,cde,qe->qc", phi, cov, phi)
    return f_mean, f_var.clamp_min(1e-12)


def gaussian_weight_posterior(phi: Tensor, lam: Tensor, nu: Tensor, prior_var: Tensor | float,
                              ) -> tuple[Tensor, Tensor]:
    """The weight posterior ``N(mean[c], cov[c])`` from the prior ``N(0, prior_var I)`` and Gaussian
    sites ``exp(nu_cn f_cn - lam_cn f_cn^2 / 2)`` on ``f_cn = phi_n^T w_c`` (``phi [N, D]``,
    ``lam, nu [C, N]``): ``cov = (I / s + Phi^T diag(lam) Phi)^-1``, ``mean = cov Phi^T nu``."""
    phi, lam, nu = phi.to(DTYPE), lam.to(DTYPE), nu.to(DTYPE)
    eye = torch.eye(phi.shape[-1], dtype=DTYPE, device=phi.device)
    precision = eye / prior_var + torch.einsum("nd,cn,ne->cde", phi, lam, phi)
    L = torch.linalg.cholesky(precision)
    cov = torch.cholesky_inverse(L)
    mean = torch.cholesky_solve((nu @ phi)[..., None], L)[..., 0]
    return mean, cov


class LastLayerMethod(LatentGaussianMethod):
    """Base of methods with a Gaussian over a linear head's weights: a subclass supplies
    :meth:`weight_posterior` for an episode; the marginals and probabilities are the family's."""

    def weight_posterior(self, episode: Episode) -> tuple[Tensor, Tensor]:
        """Mean ``[C, D]`` and covariance ``[C, D, D]`` of the head's weights given the support."""
        raise NotImplementedError(f"{type(self).__name__} must implement weight_posterior(episode)")

    def latent(self, episode: Episode) -> tuple[Tensor, Tensor]:
        mean, cov = self.weight_posterior(episode)
        return linear_gaussian_marginals(self.features(episode.query_x), mean, cov)
