"""OVE's Gaussian posterior given the Polya-Gamma variables, in the class weights (``C D``).

With a kernel's feature map shared by the classes, ``f_c = Phi u_c`` with ``u_c ~ N(0, I_D)``, and
the one-vs-each sites (precision ``w_m``, natural mean ``kappa_m = 1/2`` on ``psi_m = f_y(n) -
f_c(n)``) give ``U = (u_1..u_C) | w`` the precision

    A = I + sum_n L_n (x) phi_n phi_n^T,    L_n = sum_{c != y_n} w_nc (e_y - e_c)(e_y - e_c)^T,

and natural mean ``b = sum_m kappa_m (e_y - e_c) (x) phi_n``: the Woodbury twin of the pair-space
algebra (``Psi^T W Psi`` with :meth:`~zoo_ove.Pairs.factor`'s ``Psi``), assembled without the
``M = N (C - 1)`` pairs. Block ``(a, b)`` of ``A - I`` is a Laplacian in the classes,
``-H_ab`` off the diagonal and ``sum_b H_ab`` on it, with ``H = G + G^T`` and ``G_ab = sum_{n:
y_n = a} w_nb phi_n phi_n^T``: one product of the pair weights with the packed outer products
(:attr:`~zoo.inference.FeatureGram.outer`) per class, ``O(R C N D^2)``, instead of ``O(R M (C D)^2)``.
Then ``log p(y | w) = -M log 2 + (b . A^-1 b - log|A|) / 2`` and the class functions at a query,
``f(x) = (phi(x)^T u_c)_c``, have mean ``phi^T mu_c`` (``mu = A^-1 b``) and covariance
``phi^T (A^-1)_ab phi``, whose ``C x C`` blocks for all queries are one product of the packed
blocks of ``A^-1`` with the queries' outer products. Chains go :data:`CHAIN_ELEMENTS` at a time
(checkpointed where a gradient flows), so memory stays that of a few chains at any way.

``A^-1``, ``mu`` and ``log|A|`` come from a Cholesky factorisation of ``A`` (``(C D)^3``) or, with
few labelled points, through its arrow structure (:func:`arrow_pays`): each ``L_n`` is a diagonal
plus two rank-one terms in the class of the point's label,

    L_n = diag(d_n) - e_y w_n^T - w_n e_y^T,    d_n = w_n + (sum_c w_nc) e_y    (w_ny = 0),

so ``A = B + V S V^T`` with ``B`` block diagonal (class ``c``: ``I + Phi^T diag(d_:c) Phi``,
``D x D``), ``V = [e_y(n) (x) phi_n | w_n (x) phi_n]_n`` (``C D x 2 N``) and ``S = -[[0, I], [I,
0]]`` (``S^-1 = S``, ``|det S| = 1``); Woodbury and the determinant lemma give ``A^-1 = B^-1 - Z
K^-1 Z^T`` and ``log|A| = log|B| + log|det K|`` with ``Z = B^-1 V`` and the capacitance ``K = S +
V^T Z`` (``2 N x 2 N``, symmetric, indefinite: an LU factorisation), for ``2 N (C D)^2 + (2
N)^2 C D`` operations: 100 against 3,200 at 50-way 1-shot with 64 features.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from zoo.inference import JitterPolicy, pack_symmetric, packed_outer, unpack_symmetric


def inverse_costs(points: int, way: int, rank: int) -> tuple[float, float]:
    """Operations for ``A^-1`` of one chain (``C D = way * rank`` weights, ``N = points`` labelled
    points): by Cholesky and inverse, ``(C D)^3``; through the arrow, ``2 N (C D)^2 + (2 N)^2 C
    D`` (the correction ``Z K^-1 Z^T``; the blocks of ``B``, ``C (N D^2 + D^3)``, and ``K``'s
    LU, ``(2 N)^3``, are lower order where it pays)."""
    weights, k = way * rank, 2 * points
    return float(weights**3), float(k * weights**2 + k * k * weights + k**3
                                    + way * rank**2 * (points + rank))


def arrow_pays(points: int, way: int, rank: int) -> bool:
    """Whether :func:`inverse_costs` counts the arrow cheaper than the Cholesky route."""
    cholesky, arrow = inverse_costs(points, way, rank)
    return arrow < cholesky


def predictive_costs(points: int, way: int, rank: int, queries: int) -> tuple[float, float]:
    """Operations for the predictive of one chain at ``queries`` query points: through ``A^-1``
    (the cheaper of :func:`inverse_costs`, then the packed query blocks, ``C^2 D^2 Q / 2``) and
    through the arrow without it (:meth:`WeightPosterior._arrow_predictive`)."""
    k, C, D, Q = 2 * points, way, rank, queries
    direct = Q * C * (D * D + D * k + k * k + C * k) + C * (points * D * D + D**3) + k**3
    return min(inverse_costs(points, way, rank)) + C * C * D * D * Q / 2, float(direct)


def arrow_predictive_pays(points: int, way: int, rank: int, queries: int) -> bool:
    """Whether :func:`predictive_costs` counts the arrow without ``A^-1`` cheaper."""
    through_inverse, direct = predictive_costs(points, way, rank, queries)
    return direct < through_inverse


def lu_factor(K: Tensor) -> tuple[Tensor, Tensor]:
    """``torch.linalg.lu_factor`` of each matrix of the batch ``K`` on its own: on the CPU the
    batched call factorises matrices of more than ~14 rows on several threads at once, where
    MKL's row swaps are not thread-safe; with 2 threads it hangs at 150 rows and gives wrong pivots
    ("Parameter 6 was incorrect on entry to DLASWP") and a refused or wrong solve from 200 rows
    (pytorch/pytorch#142815, fix pending in #181570; every LU-based batched call, card ``ove.md``,
    ``benchmarks/scale/batched_linalg.py``). One matrix at a time, each factorisation still uses
    every thread."""
    factors = [torch.linalg.lu_factor(k) for k in K.unbind()]
    return torch.stack([lu for lu, _ in factors]), torch.stack([p for _, p in factors])


CHAIN_ELEMENTS = 2**23
"""Entries of the ``[chains, C D, C D]`` matrices formed at once (64 MB in float64): with 64
features, 5 chains at a time at 20-way, 1 at 50-way."""


@dataclass(frozen=True)
class ClassWeights:
    """The prior side of the weight-space route: the shared support factor ``phi`` ``[n, D]``
    (its packed outer products ``outer`` ``[n, D (D + 1) / 2]``), labels ``y`` ``[n]``, ``way``."""

    phi: Tensor
    outer: Tensor
    y: Tensor
    way: int

    @property
    def dim(self) -> int:
        return self.way * self.phi.shape[-1]

    def pair_weights(self, w: Tensor) -> Tensor:
        """``G + G^T`` ``[R, C, C, D (D + 1) / 2]`` (module docstring) for pair weights laid out
        ``[R, n, C]`` (zero at each point's own label)."""
        G = torch.stack([w[:, idx].transpose(-1, -2) @ self.outer[idx]
                         for idx in (torch.nonzero(self.y == a)[:, 0] for a in range(self.way))],
                        dim=1)  # [R, C (label a), C (other b), P]
        return G + G.transpose(1, 2)

    def precision(self, w: Tensor) -> Tensor:
        """``A`` ``[R, C D, C D]`` for pair weights ``[R, n, C]``."""
        D, C = self.phi.shape[-1], self.way
        H = unpack_symmetric(self.pair_weights(w), D)  # [R, C, C, D, D]
        eye_c = torch.eye(C, dtype=H.dtype, device=H.device)[:, :, None, None]
        blocks = eye_c * H.sum(2)[:, :, None] - H
        A = blocks.permute(0, 1, 3, 2, 4).reshape(-1, C * D, C * D)
        return A + torch.eye(C * D, dtype=A.dtype, device=A.device)

    def natural_mean(self) -> Tensor:
        """``b`` ``[C D]``: block ``a`` is ``(C sum_{y_n = a} phi_n - sum_n phi_n) / 2``."""
        own = torch.nn.functional.one_hot(self.y, self.way).to(self.phi.dtype)  # [n, C]
        return (0.5 * (self.way * own.T @ self.phi - self.phi.sum(0))).reshape(-1)


class WeightPosterior:
    """``U | w ~ N(A^-1 b, A^-1)`` for ``R`` chains' pair weights ``w`` ``[R, n, C]``."""

    def __init__(self, prior: ClassWeights, w: Tensor, jitter: JitterPolicy,
                 episode: str | None = None, pairs: int | None = None):
        self.prior, self.w, self.jitter, self.episode = prior, w, jitter, episode
        self.pairs = pairs if pairs is not None else prior.y.numel() * (prior.way - 1)

    def moments(self, w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``A^-1`` ``[r, C D, C D]``, ``mu = A^-1 b`` ``[r, C D]`` and ``log|A|`` ``[r]`` for a
        slice of the chains' pair weights ``w`` ``[r, n, C]``: through the arrow where it pays
        (:func:`arrow_pays`, module docstring), else by Cholesky."""
        prior = self.prior
        b = prior.natural_mean()
        if arrow_pays(prior.y.numel(), prior.way, prior.phi.shape[-1]):
            inverse, logdet = self._arrow_moments(w)
            return inverse, inverse @ b, logdet
        L = self.jitter.cholesky_pd(prior.precision(w), "A = I + sum_n L_n (x) phi phi^T",
                                    self.episode)
        mu = torch.cholesky_solve(b.expand(L.shape[0], -1)[..., None], L)[..., 0]
        logdet = 2 * torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)
        return torch.cholesky_inverse(L), mu, logdet

    def _arrow(self, w: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The pieces of Woodbury on ``A = B + V S V^T`` (module docstring) for pair weights ``w``
        ``[r, n, C]``: the Cholesky factors of ``B``'s blocks ``[r, C, D, D]``, ``Z = B^-1 V``
        ``[r, C, D, 2 n]`` (class, feature, column) and the LU factorisation of the capacitance
        ``K = S + V^T Z`` (factors ``[r, 2 n, 2 n]`` and pivots)."""
        prior = self.prior
        phi, y, C = prior.phi, prior.y, prior.way
        n, D = phi.shape
        own = torch.nn.functional.one_hot(y, C).to(w.dtype)  # [n, C]
        d = w + own * w.sum(-1, keepdim=True)  # [r, n, C]: the diagonals of the L_n
        eye = torch.eye(D, dtype=w.dtype, device=w.device)
        B = unpack_symmetric(d.transpose(-1, -2) @ prior.outer, D) + eye  # [r, C, D, D]
        LB = self.jitter.cholesky_pd(B, "B = I + Phi^T diag(d_c) Phi", self.episode)
        X = torch.cholesky_solve(phi.T.expand(*LB.shape[:-1], n), LB)  # B_c^-1 Phi^T [r, C, D, n]
        G = phi @ X  # [r, C, n, m]: phi_n^T B_c^-1 phi_m
        points = torch.arange(n, device=w.device)
        Gy = G[:, y, points]  # [r, n, m]: the class of n's label
        EE = Gy * (y[:, None] == y[None, :])
        EW = Gy * w[:, :, y].transpose(-1, -2)  # w_m at n's label
        WW = torch.einsum("rnc,rmc,rcnm->rnm", w, w, G)
        I = torch.eye(n, dtype=w.dtype, device=w.device)
        K = torch.cat([torch.cat([EE, EW - I], -1), torch.cat([EW.transpose(-1, -2) - I, WW], -1)],
                      -2)  # S + V^T B^-1 V
        Z = torch.cat([X * own.T[:, None, :], X * w.transpose(-1, -2)[:, :, None, :]], -1)
        return (LB, Z, *lu_factor(K))

    def _arrow_moments(self, w: Tensor) -> tuple[Tensor, Tensor]:
        """``A^-1 = B^-1 - Z K^-1 Z^T`` ``[r, C D, C D]`` and ``log|A| = log|B| + log|det K|``."""
        LB, Z, LU, pivots = self._arrow(w)
        r, C, D, k = Z.shape
        Z = Z.reshape(r, C * D, k)
        inverse = -(Z @ torch.linalg.lu_solve(LU, pivots, Z.transpose(-1, -2)))
        blocks = inverse.view(r, C, D, C, D).diagonal(dim1=1, dim2=3)  # [r, D, D, C]: B's blocks
        blocks.add_(torch.cholesky_inverse(LB).permute(0, 2, 3, 1))
        logdet = (2 * torch.log(torch.diagonal(LB, dim1=-2, dim2=-1)).sum((-1, -2))
                  + torch.log(torch.diagonal(LU, dim1=-2, dim2=-1).abs()).sum(-1))
        return inverse, logdet

    def _arrow_predictive(self, w: Tensor, phi_q: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`predictive`'s mean ``[r, Q, C]`` and covariance ``[r, Q, C, C]`` (exact feature
        map part) without forming ``A^-1``: with ``T_q = (I (x) phi_q)^T Z`` ``[C, 2 n]``,
        ``mu = B^-1 b - Z K^-1 Z^T b`` and ``phi_q^T (A^-1)_ab phi_q = [a = b] phi_q^T B_a^-1
        phi_q - (T_q K^-1 T_q^T)_ab``: ``Q C (D^2 + D 2n + (2 n)^2 + C 2 n)`` operations."""
        LB, Z, LU, pivots = self._arrow(w)
        r, C, D, k = Z.shape
        Q = phi_q.shape[0]
        b = self.prior.natural_mean().view(C, D)
        Zb = torch.linalg.lu_solve(LU, pivots, torch.einsum("rcdk,cd->rk", Z, b)[..., None])
        mu = (torch.cholesky_solve(b.expand(r, C, D)[..., None], LB)[..., 0]
              - torch.einsum("rcdk,rk->rcd", Z, Zb[..., 0]))
        mean = torch.einsum("qd,rcd->rqc", phi_q, mu)
        own = torch.cholesky_solve(phi_q.T.expand(r, C, D, Q), LB)  # B_c^-1 phi_q [r, C, D, Q]
        diagonal = torch.einsum("qd,rcdq->rqc", phi_q, own)
        T = torch.einsum("qd,rcdk->rqck", phi_q, Z)  # [r, Q, C, 2 n]
        KT = torch.linalg.lu_solve(LU, pivots, T.reshape(r, Q * C, k).transpose(-1, -2))
        low = T @ KT.transpose(-1, -2).reshape(r, Q, C, k).transpose(-1, -2)  # [r, Q, C, C]
        return mean, torch.diag_embed(diagonal) - 0.5 * (low + low.transpose(-1, -2))

    def _by_chunks(self, fn: Callable[[Tensor], Any]) -> list[Any]:
        """``fn`` on the chains :data:`CHAIN_ELEMENTS` at a time; where a gradient will flow,
        each chunk is checkpointed (its forward pass is redone in the backward pass instead of
        keeping every chunk's ``C D x C D`` intermediates: the memory of one chunk)."""
        step = max(1, CHAIN_ELEMENTS // self.prior.dim**2)
        chunks = self.w.split(step)
        grad = torch.is_grad_enabled() and (self.prior.phi.requires_grad
                                            or self.prior.outer.requires_grad)
        if grad and len(chunks) > 1:
            return [checkpoint(fn, w, use_reentrant=False) for w in chunks]
        return [fn(w) for w in chunks]

    def mean_log_marginal(self) -> Tensor:
        """The chains' mean ``log p(y | w)`` with its first derivative attached in closed form
        (a linear surrogate in the support's features, all a meta-gradient needs), chains
        :data:`CHAIN_ELEMENTS` at a time under ``no_grad``: ``d/dA = -(mu mu^T + A^-1) / 2`` and
        ``d/db = mu``, pulled back through the Laplacian assembly of ``A`` (module docstring):
        ``d/dH_ac = dA_aa - dA_ac``, ``d/dG_ab = d/dH_ab + d/dH_ba``, ``d/d(phi_n phi_n^T) =
        sum_b w_nb d/dG_{y_n b}``. Cheaper than autograd through the ``C D x C D`` Cholesky
        (whose backward costs several factorisations) and equal to it
        (``test_pair_space_feature_route_equals_the_dense_route``)."""
        prior, R = self.prior, self.w.shape[0]
        C, D = prior.way, prior.phi.shape[-1]
        b = prior.natural_mean()
        step = max(1, CHAIN_ELEMENTS // prior.dim**2)
        value = b.new_zeros(())
        grad_outer = torch.zeros_like(prior.outer)
        grad_b = torch.zeros_like(b)
        index = [torch.nonzero(prior.y == a)[:, 0] for a in range(C)]
        with torch.no_grad():
            for w in self.w.split(step):
                inverse, mu, logdet = self.moments(w.detach())
                value += (-math.log(2) * self.pairs + 0.5 * (mu @ b - logdet)).sum()
                grad_b += mu.sum(0)
                dA = inverse.add_(mu[:, :, None] * mu[:, None, :]).mul_(-0.5)
                dA = dA.unflatten(-1, (C, D)).unflatten(-3, (C, D)).permute(0, 1, 3, 2, 4)
                dA = 0.5 * (dA + dA.transpose(-1, -2))  # [r, C, C, D, D], blocks symmetric
                dH = torch.diagonal(dA, dim1=1, dim2=2).permute(0, 3, 1, 2)[:, :, None] - dA
                dG = pack_symmetric(dH + dH.transpose(1, 2))  # [r, C (label), C, P]
                for a, idx in enumerate(index):
                    grad_outer[idx] += torch.einsum("rnb,rbp->np", w[:, idx], dG[:, a])
        value, grad_outer, grad_b = value / R, grad_outer / R, grad_b / R
        outer, b_now = prior.outer, prior.natural_mean()
        return (value + (grad_outer * (outer - outer.detach())).sum()
                + (grad_b * (b_now - b_now.detach())).sum())

    def predictive(self, phi_q: Tensor, kqq: Tensor) -> tuple[Tensor, Tensor]:
        """Joint predictive of the class functions at queries with factor ``phi_q`` ``[Q, D]``
        and prior variances ``kqq`` ``[C, Q]``: mean ``[R, Q, C]`` and covariance ``[R, Q, C,
        C]``, ``diag(kqq - |phi_q|^2) + phi_q^T (A^-1)_ab phi_q`` (the first term is zero for an
        exact feature map and the Nystrom remainder otherwise, as in the pair-space route)."""
        C, D = self.prior.way, self.prior.phi.shape[-1]
        outer_q = packed_outer(phi_q)  # [Q, P]

        direct = arrow_predictive_pays(self.prior.y.numel(), C, D, phi_q.shape[0])

        def chunk(w: Tensor) -> tuple[Tensor, Tensor]:
            if direct:
                return self._arrow_predictive(w, phi_q)
            inverse, mu, _ = self.moments(w)
            mean = phi_q @ mu.unflatten(-1, (C, D)).transpose(-1, -2)  # [r, Q, C]
            S = inverse.unflatten(-1, (C, D)).unflatten(-3, (C, D))
            S = S.permute(0, 1, 3, 2, 4)  # [r, C, C, D, D]: block (a, b)
            packed = pack_symmetric(0.5 * (S + S.transpose(-1, -2)))  # [r, C, C, P]
            return mean, (packed @ outer_q.T).permute(0, 3, 1, 2)  # [r, Q, C, C]

        means, covs = zip(*self._by_chunks(chunk), strict=True)
        rest = kqq.T - phi_q.pow(2).sum(-1)[:, None]  # [Q, C]
        return torch.cat(means), torch.cat(covs) + torch.diag_embed(rest)

