"""Langevin Stein operators and scores: functions with known zero mean under ``pi`` from its score
``s = grad log pi`` alone (Sun 2023, Def. 3.2.2; Oates et al. 2017).

* first order, on a vector field ``u: R^d -> R^d``: ``L'[u] = div u + u . s``;
* second order, on a scalar ``u``: ``L''[u] = Laplacian u + grad u . s = L'[grad u]``.

Both by autograd, batched over leading axes (tasks): ``x [..., n, d]``, ``score [..., n, d]``.
A scalar-valued ``field`` is broadcast to every component (``u 1_d``, the thesis's neural CVs), so
that ``L'[u 1] = sum_j d_j u + u sum_j s_j`` needs one backward pass instead of ``d``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

Field = Callable[[Tensor], Tensor]
"""``u``: ``x [..., n, d] -> [..., n, d]`` (a vector field) or ``[..., n]`` (broadcast scalar)."""


@runtime_checkable
class Score(Protocol):
    """``grad_x log pi(x)``: ``x [..., n, d] -> [..., n, d]``; needs no normalising constant."""

    def __call__(self, x: Tensor) -> Tensor: ...


@dataclass(frozen=True)
class GaussianScore:
    """``N(mean, cov)``: ``s(x) = -cov^{-1} (x - mean)`` (``mean [d]``, ``cov [d, d]``)."""

    mean: Tensor
    cov: Tensor

    def __call__(self, x: Tensor) -> Tensor:
        diff = (x - self.mean).unsqueeze(-1)
        return -torch.cholesky_solve(diff, torch.linalg.cholesky(self.cov)).squeeze(-1)


@dataclass(frozen=True)
class GaussianPosteriorScore:
    """The posterior of ``x ~ N(mean, cov)`` given ``y ~ N(A x, noise)``:
    ``s(x) = -cov^{-1} (x - mean) + A^T noise^{-1} (y - A x)`` (prior score plus likelihood score,
    the conjugate case of ``grad log p(x | y) = grad log p(x) + grad log p(y | x)``)."""

    mean: Tensor
    cov: Tensor
    design: Tensor
    noise: Tensor
    y: Tensor

    def __call__(self, x: Tensor) -> Tensor:
        prior = GaussianScore(self.mean, self.cov)(x)
        resid = (self.y - x @ self.design.T).unsqueeze(-1)
        lik = torch.cholesky_solve(resid, torch.linalg.cholesky(self.noise)).squeeze(-1)
        return prior + lik @ self.design


def _with_grad(x: Tensor) -> Tensor:
    return x if x.requires_grad else x.detach().requires_grad_(True)


def first_order(field: Field, x: Tensor, score: Tensor, *, create_graph: bool = True) -> Tensor:
    """``L'[u](x) = div u(x) + u(x) . s(x)``, ``[..., n]``; a scalar ``u`` is broadcast."""
    x = _with_grad(x)
    u = field(x)
    if u.shape == x.shape[:-1]:
        (grad,) = torch.autograd.grad(u.sum(), x, create_graph=create_graph)
        return grad.sum(-1) + u * score.sum(-1)
    div = sum(torch.autograd.grad(u[..., j].sum(), x, create_graph=create_graph,
                                  retain_graph=True)[0][..., j] for j in range(x.shape[-1]))
    return div + (u * score).sum(-1)


def second_order(potential: Callable[[Tensor], Tensor], x: Tensor, score: Tensor, *,
                 create_graph: bool = True) -> Tensor:
    """``L''[u](x) = Laplacian u(x) + grad u(x) . s(x)`` for a scalar ``u: [..., n, d] -> [..., n]``."""
    x = _with_grad(x)

    def grad_u(z: Tensor) -> Tensor:
        return torch.autograd.grad(potential(z).sum(), z, create_graph=True)[0]

    return first_order(grad_u, x, score, create_graph=create_graph)
