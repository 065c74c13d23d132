"""Gaussian beliefs over parameter vectors in structured families: the one place the zoo holds
Gaussians over weights (the Bayesian last layer by VI; BONG's online updates build on it).

Families (each a :class:`Gaussian` over ``[..., P]``, leading axes a batch):

* :class:`FullGaussian`: dense covariance, held as a Cholesky factor of ``Sigma``
  (``parameterisation="moment"``: ``from_moments(mean, cov)``, ``from_scale_tril(mean, L)``) or of
  ``Lambda`` (``"natural"``: ``from_precision(mean, precision)``,
  ``from_precision_tril(mean, U)``, ``from_natural(eta1, eta2)``); ``to_natural()``,
  ``to_moment()``, ``scale()`` (``S S^T = Sigma``), ``whiten(M)`` (``X^T X = M^T Sigma^-1 M``);
* :class:`DiagonalGaussian`: ``(mean, var)``; ``from_precision(mean, precision)``,
  ``from_natural(eta1, eta2)``;
* :class:`LowRankPrecisionGaussian`: ``Lambda = diag(diag) + factor factor^T``, ``factor [P, L]``;
  ``(mean, diag, factor)``, ``from_natural(eta1, diag, factor)``, ``solve_precision(V)``;
* :class:`KroneckerGaussian`: one layer ``X [n, m]``, ``vec X ~ N(vec M, A (x) B)``;
  ``(mean_matrix, row_tril, col_tril)``, ``from_moments(M, A, B)``,
  ``from_natural(eta1, A^-1, B^-1)``.

Every family has: ``mean``, ``dim``, ``batch_shape``, ``noise_dim``, ``transform(z)``
(reparameterised sample from standard normals ``[..., noise_dim]``), ``sample(n, generator=)``,
``log_prob(x)``, ``entropy()``, ``logdet_cov()``, ``precision_quadratic(d)``, ``variance()``,
``projected_variance(V)`` (``diag(V Sigma V^T)``),
``covariance()`` / ``precision()`` (dense), ``trace_precision_times(q)``, ``kl(p)``,
``natural()`` (``eta1 = Lambda mean`` first, then ``eta2 = -Lambda / 2`` in the family's form:
dense, vector, ``(diag, factor)`` or ``(A^-1, B^-1)``), ``from_natural(*natural())``,
``moments()``. :func:`kl_divergence` ``(q, p)`` works across families (closed form when both are
of one family or ``p`` is diagonal, dense otherwise).

Predictives (:mod:`zoo.gaussians.predictive`): ``plugin(fn, q)``, ``monte_carlo(fn, q, draws)``,
``linearised(fn, q, draws, link=softmax)``.
"""

from zoo.gaussians import predictive
from zoo.gaussians.base import Gaussian, kl_divergence
from zoo.gaussians.diagonal import DiagonalGaussian
from zoo.gaussians.full import FullGaussian
from zoo.gaussians.kronecker import KroneckerGaussian, kron
from zoo.gaussians.lowrank import LowRankPrecisionGaussian

__all__ = ["DiagonalGaussian", "FullGaussian", "Gaussian", "KroneckerGaussian",
           "LowRankPrecisionGaussian", "kl_divergence", "kron", "predictive"]
