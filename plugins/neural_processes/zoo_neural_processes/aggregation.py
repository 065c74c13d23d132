"""Context aggregation of a neural process's latent path: the per-point encodings of a context
set become the factorised Gaussian ``q(z | context)``.

- Mean aggregation (Garnelo et al. 2018b, "Neural Processes"): ``r = (1/n) sum_i s_i``, then
  ``q(z | C) = N(W_mu r, (0.1 + 0.9 sigmoid(W_s r))^2)`` (the bounded scale of Le et al. 2018 and
  Kim et al. 2019). An empty context gives ``r = 0``: a learned ``q(z | {})``.
- Bayesian aggregation (Volpp et al., ICLR 2021, eq. 8): every point is a Gaussian observation
  ``r_i ~ N(z, diag sigma_i^2)`` of ``z ~ N(mu_0, diag sigma_0^2)``; ``q(z | C)`` is the exact
  posterior, ``sigma_z^2 = 1 / (1/sigma_0^2 + sum_i 1/sigma_i^2)``,
  ``mu_z = mu_0 + sigma_z^2 * sum_i (r_i - mu_0) / sigma_i^2``; an empty context gives the prior.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def mean_aggregate(s: Tensor) -> Tensor:
    """``s [B, n, h] -> [B, h]``, the mean over the ``n`` points (zeros when ``n = 0``)."""
    return s.sum(-2) / max(s.shape[-2], 1)


def bayesian_aggregate(r: Tensor, var: Tensor, prior_mean: Tensor, prior_var: Tensor
                       ) -> tuple[Tensor, Tensor]:
    """The Gaussian posterior over ``z`` given observations ``r [B, n, d]`` with variances
    ``var [B, n, d]`` of a ``N(prior_mean, prior_var)`` prior: ``(mean, var) [B, d]``."""
    precision = 1 / prior_var + (1 / var).sum(-2)
    post_var = 1 / precision
    return prior_mean + post_var * ((r - prior_mean[..., None, :]) / var).sum(-2), post_var


class MeanAggregation(nn.Module):
    """``s [B, n, h]`` -> mean and std ``[B, d]`` of ``q(z | C)`` by mean aggregation."""

    def __init__(self, hidden: int, latent_dim: int):
        super().__init__()
        self.head = nn.Linear(hidden, 2 * latent_dim)

    def forward(self, s: Tensor) -> tuple[Tensor, Tensor]:
        mean, raw = self.head(mean_aggregate(s)).chunk(2, -1)
        return mean, 0.1 + 0.9 * torch.sigmoid(raw)


class BayesianAggregation(nn.Module):
    """``s [B, n, h]`` -> mean and std ``[B, d]`` of ``q(z | C)`` by Bayesian aggregation; the
    prior ``N(mu_0, sigma_0^2)`` is learned."""

    def __init__(self, hidden: int, latent_dim: int):
        super().__init__()
        self.head = nn.Linear(hidden, 2 * latent_dim)
        self.prior_mean = nn.Parameter(torch.zeros(latent_dim))
        self.prior_raw_var = nn.Parameter(torch.zeros(latent_dim))

    def forward(self, s: Tensor) -> tuple[Tensor, Tensor]:
        r, raw = self.head(s).chunk(2, -1)
        mean, var = bayesian_aggregate(r, F.softplus(raw) + 1e-4, self.prior_mean,
                                       F.softplus(self.prior_raw_var) + 1e-4)
        return mean, var.sqrt()
