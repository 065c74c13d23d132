"""Inner loops of MD-BFSC (Ke, Cao & Zhou, ICML 2024) on one latent GP per class.

Both loops fit ``q(f) = prod_c N(f_c | m_c, Sigma_c)`` to ``p(f) prod_n p(y_n | f_n)`` by maximising
the ELBO ``sum_n E_q[log p(y_n | f_n)] - sum_c KL(q_c || N(0, K_c))``:

* :func:`mirror_descent`: mirror descent in the mean parameters with the negative-entropy Bregman
  divergence, i.e. natural-gradient descent (Theorem 3.1), done as conjugate computation
  (Theorem 3.2). Gaussian sites ``theta~`` accumulate the mean-parameter gradient of the expected
  log-likelihood, ``theta~_t = (1 - rho) theta~_{t-1} + rho grad_mu E_q[log p(y|f)]``, and the
  posterior is prior times sites: the sites map to the core's :class:`~zoo.gp.SitePosterior` as
  ``lam = -2 theta~_2``, ``nu = theta~_1``. No inverse of ``K`` is ever formed.
* :func:`gradient_descent`: the paper's vanilla baseline, plain gradient steps on the same family,
  either on ``(m, Sigma)`` as in the paper or in whitened coordinates (see there).

The expectations need only per-point marginals ``q(f_n) = N(m_n, diag v_n)`` (a likelihood that
factorises over points); a likelihood supplies ``E[log p]`` and its derivatives in ``m`` and ``v``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from zoo.errors import NumericalError
from zoo.gp import DTYPE, JitterPolicy, SitePosterior


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


def _draw_softmax(mean: Tensor, var: Tensor, draws: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``s = softmax(f_s)`` ``[N, C, S]`` for ``f_s = mean + sqrt(var) * draws_s``, in ``draws``'
    dtype with the draws on the last axis, plus the per-draw ``logsumexp`` parts (total, shift)."""
    dt = draws.dtype
    f = torch.addcmul(mean.to(dt)[..., None], var.clamp_min(0).sqrt().to(dt)[..., None], draws.T)
    shift = f.amax(-2, keepdim=True)
    e = f.sub_(shift).exp_()
    total = e.sum(-2, keepdim=True)
    return e.div_(total), total, shift


class _DrawMoments(torch.autograd.Function):
    """:func:`softmax_draw_moments` with a backward that recomputes the ``[N, C, S]`` softmax
    instead of saving it: autograd would keep five such tensors per call, and in the unrolled
    meta-training step their allocation churn (fresh pages from the allocator on every step) cost
    more than the arithmetic (``benchmarks/md_bfsc/cost.py``).

    With ``s`` the per-draw softmax and incoming gradients ``G0 [N]`` (``E[lse]``), ``G1``
    (``E[s]``), ``G2`` (``E[s^2]``), the chain rule through ``d s_k / d f_c = s_k (delta_kc - s_c)``
    gives ``dL/df_c = s_c (G0 + G1_c + 2 G2_c s_c - sum_k (G1_k + 2 G2_k s_k) s_k) / S``;
    then ``dL/dmean = sum_s dL/df`` and ``dL/dsd = sum_s dL/df * draws``.
    """

    @staticmethod
    def forward(ctx, mean: Tensor, var: Tensor, draws: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        s, total, shift = _draw_softmax(mean, var, draws)
        lse = (total.log_() + shift).mean((-2, -1))
        ctx.save_for_backward(mean, var, draws)
        return lse.to(mean.dtype), s.mean(-1).to(mean.dtype), s.square_().mean(-1).to(mean.dtype)

    @staticmethod
    def backward(ctx, g0: Tensor, g1: Tensor, g2: Tensor) -> tuple[Tensor, Tensor, None]:
        mean, var, draws = ctx.saved_tensors
        dt, S = draws.dtype, draws.shape[0]
        s = _draw_softmax(mean, var, draws)[0]
        a = (g1.to(dt) / S)[..., None]                       # [N, C, 1]
        b = (g2.to(dt) * (2 / S))[..., None]
        inner = a + b * s                                    # G1_c + 2 G2_c s_c (scaled)
        centred = inner.mul_(s).sum(-2, keepdim=True)        # sum_k (...) s_k
        grad_f = torch.addcmul((g0.to(dt) / S)[..., None, None] + a, b, s).sub_(centred).mul_(s)
        sd = var.clamp_min(0).sqrt()
        grad_mean = grad_f.sum(-1).to(mean.dtype)
        grad_sd = (grad_f * draws.T).sum(-1).to(mean.dtype)
        grad_var = torch.where(var > 0, grad_sd / (2 * sd.clamp_min(1e-300)), torch.zeros_like(var))
        return grad_mean, grad_var, None


def softmax_draw_moments(mean: Tensor, var: Tensor, draws: Tensor
                         ) -> tuple[Tensor, Tensor, Tensor]:
    """Draw averages of ``logsumexp(f)`` ``[N]``, ``softmax(f)`` and ``softmax(f)^2`` ``[N, C]``
    over ``f_s = mean + sqrt(var) * draws_s`` for marginals ``[N, C]`` and ``draws`` ``[S, C]``.

    The ``[N, C, S]`` work is done in ``draws``' dtype (float32 by default: its rounding, ~1e-7,
    is far below any estimator error) with the draws on the last axis so that the reductions over
    the few classes and over the draws run on contiguous rows; results come back in ``mean``'s
    dtype. This is the inner loop's whole per-point cost, hence written out by hand (a max-shifted
    exp, one sum, one division) rather than through ``log_softmax``, which is slow for small C, and
    differentiated by :class:`_DrawMoments`, which keeps no ``[N, C, S]`` tensor between passes.
    """
    return _DrawMoments.apply(mean, var, draws)


class SoftmaxLikelihood:
    """``p(y_n | f_n) = softmax(f_n)_{y_n}`` with expectations over shared standard-normal draws.

    By Bonnet's and Price's theorems the derivatives are expectations too:
    ``g_m = E[y - s]`` and ``g_v = 1/2 E[diag Hessian] = 1/2 E[s^2 - s]`` with ``s = softmax(f)``;
    ``E[log s_y] = m_y - E[logsumexp f]`` with the linear part exact. ``draws`` ``[S, C]`` are the
    same for every point (:func:`zoo.gp.standard_normal_draws`), so the inner problem is deterministic
    given the episode; the per-draw work runs in ``dtype`` (see :func:`softmax_draw_moments`).
    """

    def __init__(self, onehot: Tensor, draws: Tensor, dtype: torch.dtype = torch.float32):
        self.onehot, self.draws = onehot.to(DTYPE), draws.to(dtype)

    def expectations(self, mean: Tensor, var: Tensor) -> Expectations:
        lse, s, s2 = softmax_draw_moments(mean, var, self.draws)
        ell = (mean * self.onehot).sum(-1) - lse
        return Expectations(ell, self.onehot - s, 0.5 * (s2 - s))


class GaussianLikelihood:
    """``p(y_n | f_n) = prod_c N(y_nc | f_nc, noise)``: the conjugate case, in closed form."""

    def __init__(self, targets: Tensor, noise: float):
        self.targets, self.noise = targets.to(DTYPE), float(noise)

    def expectations(self, mean: Tensor, var: Tensor) -> Expectations:
        r = self.targets - mean
        ell = -0.5 * ((r**2 + var) / self.noise + math.log(2 * math.pi * self.noise)).sum(-1)
        return Expectations(ell, r / self.noise, torch.full_like(var, -0.5 / self.noise))


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


@dataclass
class InnerResult:
    """The final posterior (batched over classes) and the ELBO after each step.

    ``elbo[t]`` is the ELBO after ``t`` steps (``elbo[0]`` at the prior); empty unless asked for.
    """

    posterior: Posterior
    elbo: list[float] = field(default_factory=list)
    final_elbo: Tensor | None = None


def elbo(post: Posterior, expect: Expectations) -> Tensor:
    """``sum_n E_q[log p(y_n | f_n)] - sum_c KL(q_c || p_c)`` for expectations taken at ``post``."""
    return expect.ell.sum() - post.kl_to_prior().sum()


def mirror_descent(K: Tensor, likelihood: Likelihood, steps: int, rho: float, *,
                   jitter: JitterPolicy | None = None, episode: str | None = None,
                   trace: bool = False, final_elbo: bool = False) -> InnerResult:
    """``steps`` mirror-descent steps from ``theta~_0 = 0`` (the posterior starts at the prior).

    ``K``: ``[C, N, N]`` float64. Each step costs one batched Cholesky of ``I + S K S``.
    ``trace`` records the ELBO after every step (one extra KL per step); ``final_elbo`` returns
    the differentiable ELBO of the last iterate (the meta-training loss).
    """
    if not 0 < rho <= 1:
        raise ValueError(f"mirror-descent step rho must be in (0, 1], got {rho}")
    C, N = K.shape[0], K.shape[-1]
    t1 = K.new_zeros(C, N)
    t2 = K.new_zeros(C, N)
    # at the prior (no sites) the marginals are N(0, diag K): no factorisation needed
    post: SitePosterior | None = None
    mean, var = t1, torch.diagonal(K, dim1=-2, dim2=-1)
    history: list[float] = []
    expect = None
    for step in range(steps + 1):
        if step > 0:
            post = SitePosterior(K, -2 * t2, t1, jitter, episode)
            mean, var = post.mean, post.var
        if step == steps and not (trace or final_elbo):
            break
        expect = likelihood.expectations(mean.T, var.T)
        if trace:
            history.append(float(_elbo_from(post, expect)))
        if step == steps:
            break
        d1, d2 = mean_parameter_gradient(mean, expect.g_m.T, expect.g_v.T)
        t1 = (1 - rho) * t1 + rho * d1
        t2 = (1 - rho) * t2 + rho * d2
    final = _elbo_from(post, expect) if final_elbo and expect is not None else None
    if post is None:
        post = SitePosterior(K, t2, t1, jitter, episode)
    return InnerResult(post, history, final)


def _elbo_from(post: Posterior | None, expect: Expectations) -> Tensor:
    """:func:`elbo`, with ``None`` standing for the prior (KL zero)."""
    return expect.ell.sum() if post is None else elbo(post, expect)


class FullGaussianPosterior:
    """``q(f_c) = N(m_c, Sigma_c)`` with free mean and covariance (the gradient-descent iterates).

    Unlike sites, a free covariance needs ``K^-1``: it comes from a Cholesky of ``K`` under the
    jitter policy (counted), and a ``Sigma`` that a step made indefinite raises with the episode.
    """

    def __init__(self, K: Tensor, m: Tensor, S: Tensor, LK: Tensor,
                 jitter: JitterPolicy | None = None, episode: str | None = None):
        self.K, self.m, self.S, self.LK = K, m, S, LK
        self.LS = (jitter or JitterPolicy()).cholesky(S, "variational covariance Sigma", episode)
        self.n = K.shape[-1]

    @property
    def mean(self) -> Tensor:
        return self.m

    @property
    def var(self) -> Tensor:
        return torch.diagonal(self.S, dim1=-2, dim2=-1)

    def kl_to_prior(self) -> Tensor:
        """``(tr K^-1 Sigma + m K^-1 m - n + log|K| - log|Sigma|) / 2``."""
        A = torch.linalg.solve_triangular(self.LK, self.LS, upper=False)
        b = torch.linalg.solve_triangular(self.LK, self.m[..., None], upper=False)[..., 0]
        logdet = 2 * (torch.diagonal(self.LK, dim1=-2, dim2=-1).log()
                      - torch.diagonal(self.LS, dim1=-2, dim2=-1).log()).sum(-1)
        return 0.5 * (A.pow(2).sum((-2, -1)) + b.pow(2).sum(-1) - self.n + logdet)

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
    the jitter policy) is needed, never its inverse."""

    def __init__(self, LK: Tensor, a: Tensor, S: Tensor, jitter: JitterPolicy | None = None,
                 episode: str | None = None):
        self.LK, self.a, self.S = LK, a, S
        self.LS = (jitter or JitterPolicy()).cholesky(S, "whitened covariance S", episode)
        self.n = LK.shape[-1]

    @property
    def mean(self) -> Tensor:
        return (self.LK @ self.a[..., None])[..., 0]

    @property
    def var(self) -> Tensor:
        return (self.LK @ self.LS).pow(2).sum(-1)

    def kl_to_prior(self) -> Tensor:
        """``(tr S + a.a - n - log|S|) / 2``."""
        logdet = 2 * torch.diagonal(self.LS, dim1=-2, dim2=-1).log().sum(-1)
        return 0.5 * (torch.diagonal(self.S, dim1=-2, dim2=-1).sum(-1) + self.a.pow(2).sum(-1)
                      - self.n - logdet)

    def predict(self, Kxs: Tensor, kss: Tensor) -> tuple[Tensor, Tensor]:
        """With ``A = L^-1 Kxs``: ``mean = A^T a``, ``var = kss - diag(A^T A) + diag(A^T S A)``."""
        Kxs, kss = Kxs.to(DTYPE), kss.to(DTYPE)
        A = torch.linalg.solve_triangular(self.LK, Kxs, upper=False)
        mean = (A.transpose(-1, -2) @ self.a[..., None])[..., 0]
        var = kss - A.pow(2).sum(-2) + (self.LS.transpose(-1, -2) @ A).pow(2).sum(-2)
        return mean, var.clamp_min(1e-12)


def _symmetric(S: Tensor, episode: str | None) -> Tensor:
    if not torch.isfinite(S).all():
        raise NumericalError(f"gradient descent diverged in episode {episode}; use a smaller "
                             "step size rho")
    return 0.5 * (S + S.transpose(-1, -2))


def gradient_descent(K: Tensor, likelihood: Likelihood, steps: int, rho: float, *,
                     jitter: JitterPolicy | None = None, episode: str | None = None,
                     trace: bool = False, final_elbo: bool = False,
                     parameterisation: str = "whitened") -> InnerResult:
    """``steps`` plain gradient-ascent steps on the ELBO from the prior, in one of two coordinates:

    * ``"moment"`` (the paper's baseline and the authors' code): on ``(m, Sigma)``,
      ``m += rho (g_m - K^-1 m)``, ``Sigma += rho (diag g_v + Sigma^-1 / 2 - K^-1 / 2)``. Its
      stable step size shrinks with the square of ``K``'s smallest eigenvalue, so it diverges
      (``NumericalError``) on the ill-conditioned kernels of deep features unless rho is tiny.
    * ``"whitened"``: on ``(a, S)`` with ``f = L u``, ``q(u) = N(a, S)``:
      ``a += rho (L^T g_m - a)``, ``S += rho (L^T diag(g_v) L + S^-1 / 2 - I / 2)``; the prior
      term is well conditioned, so ordinary step sizes work. The default, as the usable baseline.
    """
    if rho <= 0:
        raise ValueError(f"gradient-descent step rho must be positive, got {rho}")
    if parameterisation not in ("moment", "whitened"):
        raise ValueError(f"parameterisation {parameterisation!r}; use 'moment' or 'whitened'")
    jitter = jitter or JitterPolicy()
    LK = jitter.cholesky(K, "kernel matrix K", episode)
    moment = parameterisation == "moment"
    if moment:
        Kinv = torch.cholesky_inverse(LK)
        loc, S = K.new_zeros(K.shape[:-1]), K
        post: Posterior = FullGaussianPosterior(K, loc, S, LK, jitter, episode)
    else:
        eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
        loc, S = K.new_zeros(K.shape[:-1]), eye.expand_as(K)
        post = WhitenedPosterior(LK, loc, S, jitter, episode)
    history: list[float] = []
    expect = None
    for step in range(steps + 1):
        if step == steps and not (trace or final_elbo):
            break
        expect = likelihood.expectations(post.mean.T, post.var.T)
        if trace:
            history.append(float(elbo(post, expect)))
        if step == steps:
            break
        Sinv = torch.cholesky_inverse(post.LS)  # type: ignore[attr-defined]
        g_m, g_v = expect.g_m.T, expect.g_v.T
        if moment:
            loc = loc + rho * (g_m - (Kinv @ loc[..., None])[..., 0])
            S = _symmetric(S + rho * (torch.diag_embed(g_v) + 0.5 * (Sinv - Kinv)), episode)
            post = FullGaussianPosterior(K, loc, S, LK, jitter, episode)
        else:
            LtG = LK.transpose(-1, -2) * g_v[..., None, :]
            loc = loc + rho * ((LK.transpose(-1, -2) @ g_m[..., None])[..., 0] - loc)
            S = _symmetric(S + rho * (LtG @ LK + 0.5 * (Sinv - eye)), episode)
            post = WhitenedPosterior(LK, loc, S, jitter, episode)
    final = elbo(post, expect) if final_elbo and expect is not None else None
    return InnerResult(post, history, final)


INNER_LOOPS = {"md": mirror_descent, "gd": gradient_descent}
