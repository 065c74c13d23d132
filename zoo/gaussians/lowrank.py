"""Gaussians with a diagonal-plus-low-rank precision ``Lambda = diag(ups) + W W^T``, ``W [P, L]``
(BONG's DLR family, Jones, Chang & Murphy 2024, Sec. 4.7; LO-FI, Chang et al. 2023). Every
operation costs ``O(P L^2 + L^3)`` through the ``L x L`` capacitance ``C = I + W^T diag(ups)^-1 W``
(Woodbury, matrix determinant lemma); nothing ``P x P`` is formed except by the dense accessors.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.gaussians.base import Gaussian, _eye_like


class LowRankPrecisionGaussian(Gaussian):
    """``N(mean, (diag(diag) + factor factor^T)^-1)``, ``mean, diag [..., P]``,
    ``factor [..., P, L]``. The natural parameters are ``eta1 = Lambda mean`` and
    ``eta2 = -Lambda / 2``, with ``Lambda`` kept as ``(diag, factor)``."""

    def __init__(self, mean: Tensor, diag: Tensor, factor: Tensor):
        self.mean, self.diag, self.factor = mean, diag, factor
        self.rank = factor.shape[-1]

    @property
    def _cap_tril(self) -> Tensor:
        """Cholesky factor of the capacitance ``C = I + W^T diag^-1 W``, formed on first use (a
        belief that is only updated and read at its mean never pays its ``O(P L^2)``). Kept in
        the instance by hand rather than by ``functools.cached_property``, whose lock (before
        Python 3.12) ``torch.compile`` cannot trace."""
        tril = self.__dict__.get("_cap_tril_value")
        if tril is None:
            inner = self.factor.mT @ (self.factor / self.diag[..., None])
            tril = torch.linalg.cholesky(_eye_like(self.factor, self.rank) + inner)
            self.__dict__["_cap_tril_value"] = tril
        return tril

    @classmethod
    def from_natural(cls, eta1: Tensor, diag: Tensor, factor: Tensor) -> LowRankPrecisionGaussian:
        """From ``eta1 = Lambda mean`` and the precision's parts."""
        q = cls(torch.zeros_like(eta1), diag, factor)
        q.mean = q.solve_precision(eta1[..., None])[..., 0]
        return q

    def natural(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(eta1, diag, factor)``: ``eta1 = Lambda mean``, ``eta2 = -(diag + W W^T) / 2``."""
        eta1 = self.diag * self.mean + (self.factor @ (self.factor.mT @ self.mean[..., None]))[..., 0]
        return eta1, self.diag, self.factor

    @property
    def noise_dim(self) -> int:
        return self.dim + self.rank

    def solve_precision(self, V: Tensor) -> Tensor:
        """``Lambda^-1 V`` for ``V [..., P, K]`` by Woodbury:
        ``D^-1 V - D^-1 W C^-1 W^T D^-1 V``."""
        DV = V / self.diag[..., None]
        inner = torch.cholesky_solve(self.factor.mT @ DV, self._cap_tril)
        return DV - (self.factor @ inner) / self.diag[..., None]

    def transform(self, z: Tensor) -> Tensor:
        """``v = diag^1/2 z_1 + W z_2 ~ N(0, Lambda)``, so ``Lambda^-1 v ~ N(0, Lambda^-1)``."""
        z1, z2 = z[..., :self.dim], z[..., self.dim:]
        v = self.diag.sqrt() * z1 + (self.factor @ z2[..., None])[..., 0]
        return self.mean + self.solve_precision(v[..., None])[..., 0]

    def logdet_cov(self) -> Tensor:
        """``-log|Lambda| = -(sum log diag + log|C|)`` (matrix determinant lemma)."""
        cap = 2 * torch.diagonal(self._cap_tril, dim1=-2, dim2=-1).log().sum(-1)
        return -(self.diag.log().sum(-1) + cap)

    def precision_quadratic(self, d: Tensor) -> Tensor:
        return (self.diag * d.pow(2)).sum(-1) + (self.factor.mT @ d[..., None]).pow(2).sum((-2, -1))

    def variance(self) -> Tensor:
        """``1/diag - rowsum((D^-1 W C^-T/2)^2)``."""
        B = torch.linalg.solve_triangular(self._cap_tril, (self.factor / self.diag[..., None]).mT,
                                          upper=False)
        return 1 / self.diag - B.pow(2).sum(-2)

    def projected_variance(self, V: Tensor) -> Tensor:
        return (V.mT * self.solve_precision(V.mT)).sum(-2)

    def covariance(self) -> Tensor:
        return self.solve_precision(torch.diag_embed(torch.ones_like(self.diag)))

    def precision(self) -> Tensor:
        return torch.diag_embed(self.diag) + self.factor @ self.factor.mT

    def trace_precision_times(self, q: Gaussian) -> Tensor:
        """``tr((D + W W^T) Sigma_q) = sum diag * var_q + tr(W^T Sigma_q W)``."""
        if isinstance(q, LowRankPrecisionGaussian):
            cross = (self.factor * q.solve_precision(self.factor)).sum((-2, -1))
            return (self.diag * q.variance()).sum(-1) + cross
        return super().trace_precision_times(q)
