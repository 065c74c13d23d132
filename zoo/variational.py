"""Variational algebra for latent Gaussian models with factorised likelihoods, shared by the
inner loops of the GP classifiers (mirror descent and gradient descent in MD-BFSC, Ke, Cao & Zhou,
ICML 2024).

A likelihood is seen only through its expectations under per-point Gaussian marginals
``q(f_n) = N(m_n, diag v_n)`` and their derivatives in ``m`` and ``v`` (:class:`Expectations`); the
softmax likelihood takes them from an expectation rule (:mod:`zoo.expectations`) with a fused,
hand-differentiated kernel. Two posteriors with free mean and covariance over ``f`` (in moment and
in whitened coordinates) complement the core's site form :class:`~zoo.gp.SitePosterior`; all give
marginals, the KL to the prior (the Gaussian families' :func:`zoo.gaussians.kl_divergence`) and
the predictive at new points, so the ELBO ``sum_n E_q[log p(y_n | f_n)] - sum_c KL(q_c || N(0,
K_c))`` is written once. Parameter conversions of univariate Gaussians are
:class:`zoo.gaussians.DiagonalGaussian`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from zoo.errors import NumericalError
from zoo.expectations import Rule
from zoo.gaussians import DiagonalGaussian, FullGaussian, kl_divergence
from zoo.gp import DTYPE


@dataclass
class Expectations:
    """Per-point expected log-likelihood ``ell [N]`` and its derivatives with respect to the
    marginal means ``g_m [N, C]`` and marginal variances ``g_v [N, C]``."""

    ell: Tensor
    g_m: Tensor
    g_v: Tensor


class Likelihood(Protocol):
    """A factorised likelihood, seen only through its expectations under Gaussian marginals."""

    def expectations(self, mean: Tensor, var: Tensor) -> Expectations:
        """``mean``, ``var``: ``[N, C]`` marginals of ``q(f_n)``."""
        ...


CHUNK_ELEMENTS = 2**17
"""Points x classes x draws above which :func:`softmax_draw_moments` goes block by block of
points, each block contiguous and at most this size (512 KB in float32): a whole ``[N, C, S]``
tensor (51 MB at 1,000 points, 50 classes, 256 draws) would go through memory once per pass,
page-fault on first touch on every call, and, laid out as the strides of transposed marginals
dictate (points innermost), make every reduction strided (~20x slower there). Up to it the
tensor is formed in one piece."""


def _blocks(mean: Tensor, var: Tensor, draws: Tensor) -> tuple[list[tuple[Tensor, Tensor]], Tensor]:
    """``mean``, ``var`` ``[P, C]`` whole (small problems) or in contiguous blocks of points, and
    the draws transposed, ``[C, S]``, contiguous, so that each ``[n, C, S]`` tensor is contiguous
    with the draws innermost (a 5-way episode's ``sd * z + mean``: 5x faster than with the
    transposed draws' strides)."""
    (P, C), S = mean.shape, draws.shape[0]
    if P * C * S <= CHUNK_ELEMENTS:
        return [(mean, var)], draws.T.contiguous()
    step = max(1, CHUNK_ELEMENTS // (C * S))
    return ([(mean[i:i + step].contiguous(), var[i:i + step].contiguous())
             for i in range(0, P, step)], draws.T.contiguous())


def _draw_softmax(mean: Tensor, var: Tensor, draws_t: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``s = softmax(f_s)`` ``[n, C, S]`` for ``f_s = mean + sqrt(var) * z_s`` (marginals
    ``[n, C]``, draws transposed ``[C, S]``), in the draws' dtype with the draws on the last axis,
    plus the per-draw ``logsumexp`` parts (total, shift) ``[n, 1, S]``."""
    dt = draws_t.dtype
    mean, sd = mean.to(dt)[..., None], var.clamp_min(0).sqrt().to(dt)[..., None]
    f = torch.mul(sd, draws_t).add_(mean)  # 3x faster than addcmul's broadcast in this layout
    shift = f.amax(-2, keepdim=True)
    e = f.sub_(shift).exp_()
    total = e.sum(-2, keepdim=True)
    return e.div_(total), total, shift


class _DrawMoments(torch.autograd.Function):
    """:func:`softmax_draw_moments` with a backward that recomputes the per-draw softmax instead of
    saving it: autograd would keep five ``[N, C, S]`` tensors per call, and in the unrolled
    meta-training step their allocation churn (fresh pages from the allocator on every step) cost
    more than the arithmetic (``benchmarks/md_bfsc/cost.py``). Both passes go block by block of
    points above :data:`CHUNK_ELEMENTS`.

    With ``s`` the per-draw softmax and incoming gradients ``G0 [N]`` (``E[lse]``), ``G1``
    (``E[s]``), ``G2`` (``E[s^2]``), the chain rule through ``d s_k / d f_c = s_k (delta_kc - s_c)``
    gives ``dL/df_c = s_c (G0 + G1_c + 2 G2_c s_c - sum_k (G1_k + 2 G2_k s_k) s_k) / S``;
    then ``dL/dmean = sum_s dL/df`` and ``dL/dsd = sum_s dL/df * draws``.
    """

    generate_vmap_rule = True  # a batched meta-loss (zoo.batching) vmaps both passes

    @staticmethod
    def forward(mean: Tensor, var: Tensor, draws: Tensor, weights: Tensor | None,
                ) -> tuple[Tensor, Tensor, Tensor]:
        C = mean.shape[-1]
        parts = []
        blocks, draws_t = _blocks(mean.reshape(-1, C), var.reshape(-1, C), draws)
        for m, v in blocks:
            s, total, shift = _draw_softmax(m, v, draws_t)
            if weights is None:  # s * s, not square_ (no vmap rule): the same rounding
                parts.append(((total.log_() + shift).mean((-2, -1)), s.mean(-1),
                              s.mul_(s).mean(-1)))
            else:
                parts.append((((total.log_() + shift)[..., 0, :] * weights).sum(-1),
                              (s * weights).sum(-1), (s.mul_(s) * weights).sum(-1)))
        lse, m1, m2 = (torch.cat(x) if len(parts) > 1 else x[0] for x in zip(*parts))
        return (lse.reshape(mean.shape[:-1]).to(mean.dtype), m1.reshape(mean.shape).to(mean.dtype),
                m2.reshape(mean.shape).to(mean.dtype))

    @staticmethod
    def setup_context(ctx, inputs: tuple, output: tuple) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, g0: Tensor, g1: Tensor, g2: Tensor) -> tuple[Tensor, Tensor, None, None]:
        mean, var, draws, weights = ctx.saved_tensors
        dt, (C, S) = draws.dtype, (mean.shape[-1], draws.shape[0])
        g0, g1, g2 = g0.reshape(-1).to(dt), g1.reshape(-1, C).to(dt), g2.reshape(-1, C).to(dt)
        parts, start = [], 0
        blocks, draws_t = _blocks(mean.reshape(-1, C), var.reshape(-1, C), draws)
        for m, v in blocks:
            b = slice(start, start + m.shape[0])
            start = b.stop
            s = _draw_softmax(m, v, draws_t)[0]
            if weights is None:
                a = (g1[b] / S)[..., None]                   # [n, C, 1]
                c2 = (g2[b] * (2 / S))[..., None]
                a0 = (g0[b] / S)[..., None, None]
            else:                                            # the weights in place of 1 / S
                a = g1[b][..., None] * weights               # [n, C, S]
                c2 = (g2[b] * 2)[..., None] * weights
                a0 = g0[b][..., None, None] * weights
            inner = a + c2 * s                               # G1_c + 2 G2_c s_c (scaled)
            centred = inner.mul_(s).sum(-2, keepdim=True)    # sum_k (...) s_k
            grad_f = torch.addcmul(a0 + a, c2, s).sub_(centred).mul_(s)
            parts.append((grad_f.sum(-1), (grad_f * draws_t).sum(-1)))
        grad_mean, grad_sd = (torch.cat(x) if len(parts) > 1 else x[0] for x in zip(*parts))
        grad_mean = grad_mean.reshape(mean.shape).to(mean.dtype)
        grad_sd = grad_sd.reshape(mean.shape).to(mean.dtype)
        sd = var.clamp_min(0).sqrt()
        grad_var = torch.where(var > 0, grad_sd / (2 * sd.clamp_min(1e-300)), torch.zeros_like(var))
        return grad_mean, grad_var, None, None


def softmax_draw_moments(mean: Tensor, var: Tensor, rule: Rule | Tensor
                         ) -> tuple[Tensor, Tensor, Tensor]:
    """Rule averages of ``logsumexp(f)`` ``[N]``, ``softmax(f)`` and ``softmax(f)^2`` ``[N, C]``
    over ``f_s = mean + sqrt(var) * z_s`` for marginals ``[N, C]`` and a rule's points ``z``
    ``[S, C]`` (a tensor of draws is an equal-weight rule).

    The ``[N, C, S]`` work is done in ``draws``' dtype (float32 by default: its rounding, ~1e-7,
    is far below any estimator error), block by block of contiguous points above
    :data:`CHUNK_ELEMENTS`; results come back in ``mean``'s dtype. Leading axes of ``mean`` beyond
    ``[N, C]`` are flattened into the points. This is the inner loop's whole per-point cost,
    hence written out by hand (a max-shifted exp, one sum, one division) and differentiated by
    :class:`_DrawMoments`, which keeps no ``[N, C, S]`` tensor between passes.
    """
    rule = rule if isinstance(rule, Rule) else Rule(rule)
    weights = None if rule.weights is None else rule.weights.to(rule.points.dtype)
    return _DrawMoments.apply(mean, var, rule.points, weights)


class SoftmaxMean:
    """The softmax link as a fused integrand: ``E[softmax(f)]`` by :func:`softmax_draw_moments`
    (per-point work in ``dtype``, no saved ``[N, C, S]`` tensors)."""

    def __init__(self, dtype: torch.dtype = torch.float32):
        self.dtype = dtype

    def __call__(self, f: Tensor) -> Tensor:
        return torch.softmax(f, dim=-1)

    def under_rule(self, rule: Rule, mean: Tensor, var: Tensor) -> Tensor:
        return softmax_draw_moments(mean, var, rule.to(self.dtype))[1]


class SoftmaxLikelihood:
    """``p(y_n | f_n) = softmax(f_n)_{y_n}`` with expectations over shared standard-normal draws.

    By Bonnet's and Price's theorems the derivatives are expectations too:
    ``g_m = E[y - s]`` and ``g_v = 1/2 E[diag Hessian] = 1/2 E[s^2 - s]`` with ``s = softmax(f)``;
    ``E[log s_y] = m_y - E[logsumexp f]`` with the linear part exact. The ``rule`` (an
    estimator's points and weights, :mod:`zoo.expectations`; a tensor of draws ``[S, C]`` is an
    equal-weight rule) is the same for every point, so the inner problem is deterministic given
    the episode; the per-draw work runs in ``dtype`` (see :func:`softmax_draw_moments`).
    """

    def __init__(self, onehot: Tensor, rule: Rule | Tensor, dtype: torch.dtype = torch.float32):
        self.onehot = onehot.to(DTYPE)
        self.rule = (rule if isinstance(rule, Rule) else Rule(rule)).to(dtype)

    def expectations(self, mean: Tensor, var: Tensor) -> Expectations:
        lse, s, s2 = softmax_draw_moments(mean, var, self.rule)
        ell = (mean * self.onehot).sum(-1) - lse
        return Expectations(ell, self.onehot - s, 0.5 * (s2 - s))


def mean_parameter_gradient(mean: Tensor, g_m: Tensor, g_v: Tensor) -> tuple[Tensor, Tensor]:
    """Gradient in the mean parameters ``(mu1, mu2) = (m, v + m^2)`` from the moment gradients:
    with ``v = mu2 - mu1^2``, ``d/dmu1 = g_m - 2 g_v m`` and ``d/dmu2 = g_v`` (the paper's Eq. 10;
    the authors' public code has ``g_m`` in place of ``m``)."""
    return g_m - 2 * g_v * mean, g_v


class Posterior(Protocol):
    """What both loops return per class: marginals, KL to the prior, predictive at new points."""

    @property
    def mean(self) -> Tensor: ...

    @property
    def var(self) -> Tensor: ...

    def kl_to_prior(self) -> Tensor: ...

    def predict(self, Kxs: Tensor, kss: Tensor) -> tuple[Tensor, Tensor]: ...


def elbo(post: Posterior, expect: Expectations) -> Tensor:
    """``sum_n E_q[log p(y_n | f_n)] - sum_c KL(q_c || p_c)`` for expectations taken at ``post``."""
    return expect.ell.sum() - post.kl_to_prior().sum()


def covariance_factor(S: Tensor, what: str, episode: str | None) -> Tensor:
    """The Cholesky factor of an optimiser's covariance iterate, with no jitter: a step that made
    it indefinite has diverged, and a jittered factor would make the KL (which reads the factor)
    and the marginal variances (which read ``S``) describe two different Gaussians. Raises the
    zoo's :class:`NumericalError` naming the episode."""
    where = f" in episode {episode}" if episode else ""
    if not torch.isfinite(S).all():
        raise NumericalError(f"{what}{where} has non-finite entries: the inner loop diverged; "
                             "use a smaller step size rho")
    L, info = torch.linalg.cholesky_ex(S)
    if info.any():
        raise NumericalError(f"{what}{where} is not positive definite after a gradient step: "
                             "the inner loop diverged; use a smaller step size rho")
    return L


class FullGaussianPosterior:
    """``q(f_c) = N(m_c, Sigma_c)`` with free mean and covariance (the gradient-descent iterates).

    Unlike sites, a free covariance needs ``K^-1``: it comes from a Cholesky of ``K`` under the
    jitter policy (counted); a ``Sigma`` that a step made indefinite raises with the episode
    (:func:`covariance_factor`). ``LS`` may be given (the prior's factor at the start).
    """

    def __init__(self, K: Tensor, m: Tensor, S: Tensor, LK: Tensor, episode: str | None = None,
                 LS: Tensor | None = None):
        self.K, self.m, self.S, self.LK = K, m, S, LK
        self.LS = LS if LS is not None else covariance_factor(S, "variational covariance Sigma",
                                                              episode)
        self.n = K.shape[-1]

    @property
    def mean(self) -> Tensor:
        return self.m

    @property
    def var(self) -> Tensor:
        return torch.diagonal(self.S, dim1=-2, dim2=-1)

    def kl_to_prior(self) -> Tensor:
        """``KL(N(m, Sigma) || N(0, K))`` by :func:`zoo.gaussians.kl_divergence`."""
        q = FullGaussian.from_moments(self.m, self.S, scale_tril=self.LS)
        return kl_divergence(q, FullGaussian.from_scale_tril(torch.zeros_like(self.m), self.LK))

    def predict(self, Kxs: Tensor, kss: Tensor) -> tuple[Tensor, Tensor]:
        """``mean = Kxs^T K^-1 m``, ``var = kss - diag(Kxs^T K^-1 Kxs) + diag(A^T Sigma A)``."""
        Kxs, kss = Kxs.to(DTYPE), kss.to(DTYPE)
        A = torch.cholesky_solve(Kxs, self.LK)
        mean = (A.transpose(-1, -2) @ self.m[..., None])[..., 0]
        var = kss - (Kxs * A).sum(-2) + (self.LS.transpose(-1, -2) @ A).pow(2).sum(-2)
        return mean, var.clamp_min(1e-12)


class WhitenedPosterior:
    """``f_c = L_c u_c`` with ``L_c L_c^T = K_c`` and ``q(u_c) = N(a_c, S_c)``: the same Gaussian
    family over ``f`` in coordinates where the prior is ``N(0, I)``. Only a Cholesky of ``K`` (under
    the jitter policy) is needed, never its inverse; an indefinite ``S`` raises
    (:func:`covariance_factor`)."""

    def __init__(self, LK: Tensor, a: Tensor, S: Tensor, episode: str | None = None):
        self.LK, self.a, self.S = LK, a, S
        self.LS = covariance_factor(S, "whitened covariance S", episode)
        self.n = LK.shape[-1]

    @property
    def mean(self) -> Tensor:
        return (self.LK @ self.a[..., None])[..., 0]

    @property
    def var(self) -> Tensor:
        return (self.LK @ self.LS).pow(2).sum(-1)

    def kl_to_prior(self) -> Tensor:
        """``KL(N(a, S) || N(0, I))`` by :func:`zoo.gaussians.kl_divergence`."""
        q = FullGaussian.from_moments(self.a, self.S, scale_tril=self.LS)
        return kl_divergence(q, DiagonalGaussian(torch.zeros_like(self.a), torch.ones_like(self.a)))

    def predict(self, Kxs: Tensor, kss: Tensor) -> tuple[Tensor, Tensor]:
        """With ``A = L^-1 Kxs``: ``mean = A^T a``, ``var = kss - diag(A^T A) + diag(A^T S A)``."""
        Kxs, kss = Kxs.to(DTYPE), kss.to(DTYPE)
        A = torch.linalg.solve_triangular(self.LK, Kxs, upper=False)
        mean = (A.transpose(-1, -2) @ self.a[..., None])[..., 0]
        var = kss - A.pow(2).sum(-2) + (self.LS.transpose(-1, -2) @ A).pow(2).sum(-2)
        return mean, var.clamp_min(1e-12)
