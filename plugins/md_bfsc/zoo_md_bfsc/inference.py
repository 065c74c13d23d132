"""Inner loops of MD-BFSC (Ke, Cao & Zhou, ICML 2024) on one latent GP per class.

Both loops fit ``q(f) = prod_c N(f_c | m_c, Sigma_c)`` to ``p(f) prod_n p(y_n | f_n)`` by maximising
the ELBO ``sum_n E_q[log p(y_n | f_n)] - sum_c KL(q_c || N(0, K_c))``:

* :func:`mirror_descent`: mirror descent in the mean parameters with the negative-entropy Bregman
  divergence, i.e. natural-gradient descent (Theorem 3.1), done as conjugate computation
  (Theorem 3.2). Gaussian sites ``theta~`` accumulate the mean-parameter gradient of the expected
  log-likelihood, ``theta~_t = (1 - rho) theta~_{t-1} + rho grad_mu E_q[log p(y|f)]``, and the
  posterior is prior times sites: the sites map to the core's :class:`~zoo.inference.SitePosterior` as
  ``lam = -2 theta~_2``, ``nu = theta~_1``. No inverse of ``K`` is ever formed.
* :func:`gradient_descent`: the paper's vanilla baseline, plain gradient steps on the same family,
  either on ``(m, Sigma)`` as in the paper or in whitened coordinates (see there).

Likelihoods, their expectations, the posteriors with free covariance and the ELBO are the core's
(:mod:`zoo.inference`); this module holds only the two loops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from zoo import NumericalError
from zoo.inference import (
    DEFAULT_JITTER,
    Expectations,
    FullGaussianPosterior,
    Gram,
    JitterPolicy,
    Likelihood,
    Posterior,
    SitePosterior,
    WhitenedPosterior,
    dense,
    elbo,
    mean_parameter_gradient,
)


@dataclass
class InnerResult:
    """The final posterior (batched over classes) and the ELBO after each step.

    ``elbo[t]`` is the ELBO after ``t`` steps (``elbo[0]`` at the prior); empty unless asked for.
    A loop stopped at its fixed point (``tol``) after ``steps_run`` steps repeats the last value
    up to the requested number of steps, so traces of one setting always have the same length.
    """

    posterior: Posterior
    elbo: list[float] = field(default_factory=list)
    final_elbo: Tensor | None = None
    steps_run: int = 0


def mirror_descent(K: Gram, likelihood: Likelihood, steps: int, rho: float, *,
                   jitter: JitterPolicy | None = None, episode: str | None = None,
                   trace: bool = False, final_elbo: bool = False, tol: float = 0.0
                   ) -> InnerResult:
    """``steps`` mirror-descent steps from ``theta~_0 = 0`` (the posterior starts at the prior).

    ``K``: ``[C, N, N]`` float64, dense or a feature factor (:mod:`zoo.inference`). Each step costs
    one batched factorisation of ``I + S K S`` (or of its ``D x D`` twin on a factor).
    ``trace`` records the ELBO after every step (one extra KL per step); ``final_elbo`` returns
    the differentiable ELBO of the last iterate (the meta-training loss).

    ``tol > 0`` stops at the first step that moves no marginal mean or variance of ``q`` by more
    than ``tol`` (:func:`moved`). The expectation rule is the same at every step (common random
    numbers), so the loop is a deterministic map of the sites, whose fixed point
    (``theta~ = grad_mu E[log p]``) does not depend on ``rho``; the damped step shrinks most of the
    distance to it by ``1 - rho`` per step, but slower directions exist (a few percent per step
    at 20 shots), so a small move bounds the distance only loosely: what the stop changes is
    measured on the predictive instead (``test_early_stop_keeps_the_full_loops_answer``). The
    check reads one number per step on the host (a synchronisation on an accelerator);
    ``tol = 0`` (the default) runs every step without it.
    """
    if not 0 < rho <= 1:
        raise ValueError(f"mirror-descent step rho must be in (0, 1], got {rho}")
    if tol < 0:
        raise ValueError(f"stopping tolerance tol must be >= 0, got {tol}")
    jitter = jitter or DEFAULT_JITTER
    with jitter.deferred():  # no host synchronisation inside the loop on an accelerator
        return _mirror_descent(K, likelihood, steps, rho, jitter, episode, trace, final_elbo, tol)


def moved(before: tuple[Tensor, Tensor], after: tuple[Tensor, Tensor]) -> float:
    """The largest change of a marginal mean or variance between two iterates ``(mean, var)``."""
    return max(float((a - b).detach().abs().max()) for a, b in zip(after, before, strict=True))


def _mirror_descent(K: Gram, likelihood: Likelihood, steps: int, rho: float, jitter: JitterPolicy,
                    episode: str | None, trace: bool, final_elbo: bool, tol: float
                    ) -> InnerResult:
    C, N = K.shape[0], K.shape[-1]
    t1 = K.new_zeros(C, N)
    t2 = K.new_zeros(C, N)
    # at the prior (no sites) the marginals are N(0, diag K): no factorisation needed
    post: SitePosterior | None = None
    mean, var = t1, K.diagonal(dim1=-2, dim2=-1)
    history: list[Tensor] = []
    expect = None
    last = steps
    for step in range(steps + 1):
        if step > 0:
            before = mean, var
            post = SitePosterior(K, -2 * t2, t1, jitter, episode)
            mean, var = post.mean, post.var
            if tol > 0 and moved(before, (mean, var)) <= tol:
                last = step
        if step == last and not (trace or final_elbo):
            break
        expect = likelihood.expectations(mean.T, var.T)
        if trace:
            history.append(_elbo_from(post, expect).detach())
        if step == last:
            break
        d1, d2 = mean_parameter_gradient(mean, expect.g_m.T, expect.g_v.T)
        t1 = (1 - rho) * t1 + rho * d1
        t2 = (1 - rho) * t2 + rho * d2
    final = _elbo_from(post, expect) if final_elbo and expect is not None else None
    if post is None:
        post = SitePosterior(K, t2, t1, jitter, episode)
    elbos = torch.stack(history).tolist() if history else []
    return InnerResult(post, elbos + elbos[-1:] * (steps - last), final, last)


def _elbo_from(post: Posterior | None, expect: Expectations) -> Tensor:
    """:func:`elbo`, with ``None`` standing for the prior (KL zero)."""
    return expect.ell.sum() if post is None else elbo(post, expect)


def _symmetric(S: Tensor, episode: str | None) -> Tensor:
    if not torch.isfinite(S).all():
        raise NumericalError(f"gradient descent diverged in episode {episode}; use a smaller "
                             "step size rho")
    return 0.5 * (S + S.transpose(-1, -2))


def gradient_descent(K: Gram, likelihood: Likelihood, steps: int, rho: float, *,
                     jitter: JitterPolicy | None = None, episode: str | None = None,
                     trace: bool = False, final_elbo: bool = False,
                     parameterisation: str = "whitened", tol: float = 0.0) -> InnerResult:
    """``steps`` plain gradient-ascent steps on the ELBO from the prior, in one of two coordinates:

    * ``"moment"`` (the paper's baseline and the authors' code): on ``(m, Sigma)``,
      ``m += rho (g_m - K^-1 m)``, ``Sigma += rho (diag g_v + Sigma^-1 / 2 - K^-1 / 2)``. Its
      stable step size shrinks with the square of ``K``'s smallest eigenvalue, so it diverges
      (``NumericalError``) on the ill-conditioned kernels of deep features unless rho is tiny.
    * ``"whitened"``: on ``(a, S)`` with ``f = L u``, ``q(u) = N(a, S)``:
      ``a += rho (L^T g_m - a)``, ``S += rho (L^T diag(g_v) L + S^-1 / 2 - I / 2)``; the prior
      term is well conditioned, so ordinary step sizes work. The default, as the usable baseline.

    ``tol > 0`` stops as :func:`mirror_descent` does; a small plain gradient step contracts the
    distance to the optimum only by ``1 - rho lambda`` (``lambda`` a curvature of the ELBO), so a
    small move says less about convergence here than after a mirror-descent step.
    """
    if rho <= 0:
        raise ValueError(f"gradient-descent step rho must be positive, got {rho}")
    if parameterisation not in ("moment", "whitened"):
        raise ValueError(f"parameterisation {parameterisation!r}; use 'moment' or 'whitened'")
    jitter = jitter or JitterPolicy()
    K = dense(K)  # the whitened and moment coordinates are both N-dimensional
    LK = jitter.cholesky(K, "kernel matrix K", episode)
    moment = parameterisation == "moment"
    if moment:
        Kinv = torch.cholesky_inverse(LK)
        loc, S = K.new_zeros(K.shape[:-1]), K
        post: Posterior = FullGaussianPosterior(K, loc, S, LK, episode, LS=LK)
    else:
        eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
        loc, S = K.new_zeros(K.shape[:-1]), eye.expand_as(K)
        post = WhitenedPosterior(LK, loc, S, episode)
    history: list[float] = []
    expect = None
    last, before = steps, None
    for step in range(steps + 1):
        if tol > 0 and before is not None and moved(before, (post.mean, post.var)) <= tol:
            last = step
        if step == last and not (trace or final_elbo):
            break
        expect = likelihood.expectations(post.mean.T, post.var.T)
        if trace:
            history.append(float(elbo(post, expect)))
        if step == last:
            break
        before = post.mean, post.var
        Sinv = torch.cholesky_inverse(post.LS)  # type: ignore[attr-defined]
        g_m, g_v = expect.g_m.T, expect.g_v.T
        if moment:
            loc = loc + rho * (g_m - (Kinv @ loc[..., None])[..., 0])
            S = _symmetric(S + rho * (torch.diag_embed(g_v) + 0.5 * (Sinv - Kinv)), episode)
            post = FullGaussianPosterior(K, loc, S, LK, episode)
        else:
            LtG = LK.transpose(-1, -2) * g_v[..., None, :]
            loc = loc + rho * ((LK.transpose(-1, -2) @ g_m[..., None])[..., 0] - loc)
            S = _symmetric(S + rho * (LtG @ LK + 0.5 * (Sinv - eye)), episode)
            post = WhitenedPosterior(LK, loc, S, episode)
    final = elbo(post, expect) if final_elbo and expect is not None else None
    return InnerResult(post, history + history[-1:] * (steps - last), final, last)


INNER_LOOPS = {"md": mirror_descent, "gd": gradient_descent}
