"""Kronecker-factored Gaussians (K-FAC) over a weight matrix ``X [n, m]`` (one layer):
``vec(X) ~ N(vec(M), A (x) B)`` with row covariance ``A [n, n]`` and column covariance
``B [m, m]``, ``Cov(X_ij, X_kl) = A_ik B_jl``, ``vec`` row-major (so ``A (x) B`` is
``torch.kron(A, B)``). Factors are held by Cholesky factors, ``A = L_A L_A^T``, so
``A (x) B = (L_A (x) L_B)(L_A (x) L_B)^T`` and a sample is ``M + L_A Z L_B^T``.

Determinant: for ``A`` ``n x n`` and ``B`` ``m x m``, ``det(A (x) B) = det(A)^m det(B)^n``. (The
last-layer VI notes, Eq. 3, swap the exponents; ``tests/test_gaussians.py`` pins the right one.)
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.gaussians.base import Gaussian


def _logdet_tril(T: Tensor) -> Tensor:
    return 2 * torch.diagonal(T, dim1=-2, dim2=-1).log().sum(-1)


def kron(A: Tensor, B: Tensor) -> Tensor:
    """Batched ``A (x) B`` ``[..., n m, n m]``."""
    n, m = A.shape[-1], B.shape[-1]
    return torch.einsum("...ik,...jl->...ijkl", A, B).reshape(*A.shape[:-2], n * m, n * m)


class KroneckerGaussian(Gaussian):
    """``vec(X) ~ N(vec(mean_matrix), A (x) B)``; ``mean`` is the flat ``[..., n m]`` view.
    The natural parameters are ``eta1 = Lambda mean`` and ``eta2 = -Lambda / 2`` with
    ``Lambda = A^-1 (x) B^-1`` kept as its two factors."""

    def __init__(self, mean_matrix: Tensor, row_tril: Tensor, col_tril: Tensor):
        self.mean_matrix, self.row_tril, self.col_tril = mean_matrix, row_tril, col_tril
        self.shape = mean_matrix.shape[-2:]
        self.mean = mean_matrix.flatten(-2)

    @classmethod
    def from_moments(cls, mean_matrix: Tensor, row_cov: Tensor, col_cov: Tensor
                     ) -> KroneckerGaussian:
        return cls(mean_matrix, torch.linalg.cholesky(row_cov), torch.linalg.cholesky(col_cov))

    @classmethod
    def from_natural(cls, eta1: Tensor, row_precision: Tensor, col_precision: Tensor
                     ) -> KroneckerGaussian:
        """From ``eta1 = Lambda vec(M)`` (flat) and the precision's factors: ``M = A E B`` with
        ``E`` the ``[n, m]`` view of ``eta1``. The factors are inverted through their Cholesky
        factors (they are positive definite): no LU, which torch 2.14's batched CPU call gets
        wrong from 150 rows on two threads (pytorch/pytorch#142815; card ``ove.md``)."""
        A, B = (torch.cholesky_inverse(torch.linalg.cholesky(P))
                for P in (row_precision, col_precision))
        E = eta1.unflatten(-1, (A.shape[-1], B.shape[-1]))
        return cls.from_moments(A @ E @ B, A, B)

    def natural(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(eta1, A^-1, B^-1)`` with ``eta1 = vec(A^-1 M B^-1)``."""
        Ai, Bi = torch.cholesky_inverse(self.row_tril), torch.cholesky_inverse(self.col_tril)
        return (Ai @ self.mean_matrix @ Bi).flatten(-2), Ai, Bi

    def moments(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(M, A, B)``."""
        return (self.mean_matrix, self.row_tril @ self.row_tril.mT,
                self.col_tril @ self.col_tril.mT)

    def transform(self, z: Tensor) -> Tensor:
        Z = z.unflatten(-1, tuple(self.shape))
        return (self.mean_matrix + self.row_tril @ Z @ self.col_tril.mT).flatten(-2)

    def logdet_cov(self) -> Tensor:
        """``m log|A| + n log|B|``."""
        n, m = self.shape
        return m * _logdet_tril(self.row_tril) + n * _logdet_tril(self.col_tril)

    def precision_quadratic(self, d: Tensor) -> Tensor:
        """``tr(A^-1 D B^-1 D^T) = ||L_A^-1 D L_B^-T||_F^2`` for ``D`` the matrix view of ``d``."""
        D = d.unflatten(-1, tuple(self.shape))
        Y = torch.linalg.solve_triangular(self.row_tril, D, upper=False)
        Y = torch.linalg.solve_triangular(self.col_tril, Y.mT, upper=False)
        return Y.pow(2).sum((-2, -1))

    def variance(self) -> Tensor:
        a = self.row_tril.pow(2).sum(-1)
        b = self.col_tril.pow(2).sum(-1)
        return (a[..., :, None] * b[..., None, :]).flatten(-2)

    def projected_variance(self, V: Tensor) -> Tensor:
        """``v^T (A (x) B) v = ||L_A^T V_k L_B||_F^2`` for ``V_k`` the matrix view of row ``k``."""
        Vk = V.unflatten(-1, tuple(self.shape))
        return (self.row_tril.mT[..., None, :, :] @ Vk @ self.col_tril[..., None, :, :]
                ).pow(2).sum((-2, -1))

    def covariance(self) -> Tensor:
        _, A, B = self.moments()
        return kron(A, B)

    def precision(self) -> Tensor:
        return kron(torch.cholesky_inverse(self.row_tril), torch.cholesky_inverse(self.col_tril))

    def trace_precision_times(self, q: Gaussian) -> Tensor:
        """``tr((A_p (x) B_p)^-1 (A_q (x) B_q)) = tr(A_p^-1 A_q) tr(B_p^-1 B_q)``."""
        if isinstance(q, KroneckerGaussian):
            ta = torch.linalg.solve_triangular(self.row_tril, q.row_tril, upper=False)
            tb = torch.linalg.solve_triangular(self.col_tril, q.col_tril, upper=False)
            return ta.pow(2).sum((-2, -1)) * tb.pow(2).sum((-2, -1))
        return super().trace_precision_times(q)
