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
    """``L`` from an unconstrained square matrix: the strict lower part and ``exp`` of the diagonal."""
    return torch.tril(raw, -1) + torch.diag(raw.diagonal().exp())


def loss(k0: Tensor, B: Tensor, task: Tensor, fx: Tensor, alpha: Tensor, beta: Tensor,
         lam: float) -> Tensor:
    """Eq. 4.8 with the RKHS norm ``alpha^T Kr alpha``."""
    Kr = reduced_gram(k0, B, task)
    T = len(beta)
    counts = torch.bincount(task, minlength=T).to(fx.dtype)
    resid = fx - Kr @ alpha - beta[task]
    return (resid.pow(2) / counts[task]).sum() + lam * alpha @ Kr @ alpha


def fit_stochastic(k0: Tensor, task: Tensor, fx: Tensor, *, lam: float, B: Tensor,
                   learn_B: bool = False, steps: int = 2000, lr: float = 0.01) -> VVFit:
    """Adam on ``(alpha, beta)`` (and ``B = L L^T`` with ``learn_B``, from ``B``), starting from
    ``alpha = 0`` and the per-task means (Algorithm 4/5, full batch), the learning rate annealed
    to zero (cosine) so that the iterates settle."""
    T = int(task.max()) + 1
    counts = torch.bincount(task, minlength=T).to(fx.dtype)
    alpha = torch.zeros_like(fx, requires_grad=True)
    beta = (torch.zeros(T, dtype=fx.dtype).index_add(0, task, fx) / counts).requires_grad_(True)
    chol = torch.linalg.cholesky(B)
    raw = (torch.tril(chol, -1) + torch.diag(chol.diagonal().log())).requires_grad_(learn_B)
    opt = torch.optim.Adam([alpha, beta, raw] if learn_B else [alpha, beta], lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    for _ in range(steps):
        opt.zero_grad()
        L = lower_factor(raw)
        Bt = L @ L.T
        value = loss(k0, Bt, task, fx, alpha, beta, lam)
        if learn_B:
            value = value + Bt.pow(2).sum()
        value.backward()
        opt.step()
        schedule.step()
    L = lower_factor(raw.detach())
    return VVFit(beta.detach(), alpha.detach(), L @ L.T)
