"""The base of every Gaussian family: a distribution ``N(mean, Sigma)`` over vectors ``[..., P]``
whose covariance (or precision) is held in a structured form. A family supplies five primitives,
the base derives the rest in closed form:

* ``transform(z)``: standard-normal noise ``[..., noise_dim]`` to a sample (reparameterised);
* ``logdet_cov()``: ``log |Sigma|``;
* ``precision_quadratic(d)``: ``d^T Sigma^-1 d``;
* ``variance()``: ``diag Sigma``; ``covariance()`` / ``precision()``: dense, for small sizes;
* ``projected_variance(V)``: ``diag(V Sigma V^T)`` (dense by default, closed forms per family);
* ``trace_precision_times(q)``: ``tr(Sigma^-1 Sigma_q)``, in closed form for a member of the same
  family (and by the diagonal of ``Sigma_q`` when ``self`` is diagonal), densely otherwise;
* ``logdet_ratio(q)``: ``log |Sigma| - log |Sigma_q|`` (the difference of ``logdet_cov``, or a
  family's more accurate form).

``log_prob``, ``entropy`` and :func:`kl_divergence` are then the textbook formulas
``KL(q || p) = (tr(Sigma_p^-1 Sigma_q) + d^T Sigma_p^-1 d - P + log|Sigma_p| - log|Sigma_q|) / 2``
with ``d = mean_q - mean_p``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch
from torch import Tensor


class Gaussian(ABC):
    """``N(mean, Sigma)`` over ``[..., P]`` (leading axes are a batch of independent members)."""

    mean: Tensor

    @property
    def dim(self) -> int:
        """``P``, the event size."""
        return self.mean.shape[-1]

    @property
    def batch_shape(self) -> torch.Size:
        return self.mean.shape[:-1]

    @property
    def noise_dim(self) -> int:
        """How many standard normals :meth:`transform` takes per sample (``P`` unless the family
        needs more, as the low-rank precision does)."""
        return self.dim

    @abstractmethod
    def transform(self, z: Tensor) -> Tensor:
        """A sample for standard-normal ``z [..., *batch, noise_dim]``, differentiable in the
        parameters (the reparameterisation)."""

    @abstractmethod
    def logdet_cov(self) -> Tensor:
        """``log |Sigma|`` ``[*batch]``."""

    @abstractmethod
    def precision_quadratic(self, d: Tensor) -> Tensor:
        """``d^T Sigma^-1 d`` for ``d [..., *batch, P]``."""

    @abstractmethod
    def variance(self) -> Tensor:
        """``diag Sigma`` ``[*batch, P]``."""

    @abstractmethod
    def covariance(self) -> Tensor:
        """Dense ``Sigma`` ``[*batch, P, P]`` (``O(P^2)`` memory: small sizes and tests)."""

    @abstractmethod
    def precision(self) -> Tensor:
        """Dense ``Sigma^-1`` ``[*batch, P, P]``."""

    def projected_variance(self, V: Tensor) -> Tensor:
        """``diag(V Sigma V^T)`` ``[..., K]`` for rows ``V [..., K, P]``: the variances of the
        linear functionals ``v_k^T x`` (predictive variances ``diag(H Sigma H^T)``); this dense
        fallback is overridden by closed forms."""
        return ((V @ self.covariance()) * V).sum(-1)

    def trace_precision_times(self, q: Gaussian) -> Tensor:
        """``tr(Sigma^-1 Sigma_q)``; this dense fallback is overridden by closed forms."""
        return (self.precision() * q.covariance()).sum((-2, -1))

    def logdet_ratio(self, q: Gaussian) -> Tensor:
        """``log |Sigma| - log |Sigma_q|`` (families may compute it more accurately)."""
        return self.logdet_cov() - q.logdet_cov()

    def sample(self, n: int, *, generator: torch.Generator | None = None) -> Tensor:
        """``n`` reparameterised samples ``[n, *batch, P]``."""
        z = torch.randn(n, *self.batch_shape, self.noise_dim, generator=generator,
                        dtype=self.mean.dtype, device=self.mean.device)
        return self.transform(z)

    def log_prob(self, x: Tensor) -> Tensor:
        """``log N(x | mean, Sigma)`` for ``x [..., *batch, P]``."""
        quad = self.precision_quadratic(x - self.mean)
        return -0.5 * (self.dim * math.log(2 * math.pi) + self.logdet_cov() + quad)

    def entropy(self) -> Tensor:
        """``(P (1 + log 2 pi) + log |Sigma|) / 2``."""
        return 0.5 * (self.dim * (1 + math.log(2 * math.pi)) + self.logdet_cov())

    def kl(self, p: Gaussian) -> Tensor:
        """``KL(self || p)``, see :func:`kl_divergence`."""
        return kl_divergence(self, p)


def kl_divergence(q: Gaussian, p: Gaussian) -> Tensor:
    """``KL(q || p)`` between two Gaussians over the same ``P`` (any families; closed form without
    dense matrices when both are of one family or ``p`` is diagonal)."""
    if q.dim != p.dim:
        raise ValueError(f"KL between Gaussians of different sizes: {q.dim} and {p.dim}")
    quad = p.precision_quadratic(q.mean - p.mean)
    return 0.5 * (p.trace_precision_times(q) + quad - q.dim + p.logdet_ratio(q))


def _eye_like(x: Tensor, n: int) -> Tensor:
    return torch.eye(n, dtype=x.dtype, device=x.device)
