"""Diagonal Gaussians ``N(mean, diag var)``, the univariate parameterisations per coordinate:
natural parameters ``eta1 = mean / var``, ``eta2 = -1 / (2 var)``; mean (expectation) parameters
``mu1 = E x = mean``, ``mu2 = E x^2 = var + mean^2``. A diagonal ``p`` gives the KL from any
family in closed form: only ``diag Sigma_q`` enters ``tr(Sigma_p^-1 Sigma_q)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.gaussians.base import Gaussian


class DiagonalGaussian(Gaussian):
    """``N(mean, diag var)`` over ``[..., P]``."""

    def __init__(self, mean: Tensor, var: Tensor):
        self.mean, self.var = torch.broadcast_tensors(mean, var)

    @classmethod
    def from_precision(cls, mean: Tensor, precision: Tensor) -> DiagonalGaussian:
        return cls(mean, 1 / precision)

    @classmethod
    def from_natural(cls, eta1: Tensor, eta2: Tensor) -> DiagonalGaussian:
        """From ``eta1 = mean / var`` and ``eta2 = -1 / (2 var)``."""
        var = -0.5 / eta2
        return cls(eta1 * var, var)

    def natural(self) -> tuple[Tensor, Tensor]:
        return self.mean / self.var, -0.5 / self.var

    @classmethod
    def from_mean_parameters(cls, mu1: Tensor, mu2: Tensor) -> DiagonalGaussian:
        """From ``mu1 = E x`` and ``mu2 = E x^2``."""
        return cls(mu1, mu2 - mu1**2)

    def mean_parameters(self) -> tuple[Tensor, Tensor]:
        """``(E x, E x^2) = (mean, var + mean^2)``."""
        return self.mean, self.var + self.mean**2

    def moments(self) -> tuple[Tensor, Tensor]:
        return self.mean, self.var

    def transform(self, z: Tensor) -> Tensor:
        return self.mean + self.var.sqrt() * z

    def logdet_cov(self) -> Tensor:
        return self.var.log().sum(-1)

    def precision_quadratic(self, d: Tensor) -> Tensor:
        return (d.pow(2) / self.var).sum(-1)

    def variance(self) -> Tensor:
        return self.var

    def projected_variance(self, V: Tensor) -> Tensor:
        return (V.pow(2) * self.var[..., None, :]).sum(-1)

    def covariance(self) -> Tensor:
        return torch.diag_embed(self.var)

    def precision(self) -> Tensor:
        return torch.diag_embed(1 / self.var)

    def trace_precision_times(self, q: Gaussian) -> Tensor:
        return (q.variance() / self.var).sum(-1)
