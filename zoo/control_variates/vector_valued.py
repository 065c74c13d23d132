"""Vector-valued control variates for ``T`` related integrals ``Pi_t[f_t]`` (Sun 2023, Ch. 4),
with the separable matrix-valued Stein kernel ``K0`` of ``K = B k`` (Eq. 4.4).

The loss (Eq. 4.8) ``sum_t (1/m_t) sum_j (f_t(x_tj) - g(x_tj)_t - beta_t)^2 + lambda ||g||^2``
sees ``g`` only through ``<g(x_tj), e_t>``, so its minimiser lies in the span of
``K0(., x_tj) e_t`` and one scalar per point suffices (notes §A.1): with the ``M x M`` matrix
``Kr[(t, j), (t', j')] = K0(x_tj, x_t'j')_{tt'} = B_{tt'} k0_{tt'}`` (each point with its own
task's score), ``alpha = (Kr + lambda W^-1)^-1 (y - H beta)`` and the jointly optimal intercept
``beta = (H^T Kr_l^-1 H)^-1 H^T Kr_l^-1 y`` (GLS), ``W = diag(1/m_t)``, ``H`` the task indicator.
That is ``O(M^3)`` instead of the thesis's ``O(M^3 T^3)`` system (Thm 4.2.4) and equals it
(``tests/control_variates``). For ``T = 1``, ``lambda -> 0`` it is the control functional.

:func:`fit_stochastic` minimises the same loss by Adam, optionally learning ``B = L L^T`` with ``L``
lower triangular and an exponentiated diagonal (positive definite by construction) and the
penalty ``||B||_F^2`` (Eq. 4.9; Algorithm 5, full batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from zoo.kernels import Kernel
from zoo.stein_kernels import stein_kernel


@dataclass
class VVFit:
    """Intercepts ``beta [T(, K)]`` (the estimates), weights ``alpha [M(, K)]``, the ``B`` used and,
    from the closed form, the intercepts' standard errors ``stderr`` (GLS: ``sigma^2 (H^T Kr_l^-1
    H)^-1`` with ``sigma^2`` profiled out, the posterior spread of ``beta`` under the Stein GP)."""

    beta: Tensor
    alpha: Tensor
    B: Tensor
    stderr: Tensor | None = None


def base_gram(kernel: Kernel, x: Tensor, score: Tensor) -> Tensor:
    """``k0_{t_a t_b}(x_a, x_b) [M, M]``: the cross-Stein kernel with every point's own score."""
    return stein_kernel(kernel, x, x, score, score).detach()


def reduced_gram(k0: Tensor, B: Tensor, task: Tensor) -> Tensor:
    """``Kr = B[t_a, t_b] k0[a, b]``."""
    return B[task][:, task] * k0


def closed_form(k0: Tensor, B: Tensor, task: Tensor, fx: Tensor, lam: float) -> VVFit:
    """The reduced closed form for points of tasks ``task [M]`` (``0..T-1``) with values ``fx [M]``
    or ``[M, K]`` (``K`` integrands per task fitted with the same matrices: the estimates are one
    linear map ``A fx`` with ``A H = I``, so integrands that sum to a constant keep that sum)."""
    T = int(task.max()) + 1
    y = fx[:, None] if fx.ndim == 1 else fx
    H = torch.nn.functional.one_hot(task, T).to(fx.dtype)
    counts = H.sum(0)
    Kl = reduced_gram(k0, B, task) + torch.diag(lam * counts[task])
    L = torch.linalg.cholesky(Kl)
    KiH = torch.cholesky_solve(H, L)
    Kiy = torch.cholesky_solve(y, L)
    info = H.T @ KiH
    beta = torch.linalg.solve(info, H.T @ Kiy)
    alpha = Kiy - KiH @ beta
    sigma2 = ((y - H @ beta) * alpha).sum(0).clamp_min(0) / len(y)  # [K]
    stderr = (torch.linalg.inv(info).diagonal()[:, None] * sigma2).sqrt()
    if fx.ndim == 1:
        return VVFit(beta[:, 0], alpha[:, 0], B, stderr[:, 0])
    return VVFit(beta, alpha, B, stderr)


def lower_factor(raw: Tensor) -> Tensor:
    """``L`` from unconstrained square matrices ``[..., T, T]``: the strict lower part and ``exp``
    of the diagonal."""
    return torch.tril(raw, -1) + torch.diag_embed(raw.diagonal(dim1=-2, dim2=-1).exp())


def loss(k0: Tensor, B: Tensor, task: Tensor, fx: Tensor, alpha: Tensor, beta: Tensor,
         lam: float | Tensor) -> Tensor:
    """Eq. 4.8 with the RKHS norm ``alpha^T Kr alpha``; leading axes of ``k0 [..., M, M]``, ``B``,
    ``fx``, ``alpha [..., M]``, ``beta [..., T]`` and ``lam`` are independent problems (a loss
    each). ``Kr alpha`` without forming ``Kr``: ``(Kr alpha)_a = sum_t B[t_a, t] (k0 (alpha *
    H_t))_a`` with ``H`` the task indicator, so that the gradient in ``B`` is matrix products."""
    H = torch.nn.functional.one_hot(task, beta.shape[-1]).to(fx.dtype)
    Ka = ((H @ B) * (k0 @ (alpha[..., None] * H))).sum(-1)
    resid = fx - Ka - beta @ H.T
    return (resid.pow(2) / H.sum(0)[task]).sum(-1) + lam * (alpha * Ka).sum(-1)


def raw_factor(B: Tensor, batch: tuple[int, ...]) -> Tensor:
    """The unconstrained parameters whose :func:`lower_factor` is B's Cholesky factor (log
    diagonal), one copy per leading ``batch`` problem."""
    chol = torch.linalg.cholesky(B)
    raw = torch.tril(chol, -1) + torch.diag_embed(chol.diagonal(dim1=-2, dim2=-1).log())
    return raw.expand(*batch, *B.shape[-2:]).clone()


def fit_stochastic(k0: Tensor, task: Tensor, fx: Tensor, *, lam: float | Tensor, B: Tensor,
                   learn_B: bool = False, steps: int = 2000, lr: float = 0.01) -> VVFit:
    """Adam on ``(alpha, beta)`` (and ``B = L L^T`` with ``learn_B``, from ``B``), starting from
    ``alpha = 0`` and the per-task means (Algorithm 4/5, full batch), the learning rate annealed
    to zero (cosine) so that the iterates settle. Leading axes of ``k0 [..., M, M]``, ``fx [...,
    M]`` and ``lam`` (a tensor ``[...]`` or a float) are independent problems with the same
    ``task [M]``, fitted in one run: Adam acts elementwise and the summed loss's gradient in one
    problem's parameters is that problem's, so each fit equals its fit alone."""
    T = int(task.max()) + 1
    batch = fx.shape[:-1]
    lam_ = torch.as_tensor(lam, dtype=fx.dtype).expand(batch)
    counts = torch.bincount(task, minlength=T).to(fx.dtype)
    alpha = torch.zeros_like(fx, requires_grad=True)
    beta = (torch.zeros(*batch, T, dtype=fx.dtype).index_add(-1, task, fx) / counts
            ).requires_grad_(True)
    raw = raw_factor(B, batch).requires_grad_(learn_B)
    opt = torch.optim.Adam([alpha, beta, raw] if learn_B else [alpha, beta], lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    with torch.enable_grad():  # a fit, also where the caller evaluates without gradients
        for _ in range(steps):
            opt.zero_grad()
            L = lower_factor(raw)
            Bt = L @ L.mT
            value = loss(k0, Bt, task, fx, alpha, beta, lam_)
            if learn_B:
                value = value + Bt.pow(2).sum((-2, -1))
            value.sum().backward()
            opt.step()
            schedule.step()
    L = lower_factor(raw.detach())
    return VVFit(beta.detach(), alpha.detach(), L @ L.mT)


def profiled_minimiser(k0: Tensor, B: Tensor, task: Tensor, fx: Tensor,
                       lam: Tensor) -> tuple[Tensor, Tensor]:
    """``(alpha, beta)`` minimising Eq. 4.8 at ``B`` (the reduced closed form), differentiable in
    ``B`` and batched over the leading axes of ``k0 [..., M, M]``, ``B``, ``fx [..., M]``, ``lam``."""
    H = torch.nn.functional.one_hot(task, B.shape[-1]).to(fx.dtype)
    counts = H.sum(0)[task]
    Kl = (H @ B @ H.T) * k0 + torch.diag_embed(lam[..., None] * counts)
    L = torch.linalg.cholesky(Kl)
    KiH = torch.cholesky_solve(H.expand(*Kl.shape[:-1], H.shape[-1]), L)
    Kiy = torch.cholesky_solve(fx[..., None], L)
    beta = torch.linalg.solve(H.T @ KiH, H.T @ Kiy)
    return (Kiy - KiH @ beta)[..., 0], beta[..., 0]


def fit_profiled(k0: Tensor, task: Tensor, fx: Tensor, *, lam: float | Tensor, B: Tensor,
                 steps: int = 200, lr: float = 0.05) -> VVFit:
    """Learned ``B = L L^T`` (from ``B``) with ``(alpha, beta)`` profiled out: Adam on ``L`` over
    the objective of :func:`fit_stochastic`'s ``learn_B`` (Eq. 4.8 + ``||B||_F^2``) at the exact
    minimiser in ``(alpha, beta)`` for each ``B`` (:func:`profiled_minimiser`). The joint
    full-batch Adam of Algorithm 5 moves ``alpha`` slowly along the Stein Gram matrix's small
    eigenvalues; here ``alpha`` and ``beta`` are optimal at every step. Leading axes are
    independent problems, as in :func:`fit_stochastic`."""
    batch = fx.shape[:-1]
    lam_ = torch.as_tensor(lam, dtype=fx.dtype).expand(batch)
    raw = raw_factor(B, batch).requires_grad_(True)
    opt = torch.optim.Adam([raw], lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    with torch.enable_grad():  # a fit, also where the caller evaluates without gradients
        for _ in range(steps):
            opt.zero_grad()
            L = lower_factor(raw)
            Bt = L @ L.mT
            alpha, beta = profiled_minimiser(k0, Bt, task, fx, lam_)
            value = loss(k0, Bt, task, fx, alpha, beta, lam_) + Bt.pow(2).sum((-2, -1))
            value.sum().backward()
            opt.step()
            schedule.step()
    L = lower_factor(raw.detach())
    B = L @ L.mT
    alpha, beta = profiled_minimiser(k0, B, task, fx, lam_)
    return VVFit(beta, alpha, B)
