"""Kernel matrices by a finite feature factor, ``K = L R^T``, and the choice of the algebra route.

A kernel with a finite feature map ``phi`` of dimension ``D`` (linear, cosine, BatchNorm-cosine,
low-order polynomial) has ``K = Phi Phi^T``; a Nystrom approximation (Williams & Seeger, NIPS 2001)
gives any kernel such a factor from ``m`` inducing points, ``Phi = K_nm L_mm^-T``. On a factor the
Gaussian-site algebra of :mod:`zoo.gp` runs in ``D x D`` (Woodbury on ``B = I + S K S``) instead of
``N x N``: ``O(N D^2)`` per factorisation instead of ``O(N^3)``. :class:`FeatureGram` stands in for
the dense ``[..., n1, n2]`` matrix wherever the GP methods pass one around (shape, diagonal,
indexing by class, ``detach``), so a method's inner loop is the same code on either route.

Routes (the GP methods' hyper-parameter ``algebra``): ``dense`` (batched Cholesky of ``N x N``),
``features`` (the kernel's exact feature map), ``nystrom`` (``inducing`` points, approximate) and
``auto``: ``features`` when the kernel has a map and its per-factorisation cost ``2 N D^2 + D^3 / 3``
is below the dense ``4 N^3 / 3`` (a Cholesky and the triangular solve for the marginals), else
``dense``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, cached_property

import numpy as np
import torch
from torch import Tensor

ROUTES = ("auto", "dense", "features", "nystrom")
PACKED_MAX_ELEMENTS = 2**23
"""Largest ``N x D (D + 1) / 2`` table of packed outer products (64 MB in float64) that a
:class:`FeatureGram` keeps for the shared-factor route (:attr:`FeatureGram.outer`)."""


@dataclass(frozen=True)
class FeatureGram:
    """``K = left @ right^T``, ``[..., n1, n2]``, from factors ``[..., n1, D]`` and ``[..., n2, D]``.

    A square Gram matrix of one point set has ``left is right``."""

    left: Tensor
    right: Tensor

    @classmethod
    def of(cls, phi: Tensor) -> FeatureGram:
        return cls(phi, phi)

    @property
    def shape(self) -> torch.Size:
        # NumPy's rule, not torch.broadcast_shapes: that one imports sympy (~1 s per process)
        batch = np.broadcast_shapes(self.left.shape[:-2], self.right.shape[:-2])
        return torch.Size((*batch, self.left.shape[-2], self.right.shape[-2]))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> torch.dtype:
        return self.left.dtype

    @property
    def device(self) -> torch.device:
        return self.left.device

    @property
    def requires_grad(self) -> bool:
        return self.left.requires_grad or self.right.requires_grad

    @property
    def rank(self) -> int:
        return self.left.shape[-1]

    def new_zeros(self, *size: int) -> Tensor:
        return self.left.new_zeros(*size)

    def detach(self) -> FeatureGram:
        return self._sharing_outer(FeatureGram(self.left.detach(), self.right.detach()), detach=True)

    def _sharing_outer(self, child: FeatureGram, detach: bool = False) -> FeatureGram:
        """``child`` (same left factor rows) with this Gram matrix's :attr:`outer` (computed once,
        here), so that an inner loop that detaches or indexes a class every step reuses it. Formed
        with autograd on even under ``no_grad``: the cache serves differentiable uses too."""
        with torch.enable_grad():
            outer = self.outer
        if outer is not None:
            child.__dict__["outer"] = outer.detach() if detach else outer
        return child

    def to(self, dtype: torch.dtype) -> FeatureGram:
        return FeatureGram(self.left.to(dtype), self.right.to(dtype))

    def diagonal(self, dim1: int = -2, dim2: int = -1) -> Tensor:
        """The diagonal ``[..., n]`` of a square Gram matrix."""
        if (dim1, dim2) != (-2, -1) or self.left.shape[-2] != self.right.shape[-2]:
            raise ValueError("FeatureGram.diagonal: only the last two axes of a square matrix")
        return (self.left * self.right).sum(-1)

    def dense(self) -> Tensor:
        return self.left @ self.right.transpose(-1, -2)

    def expand(self, batch: int) -> FeatureGram:
        """One copy per class along a new leading axis when the factors have none."""
        return FeatureGram(*(t.expand(batch, *t.shape[-2:]) if t.ndim == 2 else t
                             for t in (self.left, self.right)))

    def __getitem__(self, index: int | slice) -> FeatureGram:
        return self._sharing_outer(
            FeatureGram(*(t[index] if t.ndim > 2 else t for t in (self.left, self.right))))

    def __matmul__(self, x: Tensor) -> Tensor:
        return self.left @ (self.right.transpose(-1, -2) @ x)

    @cached_property
    def outer(self) -> Tensor | None:
        """The outer products ``phi_n phi_n^T`` of the left factor's rows, upper triangles packed,
        ``[N, D (D + 1) / 2]``, when one factor is shared by the whole batch (no leading axes, or
        expanded with stride 0) and the table has at most :data:`PACKED_MAX_ELEMENTS`; else
        ``None``. With it, ``Phi^T diag(lam_c) Phi`` for every class is the one product
        ``lam @ outer`` and the quadratic forms ``phi_n^T M_c phi_n`` are ``pack(M) @ outer^T``:
        two GEMMs per factorisation instead of batched products and triangular solves over
        ``[C, N, D]`` temporaries. Computed once per Gram matrix and reused by every inner step
        that refactorises it with new sites."""
        phi = self.left
        if any(phi.stride(i) != 0 and phi.shape[i] != 1 for i in range(phi.ndim - 2)):
            return None
        n, d = phi.shape[-2:]
        if n * d * (d + 1) // 2 > PACKED_MAX_ELEMENTS:
            return None
        return packed_outer(phi[(0,) * (phi.ndim - 2)])


@cache
def _packing(dim: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Row and column of each packed upper-triangle entry, the packed position of every entry of a
    ``dim x dim`` matrix (flattened), and the weights 1 (diagonal) / 2 (off it)."""
    rows, cols = torch.triu_indices(dim, dim, device=device)
    where = torch.empty(dim, dim, dtype=torch.long, device=device)
    where[rows, cols] = torch.arange(rows.numel(), device=device)
    where[cols, rows] = where[rows, cols]
    return rows, cols, where.flatten(), torch.where(rows == cols, 1.0, 2.0).to(device)


def packed_outer(phi: Tensor) -> Tensor:
    """``phi_n phi_n^T`` for the rows of ``phi`` ``[N, D]``, upper triangles packed."""
    rows, cols, _, _ = _packing(phi.shape[-1], phi.device)
    return phi[:, rows] * phi[:, cols]


def unpack_symmetric(packed: Tensor, dim: int) -> Tensor:
    """``[..., D, D]`` symmetric matrices from their packed upper triangles ``[..., D (D + 1) /
    2]`` (the layout of :attr:`FeatureGram.outer`); a gather, so autograd passes through."""
    return packed[..., _packing(dim, packed.device)[2]].view(*packed.shape[:-1], dim, dim)


def pack_symmetric(M: Tensor) -> Tensor:
    """The packed upper triangles of symmetric ``M`` ``[..., D, D]``, off-diagonal entries doubled:
    ``pack_symmetric(M) @ outer[n]`` is ``phi_n^T M phi_n``."""
    rows, cols, _, weight = _packing(M.shape[-1], M.device)
    return M[..., rows, cols] * weight.to(M.dtype)


Gram = Tensor | FeatureGram


def dense(K: Gram) -> Tensor:
    """``K`` as a dense tensor (a no-op for one)."""
    return K.dense() if isinstance(K, FeatureGram) else K


def nystrom_factor(K_nm: Tensor, K_mm: Tensor, cholesky) -> Tensor:
    """``Phi = K_nm L_mm^-T`` with ``L_mm L_mm^T = K_mm``, so ``Phi Phi^T = K_nm K_mm^-1 K_mn``
    (the Nystrom approximation of ``K_nn``); ``cholesky`` factorises ``K_mm`` (the jitter policy)."""
    L = cholesky(K_mm)
    return torch.linalg.solve_triangular(L, K_nm.transpose(-1, -2), upper=False).transpose(-1, -2)


def inducing_index(n: int, m: int, device: torch.device) -> Tensor:
    """``min(m, n)`` evenly spaced indices of ``n`` points: with an episode's points ordered by
    class, every class gets its share of inducing points; deterministic, so no seed is needed."""
    m = min(m, n)
    return torch.linspace(0, n - 1, m, device=device).round().long()


def choose_route(route: str, n: int, map_dim: int | None) -> str:
    """The route for ``n`` labelled points (see the module docstring); ``map_dim`` is the
    dimension of the kernel's feature map, ``None`` when it has none."""
    if route not in ROUTES:
        raise ValueError(f"unknown GP algebra route {route!r}; use one of {', '.join(ROUTES)}")
    if route == "features" and map_dim is None:
        raise ValueError("algebra=features needs a kernel with a finite feature map (linear, "
                         "cosine, bncosine, polynomial of order <= 2); use dense or nystrom")
    if route != "auto":
        return route
    if map_dim is not None and 2 * n * map_dim**2 + map_dim**3 / 3 < 4 * n**3 / 3:
        return "features"
    return "dense"
