"""The five Gaussian beliefs of the BONG family and one update step of each in each geometry.

Jones et al. (2024, §4.7). Every family implements

- ``natural_step(curv, alpha, prior)``: one natural-gradient step (BONG with ``prior=None`` and
  ``alpha = 1``; BLR with ``prior`` the predicted belief),
- ``gradient_step(curv, alpha, prior)``: one plain-gradient step in the family's own coordinates
  (BOG with ``prior=None``; BBB with ``prior``),

from ``(g, G)`` (:mod:`zoo_bong.curvature`). With a prior the objective is the online VI loss and
the step uses ``g_VI = g + Lambda_0 (mu_0 - mu)``, ``G_VI = G - Lambda_0 + Lambda`` (the gradient of
``-KL(q || q_0)`` in ``(mu, Sigma)``, notes §2.1): at ``q = q_0`` these equal ``(g, G)``, which is
why BLR with one iteration and ``alpha = 1`` is BONG.

A belief holds a :mod:`zoo.gaussians` member (sampling, solves, KL, predictives live there); the
family fixes which parameters the rules update. A step that leaves the belief without a positive
(definite) variance raises :class:`BeliefError` (moment parameterisations and plain-gradient rules
can, notes §3.2).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
from torch import Tensor

from zoo import ZooError
from zoo.gaussians import DiagonalGaussian, FullGaussian, Gaussian, LowRankPrecisionGaussian
from zoo_bong.curvature import Curvature

FAMILIES = ("fc", "fc-mom", "dg", "dg-mom", "dlr")
#: The families held by a fixed set of tensors whose shapes no step changes (:meth:`Belief.parts`):
#: mean and variances or precisions, and for dlr the ``P x L`` factor. A full-covariance belief's
#: low-rank terms grow with every step until they are formed into the matrix.
FIXED_SHAPE = ("dg", "dg-mom", "dlr")


class BeliefError(ZooError, FloatingPointError):
    """An update that left the belief without a positive-definite covariance."""


def _refuse(family: str, what: str) -> None:
    raise BeliefError(f"the {family} belief lost {what} after this update (the moment "
                      "parameterisation and the plain-gradient rules can, Jones et al. 2024 §5); "
                      "use a natural-parameter family (fc, dg, dlr), rule bong or blr, or a "
                      "smaller alpha")


def _cholesky(matrix: Tensor, family: str) -> Tensor:
    """The Cholesky factor of ``matrix``, or :class:`BeliefError`."""
    chol, info = torch.linalg.cholesky_ex(matrix)
    # a NaN makes the factorisation fail; an infinite pivot passes it but not the diagonal's sum
    if int(info) != 0 or not math.isfinite(float(chol.diagonal().sum())):
        _refuse(family, "positive definiteness")
    return chol


def _positive(values: Tensor, family: str, what: str = "positive variances") -> Tensor:
    """``values``, or :class:`BeliefError` (the belief lost ``what``) unless every one is positive
    and finite. Inside a compiled update (``Bong``'s ``compile = true``), which cannot stop on a
    value, a failing entry becomes NaN instead, which makes the update's result invalid."""
    if torch.compiler.is_compiling():
        return torch.where((values > 0) & (values < math.inf), values, math.nan)
    lo, hi = torch.aminmax(values.detach())  # one pass; a NaN fails the first comparison
    if not (float(lo) > 0 and float(hi) < math.inf):
        _refuse(family, what)
    return values


@dataclass(frozen=True)
class Belief(ABC):
    """A Gaussian ``q(theta)`` over ``P`` parameters, updated in the family's parameters."""

    gaussian: Gaussian
    family = ""

    @property
    def mu(self) -> Tensor:
        return self.gaussian.mean

    def sample(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` draws ``[n, P]``."""
        return self.gaussian.sample(n, generator=generator)

    def parts(self) -> tuple[Tensor, ...]:
        """The tensors that hold the belief, of the same shapes after every step, for the families
        of :data:`FIXED_SHAPE` (what a compiled update takes and returns)."""
        raise NotImplementedError(f"the {self.family} belief changes shape as it is updated; "
                                  f"only {', '.join(FIXED_SHAPE)} have fixed parts")

    def with_parts(self, parts: tuple[Tensor, ...]) -> Belief:
        """The belief of this family (and mean rule) held by ``parts`` (see :meth:`parts`)."""
        raise NotImplementedError(f"only {', '.join(FIXED_SHAPE)} have fixed parts")

    def valid(self) -> Tensor:
        """A ``bool`` scalar: every part is finite and the variances (or precisions) positive."""
        parts = self.parts()
        return torch.stack([p.isfinite().all() for p in parts] + [(parts[1] > 0).all()]).all()

    @abstractmethod
    def dynamics(self, gamma: float, q: float) -> Belief:
        """The predict step ``theta_t = gamma theta_{t-1} + N(0, q I)``."""

    @abstractmethod
    def natural_step(self, curv: Curvature, alpha: float, prior: Any = None) -> Belief:
        """One natural-gradient step of the expected log-likelihood (minus ``KL(q || prior)``)."""

    @abstractmethod
    def gradient_step(self, curv: Curvature, alpha: float, prior: Any = None) -> Belief:
        """One plain-gradient step in the family's coordinates (same objective)."""


def _factor(s: Tensor, family: str) -> Tensor:
    """The Cholesky factor of the symmetric ``K x K`` capacitance ``s``, or :class:`BeliefError`
    unless ``s`` is positive definite (and finite); a ``1 x 1`` one is checked by its value, with
    no factorisation."""
    if s.shape[0] == 1:
        if not 0 < float(s) < math.inf:  # a NaN fails the first comparison
            _refuse(family, "positive definiteness")
        return s.sqrt()
    chol, info = torch.linalg.cholesky_ex(s)
    # a NaN makes the factorisation fail; an infinite pivot passes it but not the diagonal's sum
    if int(info) != 0 or not math.isfinite(float(chol.diagonal().sum())):
        _refuse(family, "positive definiteness")
    return chol


def _whiten(chol: Tensor, rows: Tensor) -> Tensor:
    """``chol^-1 rows`` (``rows [K, P]``), so that ``rows^T S^-1 rows = w^T w`` for
    ``S = chol chol^T``."""
    if chol.shape[0] == 1:
        return rows / chol
    return torch.linalg.solve_triangular(chol, rows, upper=False)


def _eye(x: Tensor, k: int) -> Tensor:
    return torch.eye(k, dtype=x.dtype, device=x.device)


#: The rank at which a :class:`_PlusLowRank` forms its dense matrix before taking more terms.
FOLD_RANK = 64


class _PlusLowRank:
    """A symmetric ``P x P`` matrix held as ``base + F^T diag(d) F`` (``F [r, P]`` rows,
    ``d [r]``): the covariance or precision of a full-covariance belief after the rank-``K``
    steps taken since it was last formed.

    Adding a rank-``K`` term costs ``O(P r)`` and writes nothing ``P x P``; the product of ``n``
    rows with the matrix (what a step needs) costs one read of ``base`` and ``O(n P r)``. The
    dense matrix is formed once (``O(P^2 r)``) when it is asked for (sampling, densities, a dense
    step) or when the rank would pass :data:`FOLD_RANK`, and is then the next terms' base.
    Nothing is changed in place: a belief that a caller still holds stays as it was, and beliefs
    share only bases, which are never written."""

    __slots__ = ("base", "rows", "scale", "_dense")

    def __init__(self, base: Tensor, rows: Tensor | None = None, scale: Tensor | None = None):
        self.base, self.rows, self.scale = base, rows, scale
        self._dense = base if rows is None else None

    @property
    def rank(self) -> int:
        return 0 if self.rows is None else self.rows.shape[0]

    def dense(self) -> Tensor:
        """The matrix ``[P, P]``, formed once (``addr`` for rank one: one elementwise pass, where
        ``addmm`` copies ``base`` first)."""
        if self._dense is None:
            if self.rank == 1:
                self._dense = torch.addr(self.base, self.scale[0] * self.rows[0], self.rows[0])
            else:
                self._dense = torch.addmm(self.base, self.rows.mT * self.scale, self.rows)
        return self._dense

    def times(self, x: Tensor) -> Tensor:
        """``x M`` for rows ``x [n, P]`` (``(M x^T)^T``, ``M`` symmetric)."""
        if self._dense is not None:
            return x @ self._dense
        return torch.addmm(x @ self.base, (x @ self.rows.mT) * self.scale, self.rows)

    def plus(self, rows: Tensor, scale: Tensor) -> _PlusLowRank:
        """``M + rows^T diag(scale) rows`` (``rows [K, P]``, ``scale [K]``)."""
        if self._dense is not None or self.rank + len(rows) > FOLD_RANK:
            return _PlusLowRank(self.dense(), rows, scale)
        return _PlusLowRank(self.base, torch.cat([self.rows, rows]),
                            torch.cat([self.scale, scale]))


class _Root:
    """A square root ``S`` of a covariance (``S S^T = Sigma``) held as
    ``L (I + V_1 F_1 V_1^T) ... (I + V_n F_n V_n^T)``: ``L`` a Cholesky factor and each factor the
    symmetric square root of ``I - c V V^T``, what a downdate ``Sigma - c R R^T`` of rank ``M``
    multiplies ``S`` by (``V = S^-1 R``, :meth:`downdated`).

    Checking the downdate and sampling from its result through ``S`` takes two ``O(P^2 M)``
    passes over ``L`` and ``O(P M^2)`` per factor, where a new Cholesky factorisation takes
    ``O(P^3)``. The factors' total rank stays at most :data:`FOLD_RANK`; past it the caller
    factorises the covariance again. Nothing is changed in place."""

    __slots__ = ("tril", "factors")

    def __init__(self, tril: Tensor, factors: tuple[tuple[Tensor, Tensor, Tensor], ...] = ()):
        self.tril, self.factors = tril, factors

    @property
    def rank(self) -> int:
        return sum(v.shape[1] for v, _, _ in self.factors)

    def draws(self, mean: Tensor, z: Tensor) -> Tensor:
        """``mean + S z`` for the rows of ``z [n, P]``, as rows (``z A_n ... A_1 L^T``: the
        factors are symmetric), the last product one ``addmm`` as for a Cholesky factor."""
        for v, f, _ in reversed(self.factors):
            z = torch.addmm(z, (z @ v) @ f, v.mT)
        return torch.addmm(mean, z, self.tril.mT)

    def solve(self, r: Tensor) -> Tensor:
        """``S^-1 r`` for columns ``r [P, n]``: each factor's inverse is ``I + V H V^T``."""
        x = torch.linalg.solve_triangular(self.tril, r, upper=False)
        for v, _, h in self.factors:
            x = torch.addmm(x, v, h @ (v.mT @ x))
        return x

    def downdated(self, r: Tensor, c: float, family: str) -> _Root:
        """The square root ``S (I - c V V^T)^{1/2}`` of ``S S^T - c r r^T`` (``V = S^-1 r``), or
        :class:`BeliefError` unless that is positive definite, which it is exactly when every
        eigenvalue ``lambda`` of ``V^T V`` has ``1 - c lambda > 0``. With ``V^T V = Q diag(lambda)
        Q^T`` and ``s = sqrt(1 - c lambda)``, ``(I - c V V^T)^{1/2} = I + V F V^T`` with
        ``F = Q diag(-c / (1 + s)) Q^T`` and its inverse ``I + V H V^T`` with
        ``H = Q diag(c / (s (1 + s))) Q^T``, neither dividing by ``lambda``."""
        v = self.solve(r)
        lam, q = torch.linalg.eigh(v.mT @ v)
        s = _positive(1 - c * lam, family, "positive definiteness").sqrt()
        f = (q * (-c / (1 + s))) @ q.mT
        h = (q * (c / (s * (1 + s)))) @ q.mT
        return _Root(self.tril, self.factors + ((v, f, h),))


class _Full(Belief):
    """A full-covariance belief held by its mean and covariance ``Sigma`` (and the precision
    ``Lambda`` where a step needs it), each a :class:`_PlusLowRank`.

    A natural step of the expected log-likelihood (BONG; BLR's step from the predicted belief)
    adds a rank-``K`` term to one of ``Sigma`` or ``Lambda`` (``K`` = ``C`` for LIN-HESS, 1 for
    LIN-EF, ``M`` for MC-EF), and a plain-gradient step (BOG; BBB's from the predicted belief) a
    rank-``K`` (fc-mom) or rank-``K + 2`` (fc) one; each is applied to ``Sigma`` in covariance
    form (the Kalman update: a ``K x K`` capacitance instead of a ``P x P`` factorisation), after
    one product of ``K + 1`` rows with ``Sigma``, with positive definiteness decided on the
    capacitance. All but one of these steps need ``Sigma`` alone; the fc-mom plain-gradient step
    subtracts from ``Sigma`` and so needs ``Lambda root`` for its check, unless sampling has
    factorised ``Sigma`` (MC-EF): then the step multiplies the held square root of ``Sigma`` by
    the downdate's (:class:`_Root`), which decides positive definiteness on an ``M x M`` Gram
    matrix and which the next step samples with. Where it needs ``Lambda``, that step updates it
    too (by Woodbury, factorising once if the belief does not hold it); every other step drops it.
    An iterate of BLR or BBB away from the predicted belief mixes the two precisions
    ``(1 - alpha) Lambda + alpha Lambda_0``, which is not low-rank: that step is dense
    (``O(P^3)``), and so is fc's plain-gradient step (its capacitance is indefinite). The dense
    ``Sigma``, the :mod:`zoo.gaussians` member and the Cholesky factor are formed only when asked
    for (sampling, a density, a predictive).

    Built from a :class:`FullGaussian` (``cls(gaussian)``) or, by the steps, from its parts.
    """

    def __init__(self, gaussian: FullGaussian | None = None, *, mean: Tensor | None = None,
                 cov: _PlusLowRank | None = None, prec: _PlusLowRank | None = None):
        held = self.__dict__  # frozen: the fields and cached properties live here
        if gaussian is not None:
            held["gaussian"], mean = gaussian, gaussian.mean
        elif mean is None or cov is None:
            raise ValueError("a full-covariance belief needs a FullGaussian, or its mean and "
                             "covariance")
        held["_mean"] = mean
        if cov is not None:
            held["_sigma"] = cov
        if prec is not None:
            held["_lambda"] = prec

    @classmethod
    def from_covariance(cls, mu: Tensor, cov: Tensor) -> _Full:
        chol = _cholesky(cov, cls.family)
        return cls(FullGaussian.from_moments(mu, cov, chol, torch.cholesky_inverse(chol)))

    @classmethod
    def from_precision(cls, mu: Tensor, prec: Tensor) -> _Full:
        cov = torch.cholesky_inverse(_cholesky(prec, cls.family))
        return cls(FullGaussian.from_moments(mu, cov, precision=prec))

    def _with(self, mu: Tensor, cov: Tensor, prec: Tensor | None = None) -> _Full:
        return type(self)(FullGaussian.from_moments(mu, cov, precision=prec))

    def _stepped(self, mu: Tensor, cov: _PlusLowRank, prec: _PlusLowRank | None = None
                 ) -> _Full:
        return type(self)(mean=mu, cov=cov, prec=prec)

    @property
    def mu(self) -> Tensor:
        return self._mean

    @cached_property
    def gaussian(self) -> FullGaussian:
        """The :mod:`zoo.gaussians` member (forming ``Sigma``, and ``Lambda`` if held)."""
        held = self.__dict__
        prec = held.get("_lambda")
        return FullGaussian.from_moments(self._mean, self._sigma.dense(), held.get("chol"),
                                         None if prec is None else prec.dense())

    @cached_property
    def _sigma(self) -> _PlusLowRank:
        return _PlusLowRank(self.gaussian.covariance())

    @cached_property
    def _lambda(self) -> _PlusLowRank:
        """``Lambda``: held, or ``Sigma^-1`` by one Cholesky factorisation (``O(P^3)``, once)."""
        return _PlusLowRank(self.gaussian.precision())

    @property
    def cov(self) -> Tensor:
        return self._sigma.dense()

    @property
    def prec(self) -> Tensor:
        return self._lambda.dense()

    @cached_property
    def chol(self) -> Tensor:
        """The Cholesky factor ``L`` of ``Sigma`` (``O(P^3)``, once: sampling needs it)."""
        if "gaussian" in self.__dict__:
            return self.gaussian.tril
        return _cholesky(self.cov, self.family)

    def sample(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` draws ``mu + S z`` for a square root ``S`` of ``Sigma``: the Cholesky factor
        (one ``[n, P] x [P, P]`` product) or, where a downdating step left one, its
        :class:`_Root`."""
        z = torch.randn(n, len(self.mu), generator=generator, dtype=self.mu.dtype,
                        device=self.mu.device)
        root = self.__dict__.get("_root")
        if root is not None and "chol" not in self.__dict__:
            return root.draws(self.mu, z)
        return torch.addmm(self.mu, z, self.chol.mT)

    def _factorised(self) -> bool:
        """Whether a square root of ``Sigma`` is held (:attr:`chol`, computed by sampling for
        an MC curvature, or a :class:`_Root`)."""
        return "chol" in self.__dict__ or "_root" in self.__dict__

    def dynamics(self, gamma: float, q: float) -> _Full:
        if gamma == 1 and q == 0:
            return self
        eye = _eye(self.mu, len(self.mu))
        return self._with(gamma * self.mu, gamma ** 2 * self.cov + q * eye)

    def _vi(self, curv: Curvature, prior: _Full) -> tuple[Tensor, Tensor]:
        """``(g_VI, G_VI)`` against a prior other than the current belief (dense)."""
        return (curv.g + prior.prec @ (prior.mu - self.mu),
                curv.dense() - prior.prec + self.prec)


class FullNatural(_Full):
    """FC: mean and precision ``Lambda`` (natural parameters ``(Lambda mu, -Lambda / 2)``)."""

    family = "fc"

    @classmethod
    def make(cls, mu: Tensor, prec: Tensor) -> FullNatural:
        return cls.from_precision(mu, prec)

    def natural_step(self, curv: Curvature, alpha: float, prior: FullNatural | None = None
                     ) -> FullNatural:
        # Lambda_i = (1 - a) Lambda + a (Lambda_0 - G),  mu_i = mu + a Sigma_i g_VI  (notes §2.4);
        # from the prior itself Lambda_i = Lambda + a root root^T and g_VI = g: by Woodbury
        # Sigma_i = Sigma - B S^-1 B^T = Sigma - W^T W with B = Sigma root, S = I / a + root^T B
        # = C C^T (positive definite with Sigma) and W = C^-1 B^T.
        if prior is None or prior is self:
            root, g = curv.root, curv.g
            k = root.shape[1]
            both = self._sigma.times(torch.cat([root.mT, g[None]]))  # [B^T; (Sigma g)^T]
            s = both[:k] @ root
            s.diagonal().add_(1 / alpha)
            w = _whiten(_factor(s, self.family), both[:k])
            mu = torch.addmv(torch.add(self.mu, both[k], alpha=alpha), w.mT, w @ g, alpha=-alpha)
            return self._stepped(mu, self._sigma.plus(w, -torch.ones_like(w[:, 0])))
        g_vi = curv.g + prior.prec @ (prior.mu - self.mu)
        prec = (1 - alpha) * self.prec + alpha * (prior.prec - curv.dense())
        chol = _cholesky(prec, self.family)
        mu = self.mu + alpha * torch.cholesky_solve(g_vi[:, None], chol)[:, 0]
        return self._with(mu, torch.cholesky_inverse(chol), prec)

    def gradient_step(self, curv: Curvature, alpha: float, prior: FullNatural | None = None
                      ) -> FullNatural:
        # GD on psi = (Lambda mu, -Lambda / 2): grad_psi1 = Sigma g, grad_psi2 = (2 Sigma g mu^T)_sym
        # + Sigma G Sigma; Lambda = -2 psi2 (notes §2.4, BOG; BBB with (g_VI, G_VI)).
        if prior is None or prior is self:
            # Lambda' = Lambda + U C U^T with U = [Sigma root, s, mu], s = Sigma g and
            # C = diag(2a I_K, [[0, -2a], [-2a, 0]]) (one negative eigenvalue); psi1' =
            # Lambda mu + a s, so mu' = Sigma' psi1' = mu + Sigma' U w, w = a e_s - C U^T mu.
            # Sigma' = Sigma - B S^-1 B^T (B = Sigma U, S = C^-1 + U^T B), positive definite
            # exactly when S has one negative eigenvalue and none zero (Haynsworth's inertia
            # additivity applied to [[Lambda, U], [U^T, -C^-1]] both ways).
            k = curv.root.shape[1]
            u_t = torch.cat([self._sigma.times(torch.cat([curv.root.mT, curv.g[None]])),
                             self.mu[None]])  # U^T [K + 2, P]
            b_t = self._sigma.times(u_t)  # B^T
            c_inv = torch.zeros(k + 2, k + 2, dtype=b_t.dtype, device=b_t.device)
            c_inv[:k, :k] = _eye(b_t, k) / (2 * alpha)
            c_inv[k, k + 1] = c_inv[k + 1, k] = -1 / (2 * alpha)
            s = c_inv + b_t @ u_t.mT
            evals = torch.linalg.eigvalsh(0.5 * (s + s.mT))
            tiny = torch.finfo(s.dtype).eps * len(s) * evals.abs().max()
            if (not torch.isfinite(evals).all() or bool((evals.abs() <= tiny).any())
                    or int((evals < 0).sum()) != 1):
                _refuse(self.family, "positive definiteness")
            # solved with S, not through its eigenvectors, whose derivative is singular at
            # repeated eigenvalues: the step stays differentiable for a caller that meta-learns
            # through it. Sigma' U = B S^-1 C^-1 (Woodbury), so Sigma' U w = B S^-1 (a C^-1 e_s -
            # U^T mu).
            solved = torch.linalg.solve(s, torch.cat([b_t, (alpha * c_inv[:, k]
                                                              - u_t @ self.mu)[:, None]], 1))
            cov = torch.addmm(self.cov, b_t.mT, solved[:, :-1], alpha=-1)
            return self._with(self.mu + solved[:, -1] @ b_t, cov)
        cov = self.cov
        g, big_g = self._vi(curv, prior)
        sg = cov @ g
        d_psi2 = torch.outer(sg, self.mu) + torch.outer(self.mu, sg) + cov @ big_g @ cov
        prec = self.prec - 2 * alpha * d_psi2
        chol = _cholesky(prec, self.family)
        mu = torch.cholesky_solve((self.prec @ self.mu + alpha * sg)[:, None], chol)[:, 0]
        return self._with(mu, torch.cholesky_inverse(chol), prec)


class FullMoment(_Full):
    """FC-mom: mean and covariance ``Sigma``."""

    family = "fc-mom"

    @classmethod
    def make(cls, mu: Tensor, cov: Tensor) -> FullMoment:
        return cls.from_covariance(mu, cov)

    def natural_step(self, curv: Curvature, alpha: float, prior: FullMoment | None = None
                     ) -> FullMoment:
        # NGD in (mu, Sigma): mu += a Sigma g_VI, Sigma += a Sigma G_VI Sigma: first order in
        # Sigma G, hence not exact in the conjugate case (notes §2.4). From the prior itself
        # (g_VI, G_VI) = (g, -root root^T): Sigma' = Sigma - a B B^T with B = Sigma root, positive
        # definite exactly when I / a - B^T Lambda B = I / a - root^T B is (Haynsworth, the
        # capacitance of Sigma + B (-a I) B^T: Lambda is not needed).
        if prior is None or prior is self:
            root, g = curv.root, curv.g
            k = root.shape[1]
            both = self._sigma.times(torch.cat([root.mT, g[None]]))
            s = both[:k] @ root
            s.neg_().diagonal().add_(1 / alpha)
            _factor(s, self.family)
            return self._stepped(torch.add(self.mu, both[k], alpha=alpha),
                                 self._sigma.plus(both[:k], s.new_full((k,), -alpha)))
        cov = self.cov
        g, big_g = self._vi(curv, prior)
        return FullMoment.make(self.mu + alpha * cov @ g, cov + alpha * cov @ big_g @ cov)

    def gradient_step(self, curv: Curvature, alpha: float, prior: FullMoment | None = None
                      ) -> FullMoment:
        # mu += a g_VI, Sigma += a G_VI / 2. From the prior itself Sigma' = Sigma - (a / 2)
        # root root^T, positive definite exactly when S = (2 / a) I - root^T Lambda root is.
        # With a square root of Sigma held (sampled from: MC-EF) the check is that of its
        # downdate (_Root.downdated), whose square root the next step samples with; past
        # FOLD_RANK the new Sigma is factorised instead. Otherwise S comes from Lambda, which the
        # step then carries by Woodbury, Lambda' = Lambda + (Lambda root) S^-1 (Lambda root)^T.
        if prior is None or prior is self:
            root = curv.root
            k = root.shape[1]
            mu = torch.add(self.mu, curv.g, alpha=alpha)
            cov = self._sigma.plus(root.mT, root.new_full((k,), -0.5 * alpha))
            if self._factorised():
                new = self._stepped(mu, cov)
                held = self.__dict__.get("_root") or _Root(self.chol)
                if held.rank + k > FOLD_RANK:
                    new.__dict__["chol"] = _cholesky(new.cov, self.family)
                else:
                    new.__dict__["_root"] = held.downdated(root, 0.5 * alpha, self.family)
                return new
            lam_root_t = self._lambda.times(root.mT)  # (Lambda root)^T
            s = lam_root_t @ root
            s.neg_().diagonal().add_(2 / alpha)
            w = _whiten(_factor(s, self.family), lam_root_t)
            return self._stepped(mu, cov, self._lambda.plus(w, torch.ones_like(w[:, 0])))
        g, big_g = self._vi(curv, prior)
        return FullMoment.make(self.mu + alpha * g, self.cov + 0.5 * alpha * big_g)


DG_MEANS = ("ngd", "vd-ekf")


@dataclass(frozen=True)
class DiagNatural(Belief):
    """DG: mean and diagonal precision, updated in natural parameters.

    ``mean_rule`` chooses the mean of a natural step (notes §2.4, "caveat on the mean"):

    - ``"ngd"``: the pure diagonal natural gradient, ``mu + alpha g_VI / prec_t``;
    - ``"vd-ekf"``: VD-EKF's (Chang et al. 2022), the mean of the exact full-covariance step from
      the diagonal belief, ``mu + alpha (D + alpha root root^T)^-1 g_VI`` with
      ``D = (1 - alpha) prec + alpha prec_0``, by Woodbury (``O(P K^2)``). With LIN-HESS and
      ``alpha = 1`` this is the EKF gain ``diag(s^2) H^T (H diag(s^2) H^T + R)^-1 (y - yhat)``
      of the reference code; the precision is the same under both rules, so the step is the
      CM-EKF followed by the reverse-KL projection onto diagonals (which keeps the mean and the
      precision's diagonal). A diagonal-only curvature (MC-HESS) has no off-diagonal part and
      both rules coincide.
    """

    mean_rule: str = "ngd"
    family = "dg"

    def __post_init__(self) -> None:
        if self.mean_rule not in DG_MEANS:
            raise ValueError(f"unknown dg mean rule {self.mean_rule!r}; choose one of "
                             f"{', '.join(DG_MEANS)}")

    @classmethod
    def make(cls, mu: Tensor, prec: Tensor, mean_rule: str = "ngd") -> DiagNatural:
        return cls(DiagonalGaussian(mu, 1 / _positive(prec, cls.family)), mean_rule)

    @property
    def prec(self) -> Tensor:
        return self.gaussian.var.reciprocal()

    def parts(self) -> tuple[Tensor, Tensor]:
        return self.gaussian.mean, self.gaussian.var

    def with_parts(self, parts: tuple[Tensor, ...]) -> DiagNatural:
        return DiagNatural(DiagonalGaussian(*parts), self.mean_rule)

    def dynamics(self, gamma: float, q: float) -> DiagNatural:
        if gamma == 1 and q == 0:
            return self
        return DiagNatural(DiagonalGaussian(gamma * self.mu, gamma ** 2 * self.gaussian.var + q),
                           self.mean_rule)

    def natural_step(self, curv: Curvature, alpha: float, prior: DiagNatural | None = None
                     ) -> DiagNatural:
        own = self.prec
        if prior is None or prior is self:  # the KL's terms vanish: (1 - a) prec + a prec = prec
            base, g_vi = own, curv.g
        else:
            base = (1 - alpha) * own + alpha * prior.prec
            g_vi = curv.g + prior.prec * (prior.mu - self.mu)
        # fused element-wise kernels (addcdiv, add with alpha), one new buffer each
        prec = _positive(torch.add(base, curv.diagonal(), alpha=-alpha), self.family)
        if self.mean_rule == "vd-ekf" and curv.root is not None:
            if base is not own:  # a belief's own precision is positive
                _positive(base, self.family)
            unprojected = LowRankPrecisionGaussian(self.mu, base, alpha ** 0.5 * curv.root)
            mu = torch.add(self.mu, unprojected.solve_precision(g_vi[:, None])[:, 0], alpha=alpha)
        else:
            mu = torch.addcdiv(self.mu, g_vi, prec, value=alpha)
        return DiagNatural(DiagonalGaussian(mu, prec.reciprocal()), self.mean_rule)

    def gradient_step(self, curv: Curvature, alpha: float, prior: DiagNatural | None = None
                      ) -> DiagNatural:
        var, g, d, own = self.gaussian.var, curv.g, curv.diagonal(), self.prec
        if prior is not None and prior is not self:  # the KL's gradient vanishes at the prior
            g, d = g + prior.prec * (prior.mu - self.mu), d - prior.prec + own
        vg = var * g
        prec = _positive(own.addcmul(self.mu, vg, value=-4 * alpha)
                         .addcmul_(var.square(), d, value=-2 * alpha), self.family)
        mu = torch.add(own * self.mu, vg, alpha=alpha).div_(prec)
        return DiagNatural(DiagonalGaussian(mu, prec.reciprocal()), self.mean_rule)


class DiagMoment(Belief):
    """DG-mom: mean and variances, updated in moment parameters."""

    family = "dg-mom"

    @property
    def var(self) -> Tensor:
        return self.gaussian.var

    def parts(self) -> tuple[Tensor, Tensor]:
        return self.gaussian.mean, self.gaussian.var

    def with_parts(self, parts: tuple[Tensor, ...]) -> DiagMoment:
        return DiagMoment(DiagonalGaussian(*parts))

    def dynamics(self, gamma: float, q: float) -> DiagMoment:
        if gamma == 1 and q == 0:
            return self
        return DiagMoment(DiagonalGaussian(gamma * self.mu, gamma ** 2 * self.var + q))

    def _vi(self, curv: Curvature, prior: DiagMoment | None) -> tuple[Tensor, Tensor]:
        if prior is None or prior is self:  # the KL's gradient vanishes at the prior
            return curv.g, curv.diagonal()
        return (curv.g + (prior.mu - self.mu) / prior.var,
                curv.diagonal() - 1 / prior.var + 1 / self.var)

    def natural_step(self, curv: Curvature, alpha: float, prior: DiagMoment | None = None
                     ) -> DiagMoment:
        g, d = self._vi(curv, prior)
        var = _positive(self.var.addcmul(self.var.square(), d, value=alpha), self.family)
        return DiagMoment(DiagonalGaussian(torch.addcmul(self.mu, self.var, g, value=alpha), var))

    def gradient_step(self, curv: Curvature, alpha: float, prior: DiagMoment | None = None
                      ) -> DiagMoment:
        g, d = self._vi(curv, prior)
        var = _positive(torch.add(self.var, d, alpha=0.5 * alpha), self.family)
        return DiagMoment(DiagonalGaussian(torch.add(self.mu, g, alpha=alpha), var))


def project_low_rank(ups: Tensor, w: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """LO-FI's projection of ``diag(ups) + w w^T`` (``w [P, K]``) onto rank ``rank``: the top
    singular directions of ``w`` stay, the rest moves to the diagonal, so the diagonal of the
    precision is kept exactly (notes §2.4, DLR step 3).

    With ``V`` the eigenvectors of the ``K x K`` Gram matrix ``w^T w`` (largest first), ``w V = U S``
    are the left singular directions already scaled by their singular values: ``w_t = (w V)[:, :L]``
    and ``ups_t = ups + rowsum((w V)[:, L:]^2)``. Nothing divides by a singular value, and since
    ``V`` is orthogonal ``(w V)(w V)^T = w w^T`` to rounding whatever the spectrum, so the diagonal
    is kept to machine precision even when ``w`` is rank-deficient; an eigenvector that rounding
    tilts only moves weight between kept and discarded directions of nearly equal size. Cost: two
    ``P x K`` products and an ``O(K^3)`` eigendecomposition (a Householder QR of the tall ``w``,
    ``O(P K^2)`` as well, is over ten times slower in LAPACK on one core; bong.md's cost section).
    """
    _, vecs = torch.linalg.eigh(w.mT @ w)  # ascending eigenvalues
    rows = vecs.flip(-1).mT @ w.mT  # [K, P]: (w V)^T, largest direction first
    return ups + rows[rank:].square().sum(0), rows[:rank].mT


def dlr_kl_gradient(q: LowRankPrecisionGaussian, p: LowRankPrecisionGaussian
                    ) -> tuple[Tensor, Tensor, Tensor]:
    """The gradient of ``KL(q || p)`` in ``q``'s ``(mu, ups, w)`` (``Lambda = diag(ups) + w w^T``),
    in closed form, ``O(P L^2)``: ``d/dmu = Lambda_p (mu - mu_p)``; with
    ``M = 2 dKL/dLambda = Sigma (Lambda - Lambda_p) Sigma = Sigma - Sigma Lambda_p Sigma``,
    ``d/dups = diag(M) / 2`` and ``d/dw = M w``. ``diag(Sigma D Sigma)`` for the diagonal ``D`` of
    ``Lambda_p`` comes from ``Sigma = A - B K B^T`` (``A = diag(ups)^-1``, ``B = A w``,
    ``K = (I + w^T A w)^-1``): ``diag(Sigma D A) - rowsum((Sigma D B) K * B)``."""
    diff = q.mean - p.mean
    d_mu = p.diag * diff + p.factor @ (p.factor.mT @ diff)
    a = 1 / q.diag
    b = a[:, None] * q.factor
    k = torch.linalg.inv(torch.eye(q.rank, dtype=a.dtype, device=a.device) + q.factor.mT @ b)
    var = q.variance()
    sds = var * p.diag * a - ((q.solve_precision(p.diag[:, None] * b) @ k) * b).sum(1)
    s_wp = q.solve_precision(p.factor)
    s_w = q.solve_precision(q.factor)
    d_ups = 0.5 * (var - sds - s_wp.square().sum(1))
    d_w = s_w - q.solve_precision(p.diag[:, None] * s_w + p.factor @ (p.factor.mT @ s_w))
    return d_mu, d_ups, d_w


class DiagLowRank(Belief):
    """DLR: mean and precision ``diag(ups) + w w^T`` with ``w [P, L]``."""

    family = "dlr"

    @classmethod
    def make(cls, mu: Tensor, ups: Tensor, w: Tensor) -> DiagLowRank:
        return cls(LowRankPrecisionGaussian(mu, _positive(ups, cls.family), w))

    @property
    def ups(self) -> Tensor:
        return self.gaussian.diag

    @property
    def w(self) -> Tensor:
        return self.gaussian.factor

    def parts(self) -> tuple[Tensor, Tensor, Tensor]:
        return self.gaussian.mean, self.gaussian.diag, self.gaussian.factor

    def with_parts(self, parts: tuple[Tensor, ...]) -> DiagLowRank:
        return DiagLowRank(LowRankPrecisionGaussian(*parts))

    def dynamics(self, gamma: float, q: float) -> DiagLowRank:
        # LO-FI's predict step (notes §1): exact when q = 0 or w = 0.
        if gamma == 1 and q == 0:
            return self
        ups = 1 / (gamma ** 2 / self.ups + q)
        ratio = ups / self.ups
        inner = torch.eye(self.w.shape[1]).to(self.w) + q * self.w.T @ (ratio[:, None] * self.w)
        w = gamma * ratio[:, None] * self.w @ torch.linalg.cholesky(torch.linalg.inv(inner))
        return DiagLowRank.make(gamma * self.mu, ups, w)

    def natural_step(self, curv: Curvature, alpha: float, prior: DiagLowRank | None = None
                     ) -> DiagLowRank:
        # Exact FC natural step on diag + [w, root] [w, root]^T, mean by Woodbury with the
        # unprojected precision, then projection back to rank L (BONG); BLR mixes the current and
        # prior factors: [sqrt(1-a) w, sqrt(a) w_0, sqrt(a) root] (notes §2.4, BLR-DLR).
        if curv.root is None:
            raise ValueError("the dlr family needs a factored curvature (not mc-hess)")
        if prior is None:
            ups, parts, g_vi = self.ups, [self.w, curv.root], curv.g
        else:
            ups = (1 - alpha) * self.ups + alpha * prior.ups
            parts = [(1 - alpha) ** 0.5 * self.w, alpha ** 0.5 * prior.w, alpha ** 0.5 * curv.root]
            diff = prior.mu - self.mu
            g_vi = curv.g + prior.ups * diff + prior.w @ (prior.w.T @ diff)
        # factors are transposes of row-major [L, P] tensors: joining them is a contiguous copy
        wide = torch.cat([part.mT for part in parts]).mT
        unprojected = LowRankPrecisionGaussian(self.mu, ups, wide)
        mu = self.mu + alpha * unprojected.solve_precision(g_vi[:, None])[:, 0]
        return DiagLowRank.make(mu, *project_low_rank(ups, wide, self.w.shape[1]))

    def gradient_step(self, curv: Curvature, alpha: float, prior: DiagLowRank | None = None
                      ) -> DiagLowRank:
        # GD on (mu, ups, w) (App. E.5): with B = Sigma root, grad_Lambda E[log p] = B B^T / 2,
        # so grad_ups = diag(B B^T) / 2 and grad_w = B (B^T w); BBB adds -grad KL(q || prior).
        if curv.root is None:
            raise ValueError("the dlr family needs a factored curvature (not mc-hess)")
        b = self.gaussian.solve_precision(curv.root)
        d_mu, d_ups, d_w = curv.g, 0.5 * b.square().sum(1), b @ (b.T @ self.w)
        if prior is not None and prior is not self:  # the KL's gradient vanishes at the prior
            k_mu, k_ups, k_w = dlr_kl_gradient(self.gaussian, prior.gaussian)
            d_mu, d_ups, d_w = d_mu - k_mu, d_ups - k_ups, d_w - k_w
        return DiagLowRank.make(self.mu + alpha * d_mu, self.ups + alpha * d_ups,
                                self.w + alpha * d_w)


def prior_belief(family: str, mu: Tensor, variance: float | Tensor, rank: int = 0,
                 dg_mean: str = "ngd") -> Belief:
    """The isotropic prior ``N(mu, variance I)`` in ``family`` (``dg_mean``: the dg family's
    :attr:`DiagNatural.mean_rule`)."""
    eye = torch.eye(len(mu)).to(mu) if family.startswith("fc") else None
    if family == "fc":
        return FullNatural.make(mu, eye / variance)
    if family == "fc-mom":
        return FullMoment.make(mu, eye * variance)
    if family == "dg":
        return DiagNatural(DiagonalGaussian(mu, torch.ones_like(mu) * variance), dg_mean)
    if family == "dg-mom":
        return DiagMoment(DiagonalGaussian(mu, torch.ones_like(mu) * variance))
    if family == "dlr":
        # the factor in the layout every step leaves it in (the transpose of [L, P] rows), so a
        # compiled update takes the prior and the stepped beliefs alike
        return DiagLowRank.make(mu, torch.ones_like(mu) / variance, mu.new_zeros(rank, len(mu)).mT)
    raise ValueError(f"unknown family {family!r}; choose one of {', '.join(FAMILIES)}")
