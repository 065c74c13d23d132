"""Full-covariance Gaussians, held either in moment form (a Cholesky factor ``L`` of ``Sigma``)
or in natural form (a Cholesky factor ``U`` of the precision ``Lambda``), with the natural
parameters ``eta1 = Lambda mu``, ``eta2 = -Lambda / 2``. Which factor is stored is the
parameterisation: updates of the precision (BONG's FC family, a Kalman step in information form)
keep ``U`` exact, updates of the covariance (FC-mom) keep ``L``; every quantity is available from
either, by triangular solves.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.gaussians.base import Gaussian, _eye_like


def _tri_inverse(T: Tensor) -> Tensor:
    return torch.linalg.solve_triangular(T, _eye_like(T, T.shape[-1]).expand_as(T), upper=False)


class FullGaussian(Gaussian):
    """``N(mean, Sigma)`` with a dense covariance; build it with :meth:`from_moments`,
    :meth:`from_scale_tril`, :meth:`from_precision`, :meth:`from_precision_tril` or
    :meth:`from_natural`. ``parameterisation`` is ``"moment"`` or ``"natural"``."""

    def __init__(self, mean: Tensor, tril: Tensor | None, parameterisation: str,
                 covariance: Tensor | None = None, precision: Tensor | None = None):
        if parameterisation not in ("moment", "natural"):
            raise ValueError(f"parameterisation must be 'moment' or 'natural', got "
                             f"{parameterisation!r}")
        if tril is None and (parameterisation != "moment" or covariance is None):
            raise ValueError("a FullGaussian without its Cholesky factor needs the covariance "
                             "(parameterisation 'moment')")
        self.mean, self.parameterisation = mean, parameterisation
        self._tril, self._cov, self._prec = tril, covariance, precision

    @property
    def tril(self) -> Tensor:
        """The stored Cholesky factor (``L`` of ``Sigma`` or ``U`` of ``Lambda``); for a Gaussian
        built from a dense covariance, computed on first use (``O(P^3)``)."""
        if self._tril is None:
            self._tril = torch.linalg.cholesky(self._cov)
        return self._tril

    @classmethod
    def from_moments(cls, mean: Tensor, cov: Tensor, scale_tril: Tensor | None = None,
                     precision: Tensor | None = None) -> FullGaussian:
        """From ``Sigma`` (and its Cholesky factor and precision if known); ``Sigma`` is kept, so
        :meth:`covariance` and :meth:`variance` return it and its diagonal, not ``L L^T``, and
        :meth:`precision` returns ``precision`` when given. The Cholesky factor, if not given, is
        computed when first needed (sampling, densities, KL), so a recursion that updates
        ``Sigma`` (and ``Lambda``) in ``O(P^2 K)`` per step pays ``O(P^3)`` only for those."""
        return cls(mean, scale_tril, "moment", cov, precision)

    @classmethod
    def from_scale_tril(cls, mean: Tensor, scale_tril: Tensor) -> FullGaussian:
        """``Sigma = L L^T`` for lower-triangular ``L`` with a positive diagonal."""
        return cls(mean, scale_tril, "moment")

    @classmethod
    def from_precision(cls, mean: Tensor, precision: Tensor) -> FullGaussian:
        return cls(mean, torch.linalg.cholesky(precision), "natural")

    @classmethod
    def from_precision_tril(cls, mean: Tensor, precision_tril: Tensor) -> FullGaussian:
        """``Lambda = U U^T`` for lower-triangular ``U`` with a positive diagonal."""
        return cls(mean, precision_tril, "natural")

    @classmethod
    def from_natural(cls, eta1: Tensor, eta2: Tensor) -> FullGaussian:
        """From ``eta1 = Lambda mu`` and ``eta2 = -Lambda / 2``."""
        U = torch.linalg.cholesky(-2 * eta2)
        return cls(torch.cholesky_solve(eta1[..., None], U)[..., 0], U, "natural")

    def natural(self) -> tuple[Tensor, Tensor]:
        """``(eta1, eta2) = (Lambda mu, -Lambda / 2)``."""
        lam = self.precision()
        return (lam @ self.mean[..., None])[..., 0], -0.5 * lam

    def moments(self) -> tuple[Tensor, Tensor]:
        return self.mean, self.covariance()

    def to_natural(self) -> FullGaussian:
        """The same distribution held by its precision factor."""
        if self.parameterisation == "natural":
            return self
        return FullGaussian.from_precision(self.mean, self.precision())

    def to_moment(self) -> FullGaussian:
        """The same distribution held by its covariance factor."""
        if self.parameterisation == "moment":
            return self
        return FullGaussian.from_moments(self.mean, self.covariance())

    def scale(self) -> Tensor:
        """A square root ``S`` with ``S S^T = Sigma`` (``L``, or ``U^-T``)."""
        return self.tril if self.parameterisation == "moment" else _tri_inverse(self.tril).mT

    def whiten(self, M: Tensor) -> Tensor:
        """``X`` with ``X^T X = M^T Sigma^-1 M`` for ``M [..., P, K]``."""
        if self.parameterisation == "moment":
            return torch.linalg.solve_triangular(self.tril, M, upper=False)
        return self.tril.mT @ M

    def transform(self, z: Tensor) -> Tensor:
        if self.parameterisation == "moment":
            return self.mean + (self.tril @ z[..., None])[..., 0]
        x = torch.linalg.solve_triangular(self.tril.mT, z[..., None], upper=True)
        return self.mean + x[..., 0]

    def _half_log_diag(self) -> Tensor:
        """``log diag`` of the factor, signed so that its sum is ``log |Sigma| / 2``."""
        log_diag = torch.diagonal(self.tril, dim1=-2, dim2=-1).log()
        return log_diag if self.parameterisation == "moment" else -log_diag

    def logdet_cov(self) -> Tensor:
        return 2 * self._half_log_diag().sum(-1)

    def logdet_ratio(self, q: Gaussian) -> Tensor:
        """``log |Sigma| - log |Sigma_q|``; for a full ``q``, one sum of the factors' log-diagonal
        differences, which cancel entry by entry when ``q`` is near ``self`` (a posterior near its
        prior) instead of in the difference of two large sums."""
        if isinstance(q, FullGaussian):
            return 2 * (self._half_log_diag() - q._half_log_diag()).sum(-1)
        return super().logdet_ratio(q)

    def precision_quadratic(self, d: Tensor) -> Tensor:
        return self.whiten(d[..., None]).pow(2).sum((-2, -1))

    def variance(self) -> Tensor:
        if self._cov is not None:
            return torch.diagonal(self._cov, dim1=-2, dim2=-1)
        return self.scale().pow(2).sum(-1)

    def projected_variance(self, V: Tensor) -> Tensor:
        """``||V S||^2`` row-wise; in natural form ``||U^-1 V^T||^2`` column-wise."""
        if self.parameterisation == "moment":
            return (V @ self.tril).pow(2).sum(-1)
        return torch.linalg.solve_triangular(self.tril, V.mT, upper=False).pow(2).sum(-2)

    def covariance(self) -> Tensor:
        if self._cov is not None:
            return self._cov
        if self.parameterisation == "moment":
            return self.tril @ self.tril.mT
        return torch.cholesky_inverse(self.tril)

    def precision(self) -> Tensor:
        if self._prec is not None:
            return self._prec
        if self.parameterisation == "natural":
            return self.tril @ self.tril.mT
        return torch.cholesky_inverse(self.tril)

    def trace_precision_times(self, q: Gaussian) -> Tensor:
        if isinstance(q, FullGaussian):
            return self.whiten(q.scale()).pow(2).sum((-2, -1))
        return super().trace_precision_times(q)
