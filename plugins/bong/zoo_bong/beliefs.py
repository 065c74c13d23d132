"""The five Gaussian beliefs of the BONG family and one update step of each in each geometry.

Jones et al. (2024, §4.7; notes-bong.md §2.3-2.4). Every family implements

- ``natural_step(curv, alpha, prior)``: one natural-gradient step (BONG with ``prior=None`` and
  ``alpha = 1``; BLR with ``prior`` the predicted belief),
- ``gradient_step(curv, alpha, prior)``: one plain-gradient step in the family's own coordinates
  (BOG with ``prior=None``; BBB with ``prior``),

from ``(g, G)`` (:mod:`zoo_bong.curvature`). With a prior the objective is the online VI loss and
the step uses ``g_VI = g + Lambda_0 (mu_0 - mu)``, ``G_VI = G - Lambda_0 + Lambda`` (the gradient of
``-KL(q || q_0)`` in ``(mu, Sigma)``, notes §2.1): at ``q = q_0`` these equal ``(g, G)``, which is
why BLR with one iteration and ``alpha = 1`` is BONG.

A step that leaves the belief without a positive (definite) variance raises
:class:`BeliefError` (moment parameterisations and plain-gradient rules can, notes §3.2).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.func import grad

from zoo.errors import ZooError
from zoo_bong.curvature import Curvature

FAMILIES = ("fc", "fc-mom", "dg", "dg-mom", "dlr")


class BeliefError(ZooError, FloatingPointError):
    """An update that left the belief without a positive-definite covariance."""


def _refuse(family: str, what: str) -> None:
    raise BeliefError(f"the {family} belief lost {what} after this update (the moment "
                      "parameterisation and the plain-gradient rules can, Jones et al. 2024 §5); "
                      "use a natural-parameter family (fc, dg, dlr), rule bong or blr, or a "
                      "smaller alpha")


def _positive_definite(matrix: Tensor, family: str) -> Tensor:
    """The Cholesky factor of ``matrix``, or :class:`BeliefError`."""
    chol, info = torch.linalg.cholesky_ex(matrix)
    if int(info) != 0 or not torch.isfinite(chol).all():
        _refuse(family, "positive definiteness")
    return chol


def _positive(values: Tensor, family: str) -> Tensor:
    if not (torch.isfinite(values).all() and (values > 0).all()):
        _refuse(family, "positive variances")
    return values


class Belief(ABC):
    """A Gaussian ``q(theta) = N(mu, Sigma)`` over ``P`` parameters in one parameterisation."""

    family: str
    mu: Tensor

    @abstractmethod
    def sample(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` draws ``[n, P]``."""

    @abstractmethod
    def dynamics(self, gamma: float, q: float) -> Belief:
        """The predict step ``theta_t = gamma theta_{t-1} + N(0, q I)``."""

    @abstractmethod
    def natural_step(self, curv: Curvature, alpha: float, prior: Any = None) -> Belief:
        """One natural-gradient step of the expected log-likelihood (minus ``KL(q || prior)``)."""

    @abstractmethod
    def gradient_step(self, curv: Curvature, alpha: float, prior: Any = None) -> Belief:
        """One plain-gradient step in the family's coordinates (same objective)."""

    def _eps(self, n: int, generator: torch.Generator) -> Tensor:
        return torch.randn(n, self.mu.shape[0], generator=generator).to(self.mu)


@dataclass(frozen=True)
class FullNatural(Belief):
    """FC: mean ``mu`` and precision ``prec`` (natural parameters ``(prec mu, -prec / 2)``)."""

    mu: Tensor
    prec: Tensor
    family = "fc"

    def cov(self) -> Tensor:
        return torch.cholesky_inverse(_positive_definite(self.prec, self.family))

    def sample(self, n: int, generator: torch.Generator) -> Tensor:
        chol = _positive_definite(self.prec, self.family)
        eps = self._eps(n, generator)
        return self.mu + torch.linalg.solve_triangular(chol.T, eps.T, upper=True).T

    def dynamics(self, gamma: float, q: float) -> FullNatural:
        if gamma == 1 and q == 0:
            return self
        eye = torch.eye(len(self.mu)).to(self.mu)
        return FullNatural(gamma * self.mu, torch.linalg.inv(gamma ** 2 * self.cov() + q * eye))

    def natural_step(self, curv: Curvature, alpha: float, prior: FullNatural | None = None
                     ) -> FullNatural:
        # Lambda_i = (1 - a) Lambda + a (Lambda_0 - G),  mu_i = mu + a Sigma_i g_VI  (notes §2.4)
        p = prior or self
        prec = (1 - alpha) * self.prec + alpha * (p.prec - curv.dense())
        g_vi = curv.g + p.prec @ (p.mu - self.mu)
        chol = _positive_definite(prec, self.family)
        return FullNatural(self.mu + alpha * torch.cholesky_solve(g_vi[:, None], chol)[:, 0],
                           prec)

    def gradient_step(self, curv: Curvature, alpha: float, prior: FullNatural | None = None
                      ) -> FullNatural:
        # GD on psi = (Lambda mu, -Lambda / 2): grad_psi1 = Sigma g, grad_psi2 = (2 Sigma g mu^T)_sym
        # + Sigma G Sigma; Lambda = -2 psi2 (notes §2.4, BOG; BBB with (g_VI, G_VI)).
        cov, g, big_g = self.cov(), curv.g, curv.dense()
        if prior is not None:
            g = g + prior.prec @ (prior.mu - self.mu)
            big_g = big_g - prior.prec + self.prec
        sg = cov @ g
        d_psi2 = torch.outer(sg, self.mu) + torch.outer(self.mu, sg) + cov @ big_g @ cov
        prec = self.prec - 2 * alpha * d_psi2
        chol = _positive_definite(prec, self.family)
        psi1 = self.prec @ self.mu + alpha * sg
        return FullNatural(torch.cholesky_solve(psi1[:, None], chol)[:, 0], prec)


@dataclass(frozen=True)
class FullMoment(Belief):
    """FC-mom: mean ``mu`` and covariance ``cov``."""

    mu: Tensor
    cov: Tensor
    family = "fc-mom"

    def sample(self, n: int, generator: torch.Generator) -> Tensor:
        chol = _positive_definite(self.cov, self.family)
        return self.mu + self._eps(n, generator) @ chol.T

    def dynamics(self, gamma: float, q: float) -> FullMoment:
        eye = torch.eye(len(self.mu)).to(self.mu)
        return FullMoment(gamma * self.mu, gamma ** 2 * self.cov + q * eye)

    def _vi(self, curv: Curvature, prior: FullMoment | None) -> tuple[Tensor, Tensor]:
        if prior is None:
            return curv.g, curv.dense()
        prior_prec = torch.cholesky_inverse(_positive_definite(prior.cov, self.family))
        prec = torch.cholesky_inverse(_positive_definite(self.cov, self.family))
        return (curv.g + prior_prec @ (prior.mu - self.mu),
                curv.dense() - prior_prec + prec)

    def natural_step(self, curv: Curvature, alpha: float, prior: FullMoment | None = None
                     ) -> FullMoment:
        # NGD in (mu, Sigma): mu += a Sigma g_VI, Sigma += a Sigma G_VI Sigma: first order in
        # Sigma G, hence not exact in the conjugate case (notes §2.4).
        g, big_g = self._vi(curv, prior)
        cov = self.cov + alpha * self.cov @ big_g @ self.cov
        _positive_definite(cov, self.family)
        return FullMoment(self.mu + alpha * self.cov @ g, cov)

    def gradient_step(self, curv: Curvature, alpha: float, prior: FullMoment | None = None
                      ) -> FullMoment:
        g, big_g = self._vi(curv, prior)
        cov = self.cov + 0.5 * alpha * big_g
        _positive_definite(cov, self.family)
        return FullMoment(self.mu + alpha * g, cov)


@dataclass(frozen=True)
class DiagNatural(Belief):
    """DG: mean ``mu`` and diagonal precision ``prec [P]``."""

    mu: Tensor
    prec: Tensor
    family = "dg"

    def sample(self, n: int, generator: torch.Generator) -> Tensor:
        return self.mu + self._eps(n, generator) / self.prec.sqrt()

    def dynamics(self, gamma: float, q: float) -> DiagNatural:
        return DiagNatural(gamma * self.mu, 1 / (gamma ** 2 / self.prec + q))

    def natural_step(self, curv: Curvature, alpha: float, prior: DiagNatural | None = None
                     ) -> DiagNatural:
        p = prior or self
        prec = _positive((1 - alpha) * self.prec + alpha * (p.prec - curv.diagonal()),
                         self.family)
        g_vi = curv.g + p.prec * (p.mu - self.mu)
        return DiagNatural(self.mu + alpha * g_vi / prec, prec)

    def gradient_step(self, curv: Curvature, alpha: float, prior: DiagNatural | None = None
                      ) -> DiagNatural:
        var, g, d = 1 / self.prec, curv.g, curv.diagonal()
        if prior is not None:
            g, d = g + prior.prec * (prior.mu - self.mu), d - prior.prec + self.prec
        prec = _positive(self.prec - 4 * alpha * var * self.mu * g - 2 * alpha * var ** 2 * d,
                         self.family)
        return DiagNatural((self.prec * self.mu + alpha * var * g) / prec, prec)


@dataclass(frozen=True)
class DiagMoment(Belief):
    """DG-mom: mean ``mu`` and variances ``var [P]``."""

    mu: Tensor
    var: Tensor
    family = "dg-mom"

    def sample(self, n: int, generator: torch.Generator) -> Tensor:
        return self.mu + self._eps(n, generator) * self.var.sqrt()

    def dynamics(self, gamma: float, q: float) -> DiagMoment:
        return DiagMoment(gamma * self.mu, gamma ** 2 * self.var + q)

    def _vi(self, curv: Curvature, prior: DiagMoment | None) -> tuple[Tensor, Tensor]:
        if prior is None:
            return curv.g, curv.diagonal()
        return (curv.g + (prior.mu - self.mu) / prior.var,
                curv.diagonal() - 1 / prior.var + 1 / self.var)

    def natural_step(self, curv: Curvature, alpha: float, prior: DiagMoment | None = None
                     ) -> DiagMoment:
        g, d = self._vi(curv, prior)
        var = _positive(self.var + alpha * self.var ** 2 * d, self.family)
        return DiagMoment(self.mu + alpha * self.var * g, var)

    def gradient_step(self, curv: Curvature, alpha: float, prior: DiagMoment | None = None
                      ) -> DiagMoment:
        g, d = self._vi(curv, prior)
        return DiagMoment(self.mu + alpha * g, _positive(self.var + 0.5 * alpha * d, self.family))


def woodbury_solve(ups: Tensor, w: Tensor, v: Tensor) -> Tensor:
    """``(diag(ups) + w w^T)^-1 v`` for ``v [P]`` or ``[P, K]`` in ``O(P L^2)``."""
    vector = v.ndim == 1
    v = v[:, None] if vector else v
    scaled = w / ups[:, None]
    inner = torch.eye(w.shape[1]).to(w) + w.T @ scaled
    out = v / ups[:, None] - scaled @ torch.linalg.solve(inner, scaled.T @ v)
    return out[:, 0] if vector else out


def project_low_rank(ups: Tensor, w: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """LO-FI's projection of ``diag(ups) + w w^T`` (``w [P, K]``) onto rank ``rank``: the top
    singular directions of ``w`` stay, the rest moves to the diagonal, so the diagonal of the
    precision is kept exactly (notes §2.4, DLR step 3). A thin SVD, ``O(P K^2)``."""
    u, s, _ = torch.linalg.svd(w, full_matrices=False)
    us = u * s  # columns u_j s_j, largest first
    return ups + us[:, rank:].square().sum(1), us[:, :rank]


def dlr_kl(mu: Tensor, ups: Tensor, w: Tensor, prior: DiagLowRank) -> Tensor:
    """``KL(N(mu, (ups + w w^T)^-1) || prior)`` in ``O(P L^2)`` (differentiable, for BBB)."""

    def inner(u: Tensor, v: Tensor) -> Tensor:
        return torch.eye(v.shape[1]).to(v) + (v / u[:, None]).T @ v

    scaled = w / ups[:, None]
    diag_cov = 1 / ups - (scaled @ torch.linalg.inv(inner(ups, w)) * scaled).sum(1)
    trace = (prior.ups * diag_cov).sum() + (prior.w * woodbury_solve(ups, w, prior.w)).sum()
    diff = mu - prior.mu
    maha = (prior.ups * diff.square()).sum() + (prior.w.T @ diff).square().sum()
    logdet = ups.log().sum() + torch.linalg.slogdet(inner(ups, w))[1]
    prior_logdet = prior.ups.log().sum() + torch.linalg.slogdet(inner(prior.ups, prior.w))[1]
    return 0.5 * (trace + maha - len(mu) + logdet - prior_logdet)


@dataclass(frozen=True)
class DiagLowRank(Belief):
    """DLR: mean ``mu`` and precision ``diag(ups) + w w^T`` with ``w [P, L]``."""

    mu: Tensor
    ups: Tensor
    w: Tensor
    family = "dlr"

    @property
    def rank(self) -> int:
        return self.w.shape[1]

    def sample(self, n: int, generator: torch.Generator) -> Tensor:
        # z = ups^1/2 e1 + w e2 has covariance Lambda, so Lambda^-1 z has covariance Sigma.
        e1 = self._eps(n, generator)
        e2 = torch.randn(n, self.rank, generator=generator).to(self.mu)
        z = e1 * self.ups.sqrt() + e2 @ self.w.T
        return self.mu + woodbury_solve(self.ups, self.w, z.T).T

    def dynamics(self, gamma: float, q: float) -> DiagLowRank:
        # LO-FI's predict step (notes §1): exact when q = 0 or w = 0.
        if gamma == 1 and q == 0:
            return self
        ups = 1 / (gamma ** 2 / self.ups + q)
        ratio = ups / self.ups
        inner = torch.eye(self.rank).to(self.w) + q * self.w.T @ (ratio[:, None] * self.w)
        w = gamma * ratio[:, None] * self.w @ torch.linalg.cholesky(torch.linalg.inv(inner))
        return DiagLowRank(gamma * self.mu, ups, w)

    def natural_step(self, curv: Curvature, alpha: float, prior: DiagLowRank | None = None
                     ) -> DiagLowRank:
        # Exact FC natural step on diag + [w, root] [w, root]^T, mean by Woodbury with the
        # unprojected precision, then projection back to rank L (BONG); BLR mixes the current and
        # prior factors: [sqrt(1-a) w, sqrt(a) w_0, sqrt(a) root] (notes §2.4, BLR-DLR).
        if curv.root is None:
            raise ValueError("the dlr family needs a factored curvature (not mc-hess)")
        if prior is None:
            ups, wide, g_vi = self.ups, torch.cat([self.w, curv.root], 1), curv.g
        else:
            ups = (1 - alpha) * self.ups + alpha * prior.ups
            wide = torch.cat([(1 - alpha) ** 0.5 * self.w, alpha ** 0.5 * prior.w,
                              alpha ** 0.5 * curv.root], 1)
            diff = prior.mu - self.mu
            g_vi = curv.g + prior.ups * diff + prior.w @ (prior.w.T @ diff)
        mu = self.mu + alpha * woodbury_solve(ups, wide, g_vi)
        ups, w = project_low_rank(ups, wide, self.rank)
        return DiagLowRank(mu, _positive(ups, self.family), w)

    def gradient_step(self, curv: Curvature, alpha: float, prior: DiagLowRank | None = None
                      ) -> DiagLowRank:
        # GD on (mu, ups, w) (App. E.5): with B = Sigma root, grad_Lambda E[log p] = B B^T / 2,
        # so grad_ups = diag(B B^T) / 2 and grad_w = B (B^T w); BBB adds -grad KL(q || prior).
        if curv.root is None:
            raise ValueError("the dlr family needs a factored curvature (not mc-hess)")
        b = woodbury_solve(self.ups, self.w, curv.root)
        d_mu, d_ups, d_w = curv.g, 0.5 * b.square().sum(1), b @ (b.T @ self.w)
        if prior is not None:
            k_mu, k_ups, k_w = grad(dlr_kl, argnums=(0, 1, 2))(self.mu, self.ups, self.w, prior)
            d_mu, d_ups, d_w = d_mu - k_mu, d_ups - k_ups, d_w - k_w
        return DiagLowRank(self.mu + alpha * d_mu,
                           _positive(self.ups + alpha * d_ups, self.family), self.w + alpha * d_w)


def prior_belief(family: str, mu: Tensor, variance: float, rank: int = 0) -> Belief:
    """The isotropic prior ``N(mu, variance I)`` in ``family``."""
    if family == "fc":
        return FullNatural(mu, torch.eye(len(mu)).to(mu) / variance)
    if family == "fc-mom":
        return FullMoment(mu, torch.eye(len(mu)).to(mu) * variance)
    if family == "dg":
        return DiagNatural(mu, torch.full_like(mu, 1 / variance))
    if family == "dg-mom":
        return DiagMoment(mu, torch.full_like(mu, variance))
    if family == "dlr":
        return DiagLowRank(mu, torch.full_like(mu, 1 / variance), mu.new_zeros(len(mu), rank))
    raise ValueError(f"unknown family {family!r}; choose one of {', '.join(FAMILIES)}")
