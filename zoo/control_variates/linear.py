"""Control variates linear in ``f``: polynomial Stein CVs (Mira et al. 2013) fitted by least
squares, and control functionals (Oates et al. 2017), the kernel version (Sun 2023, §3.3.3).

Polynomial CVs are ``L'`` of polynomial vector fields: degree 1, the constant fields, ``g = a . s``;
degree 2, the affine fields ``u = a + A x``, ``g = tr A + (a + A x) . s`` (the clean form of the
thesis's garbled Eq. 3.11; a general ``A`` contains the symmetric ``A`` of ``L''[a.x + x^T A x/2]``
and is what makes a quadratic integrand under any Gaussian exact, ``A = -Sigma M``). The fit is
ridge least squares with an unpenalised intercept on standardised columns, so the estimate is a
fixed linear functional of ``f``: a weighted rule (:func:`polynomial_weights`).

The control functional fits ``f ~ beta + GP(0, sigma^2 (k0 + lambda))`` with a relative nugget
``lambda`` (``K = K0 + lambda mean(diag K0) I``): ``beta = 1^T K^-1 f / 1^T K^-1 1``, ``g = k0(., X)
K^-1 (f - beta)``; its lengthscale and its nugget maximise the Stein kernel's marginal likelihood
with ``beta`` and ``sigma^2`` profiled out (App. A.3.2, with the nugget a hyper-parameter of the
same likelihood rather than "as small as numerical stability allows": a near-interpolating fit of
a discontinuous integrand removes nothing, measured on the step function's validation
integrands in the card). A fixed ``nugget`` gives the thesis's rule.
Inputs are standardised by the fitting samples (``x' = (x - c) / r``, score ``r s``), a fixed
affine change of variables that keeps the Stein identity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from zoo.control_variates.fitting import CVEstimate, check_mode, fit_size, from_intercept, from_residuals
from zoo.kernels import Kernel, RBFKernel
from zoo.stein_kernels import BoundaryKernel, stein_kernel

NUGGET = 1e-8
"""The smallest relative nugget: ``K0 + NUGGET * mean(diag K0) I`` (the vv-CV's lengthscale search
and the classifiers' kernel estimators use it alone)."""

NUGGETS = (1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
"""The relative nuggets the control functional's marginal likelihood chooses from (with the
lengthscale), from near interpolation to heavy smoothing."""

RIDGE = 1e-6
"""Ridge of the polynomial CV on its standardised coefficients: negligible when the fit is
over-determined, a minimum-norm-like interpolant when it is not."""


def polynomial_features(x: Tensor, score: Tensor, degree: int) -> Tensor:
    """``[..., N, p]``: ``L'`` of the basis fields ``e_j`` (degree 1, ``p = d``) and ``x_k e_j``
    (degree 2, ``p = d + d^2``): ``s_j`` and ``delta_jk + x_k s_j``."""
    if degree not in (1, 2):
        raise ValueError(f"polynomial control variates have degree 1 or 2, got {degree}")
    if degree == 1:
        return score
    d = x.shape[-1]
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    quad = eye + score[..., :, None] * x[..., None, :]  # [..., N, j, k]
    return torch.cat([score, quad.flatten(-2)], -1)


def _scale(phi: Tensor) -> Tensor:
    scale = (phi - phi.mean(-2, keepdim=True)).pow(2).mean(-2, keepdim=True).sqrt()
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def _standardise(phi: Tensor) -> tuple[Tensor, Tensor]:
    """Centred columns in units of their spread, and the column means in those units."""
    mean, scale = phi.mean(-2, keepdim=True), _scale(phi)
    return (phi - mean) / scale, mean / scale


def _ridge_solve(centred: Tensor, rhs: Tensor, ridge: float) -> Tensor:
    n, p = centred.shape[-2], centred.shape[-1]
    gram = centred.transpose(-1, -2) @ centred / n
    gram = gram + ridge * torch.eye(p, dtype=gram.dtype, device=gram.device)
    return torch.linalg.solve(gram, rhs)


def polynomial_weights(phi: Tensor, mode: str = "intercept", ridge: float = RIDGE) -> Tensor:
    """The weights ``w [..., N]`` with estimate ``sum_i w_i f(x_i)`` (they sum to one): the ridge
    fit's intercept (``intercept``), or the held-out mean of ``f - g`` (``split``)."""
    check_mode(mode)
    n = phi.shape[-2]
    m = fit_size(n, mode)
    centred, offset = _standardise(phi[..., :m, :])
    if mode == "intercept":
        solved = _ridge_solve(centred, offset.transpose(-1, -2), ridge)[..., 0]
        return _sum_to_one(1 / n - centred @ solved / n)
    scale = _scale(phi[..., :m, :])
    held_mean = phi[..., m:, :].mean(-2, keepdim=True) / scale
    solved = _ridge_solve(centred, held_mean.transpose(-1, -2), ridge)[..., 0]
    fit = -centred @ solved / m
    held = torch.full(phi.shape[:-2] + (n - m,), 1 / (n - m), dtype=phi.dtype, device=phi.device)
    return _sum_to_one(torch.cat([fit, held], -1))


def _sum_to_one(w: Tensor) -> Tensor:
    """Removes the rounding error of an ill-conditioned solve from weights that sum to one in
    exact arithmetic (the constant function is integrated exactly)."""
    return w + (1 - w.sum(-1, keepdim=True)) / w.shape[-1]


def polynomial_cv(x: Tensor, score: Tensor, fx: Tensor, *, degree: int = 2,
                  mode: str = "intercept", ridge: float = RIDGE) -> CVEstimate:
    """The polynomial CV estimate of ``E[f]`` for ``fx [..., N, K]`` (``K`` integrands sharing the
    design), with its standard error."""
    phi = polynomial_features(x, score, degree)
    m = fit_size(phi.shape[-2], check_mode(mode))
    centred, _ = _standardise(phi[..., :m, :])
    scale = _scale(phi[..., :m, :])
    y = fx[..., :m, :]
    ybar = y.mean(-2, keepdim=True)
    theta = _ridge_solve(centred, centred.transpose(-1, -2) @ (y - ybar) / m, ridge) / scale.mT
    beta = ybar - phi[..., :m, :].mean(-2, keepdim=True) @ theta  # [..., 1, K]
    if mode == "intercept":
        return from_intercept(beta[..., 0, :], fx - beta - phi @ theta, phi.shape[-1])
    return from_residuals(fx[..., m:, :] - phi[..., m:, :] @ theta)


def gls_fit(K0: Tensor, y: Tensor, jitter: Tensor | float) -> tuple[Tensor, Tensor, Tensor]:
    """``f ~ beta 1 + GP(0, sigma^2 K0)`` with ``K0 + jitter I``: the intercept ``beta [..., K]``
    (GLS), the weights ``alpha = K^-1 (y - beta) [..., m, K]`` and the log marginal likelihood
    ``[...]`` with ``beta`` and ``sigma^2`` profiled out."""
    beta, alpha, lml, ok = _gls(K0, y, jitter)
    if not bool(ok.all()):
        raise torch.linalg.LinAlgError("the Stein Gram matrix is not positive definite; raise "
                                       "the nugget")
    return beta, alpha, lml


def _gls(K0: Tensor, y: Tensor, jitter: Tensor | float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`gls_fit` without the check: also ``ok [...]``, where the Cholesky factor exists
    (elsewhere the fit is meaningless)."""
    m = K0.shape[-1]
    eye = torch.eye(m, dtype=K0.dtype, device=K0.device)
    jitter = torch.as_tensor(jitter, dtype=K0.dtype, device=K0.device)
    L, info = torch.linalg.cholesky_ex(K0 + jitter[..., None, None] * eye)
    ones = torch.ones(K0.shape[:-1] + (1,), dtype=K0.dtype, device=K0.device)
    a = torch.cholesky_solve(ones, L)
    b = torch.cholesky_solve(y, L)
    beta = (b.sum(-2) / a.sum(-2))
    alpha = b - a * beta[..., None, :]
    sigma2 = ((y - beta[..., None, :]) * alpha).sum(-2).clamp_min(1e-300) / m
    logdet = 2 * torch.diagonal(L, dim1=-2, dim2=-1).log().sum(-1)
    return beta, alpha, -0.5 * m * sigma2.log().sum(-1) - 0.5 * y.shape[-1] * logdet, info == 0


def standardiser(x: Tensor) -> tuple[Tensor, Tensor]:
    """Centre and scale ``[..., 1, d]`` of the fitting samples ``x [..., m, d]``."""
    centre = x.mean(-2, keepdim=True)
    scale = x.std(-2, keepdim=True) if x.shape[-2] > 1 else torch.ones_like(centre)
    return centre, torch.where(scale > 0, scale, torch.ones_like(scale))


LENGTHSCALES = tuple(2.0**k for k in (-2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3))
"""The grid of lengthscales (in standardised units, times ``sqrt d``) searched by the Stein marginal
likelihood."""


def _candidates(d: int, lengthscale: float | None,
                nugget: float | Sequence[float]) -> tuple[list[float], list[float]]:
    """The lengthscales and relative nuggets the Stein marginal likelihood chooses from."""
    grid = [lengthscale] if lengthscale is not None else [math.sqrt(d) * v for v in LENGTHSCALES]
    nuggets = [float(nugget)] if isinstance(nugget, (int, float)) else [float(v) for v in nugget]
    if not nuggets or min(nuggets) <= 0:
        raise ValueError(f"control functional nuggets must be positive, got {nugget!r}")
    return grid, nuggets


def _rbf(d: int, ell: float, dtype: torch.dtype, boundary: bool) -> Kernel:
    kernel: Kernel = RBFKernel(d, lengthscale=ell, learn_outputscale=False).to(dtype)
    return BoundaryKernel(kernel) if boundary else kernel


@dataclass
class SteinSelection:
    """The Stein kernel chosen by :func:`select_stein_kernel`: its base ``kernel`` and, for each
    block, the Stein Gram matrix ``K0`` and the GLS fit ``(beta, alpha, log marginal likelihood)``
    at that kernel."""

    kernel: Kernel
    grams: list[Tensor]
    fits: list[tuple[Tensor, Tensor, Tensor]]
    nugget: float = NUGGET


def select_stein_kernel(blocks: Sequence[tuple[Tensor, Tensor, Tensor]], *,
                        boundary: bool = False, lengthscale: float | None = None,
                        nugget: float | Sequence[float] = NUGGET) -> SteinSelection:
    """The RBF Stein kernel (times the boundary factor when ``boundary``) of highest Stein marginal
    likelihood, :func:`gls_fit`'s, summed over ``blocks`` of ``(z [..., m, d], score [..., m, d],
    values [..., m, K])`` (leading dimensions: tasks fitted alike; each block and task its own
    ``K0 + nugget mean(diag K0) I``), over the grid :data:`LENGTHSCALES` times ``sqrt d``, or at
    ``lengthscale`` when it is given, and over the relative nuggets ``nugget`` when it is a
    sequence (jointly with the lengthscale). The one lengthscale search of the control functional,
    the vv-CV integration method and the classifiers' ``vv-cv`` estimator."""
    grid, nuggets = _candidates(blocks[0][0].shape[-1], lengthscale, nugget)
    best = None
    for ell in grid:
        kernel = _rbf(blocks[0][0].shape[-1], ell, blocks[0][0].dtype, boundary)
        grams = [stein_kernel(kernel, z, z, s, s).detach() for z, s, _ in blocks]
        for lam in nuggets:
            try:
                fits = [gls_fit(K0, y, lam * K0.diagonal(dim1=-2, dim2=-1).mean(-1)
                                .clamp_min(1e-300)) for K0, (_, _, y) in zip(grams, blocks)]
            except torch.linalg.LinAlgError:
                continue
            total = sum(float(fit[2].sum()) for fit in fits)
            if best is None or total > best[0]:
                best = (total, SteinSelection(kernel, grams, fits, lam))
    if best is None:
        raise torch.linalg.LinAlgError("no lengthscale gave positive-definite Stein Gram matrices; "
                                       "set the lengthscale or raise the regulariser")
    return best[1]


def control_functional(x: Tensor, score: Tensor, fx: Tensor, *, mode: str = "intercept",
                       lengthscale: float | None = None, boundary: bool = False,
                       standardise: bool = True,
                       nugget: float | Sequence[float] = NUGGETS) -> CVEstimate:
    """The control-functional estimate for one task: ``x [N, d]``, ``score [N, d]``, ``fx [N, K]``.
    ``boundary``: ``pi`` is uniform on the unit cube (no standardisation; the RBF kernel times the
    boundary factor). ``lengthscale``: fixed, or ``None`` for the marginal-likelihood choice.
    ``nugget``: a relative nugget, or a grid the marginal likelihood chooses from (default
    :data:`NUGGETS`). ``standardise``: work in standardised coordinates (off for inputs already
    standard)."""
    e = control_functionals(x[None], score[None], fx[None], mode=mode, lengthscale=lengthscale,
                            boundary=boundary, standardise=standardise, nugget=nugget)
    return CVEstimate(e.value[0], e.stderr[0])


def control_functionals(x: Tensor, score: Tensor, fx: Tensor, *, mode: str = "intercept",
                        lengthscale: float | None = None, boundary: bool = False,
                        standardise: bool = True,
                        nugget: float | Sequence[float] = NUGGETS) -> CVEstimate:
    """:func:`control_functional` for ``T`` tasks at once (``x [T, N, d]``, ``fx [T, N, K]``;
    estimates ``[T, K]``), each with its own lengthscale and nugget of highest Stein marginal
    likelihood: every candidate's Stein Gram matrices in one batched Cholesky over tasks and
    nuggets, the likelihood from the same factor, the first best candidate of the grid (the
    lengthscale outer, the nugget inner) kept per task."""
    T, n, d = x.shape
    m = fit_size(n, check_mode(mode))
    if boundary or not standardise:
        z, s = x, score
    else:
        centre, scale = standardiser(x[:, :m])
        z, s = (x - centre) / scale, score * scale
    grid, nuggets = _candidates(d, lengthscale, nugget)
    lam = torch.tensor(nuggets, dtype=x.dtype, device=x.device)[:, None]  # [nuggets, 1]
    best = torch.full((T,), -math.inf, dtype=x.dtype, device=x.device)
    value = stderr = fx.new_full((T, fx.shape[-1]), math.nan)
    y = fx[:, :m]
    for ell in grid:
        kernel = _rbf(d, ell, x.dtype, boundary)
        K0 = stein_kernel(kernel, z, z[:, :m], s, s[:, :m]).detach()  # [T, N, m]
        gram = K0[:, :m]
        jitter = lam * gram.diagonal(dim1=-2, dim2=-1).mean(-1).clamp_min(1e-300)
        beta, alpha, lml, ok = _gls(gram, y, jitter)  # over [nuggets, T]
        if mode == "intercept":
            e = from_intercept(beta, fx - beta[..., None, :] - K0 @ alpha, 0)
        else:
            e = from_residuals(fx[:, m:] - K0[:, m:] @ alpha)
        lml = torch.where(ok & ~lml.isnan(), lml, -math.inf)
        for j in range(len(nuggets)):
            better = lml[j] > best
            best = torch.where(better, lml[j], best)
            value = torch.where(better[:, None], e.value[j], value)
            stderr = torch.where(better[:, None], e.stderr[j], stderr)
    if bool(torch.isinf(best).any()):
        raise torch.linalg.LinAlgError("no lengthscale gave positive-definite Stein Gram matrices; "
                                       "set the lengthscale or raise the regulariser")
    return CVEstimate(value, stderr)


def kernel_weights(K0: Tensor, cross_mean: Tensor | None = None, *,
                   nugget: float = NUGGET) -> Tensor:
    """The control functional as a rule: weights on the fitting samples with estimate
    ``sum_i w_i f(x_i)`` (they sum to one): ``K^-1 1 / 1^T K^-1 1`` for the fitted intercept, or,
    given the held-out mean of the cross Gram matrix ``cross_mean = mean_Q k0(x_q, .) [m]``, the
    fitting-sample part of the split estimate ``mean_Q (f - g)`` (the held-out samples then carry
    ``1 / n`` each)."""
    eye = torch.eye(K0.shape[-1], dtype=K0.dtype, device=K0.device)
    L = torch.linalg.cholesky(K0 + nugget * K0.diagonal().mean() * eye)
    a = torch.cholesky_solve(torch.ones_like(K0[:, :1]), L)[:, 0]
    if cross_mean is None:
        return a / a.sum()
    b = torch.cholesky_solve(cross_mean[:, None], L)[:, 0]
    fit = -b + (cross_mean @ a) * a / a.sum()
    return fit - fit.mean()  # sums to zero in exact arithmetic
