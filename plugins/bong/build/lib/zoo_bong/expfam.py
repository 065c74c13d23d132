"""BONG's update for any exponential family, by automatic differentiation (notes-bong.md §1).

``q_psi(theta) = exp(psi^T T(theta) - Phi(psi))`` with log partition ``Phi``; the mean parameter is
``rho = grad Phi(psi)`` and the Fisher matrix ``F = hess Phi(psi)``. One natural-gradient step of
the expected log-likelihood with learning rate 1 (Jones et al. 2024, eq. 3/5) is

    psi_t = psi + F^-1 grad_psi E_q[log p(y | theta)].

When the likelihood is conjugate, ``E_q[log p] = lambda(y)^T rho + const`` and the step is Bayes'
rule ``psi + lambda(y)`` exactly (Prop. 4.1); the Gaussian families of :mod:`zoo_bong.beliefs` are
the closed forms of this step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.func import grad, hessian


def natural_gradient_step(log_partition: Callable[[Tensor], Tensor],
                          expected_log_lik: Callable[[Tensor], Tensor], psi: Tensor,
                          alpha: float = 1.0) -> Tensor:
    """``psi + alpha F(psi)^-1 grad_psi expected_log_lik(rho(psi))``, with ``rho = grad Phi``;
    ``expected_log_lik`` is a function of the mean parameters ``rho``."""
    def objective(p: Tensor) -> Tensor:
        return expected_log_lik(grad(log_partition)(p))

    fisher = hessian(log_partition)(psi)
    return psi + alpha * torch.linalg.solve(fisher, grad(objective)(psi))
