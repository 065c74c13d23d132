"""Stein kernels: any registered kernel ``k`` turned into ``k0`` with ``int k0(x, y) pi(x) dx = 0``
(Oates et al. 2017; Sun 2023, Eq. 3.5), and the matrix-valued Stein kernel of several related
distributions (Sun 2023, Thm 4.2.1, separable case ``K = B k``, Eq. 4.4).

``k0(x, y) = tr(d_x d_y k) + s(x) . grad_y k + s(y) . grad_x k + (s(x) . s(y)) k``.

The base kernel's value, gradients and trace term come from :func:`derivatives`: in closed form for
the squared exponential (isotropic or one lengthscale per dimension), the preconditioned squared
exponential, the polynomial kernel and products of one-dimensional kernels (Sun 2023, App. A.3.1;
written here as ``tr = k (p . q + sum_j d_xj d_yj log k)`` with ``p, q`` the gradients of
``log k``), and by autograd for any other kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from zoo.kernels import Kernel, PolynomialKernel, RBFKernel


class Derivatives(NamedTuple):
    """``k [..., n, m]``, ``grad_x k``, ``grad_y k`` ``[..., n, m, d]``, ``tr d_x d_y k [..., n, m]``."""

    k: Tensor
    dx: Tensor
    dy: Tensor
    trace: Tensor


class PreconditionedRBFKernel(RBFKernel):
    """``exp(-|x - y|^2 / (2 l^2)) / ((1 + a |x|^2)(1 + a |y|^2))`` (Oates et al. 2017): the
    preconditioner keeps ``k0`` bounded when the score grows linearly."""

    def __init__(self, feature_dim: int, batch_shape: Sequence[int] = (), alpha: float = 0.1,
                 **options):
        super().__init__(feature_dim, batch_shape, **options)
        self.alpha = float(alpha)

    def base(self, x1: Tensor, x2: Tensor) -> Tensor:
        a1 = 1 + self.alpha * x1.pow(2).sum(-1)
        a2 = 1 + self.alpha * x2.pow(2).sum(-1)
        return super().base(x1, x2) / (a1[..., :, None] * a2[..., None, :])

    def base_diag(self, x: Tensor) -> Tensor:
        return super().base_diag(x) / (1 + self.alpha * x.pow(2).sum(-1)).pow(2)


class ProductKernel(Kernel):
    """``prod_j k_j(x_j, y_j)``: one one-dimensional kernel per input dimension (the ARD squared
    exponential of the Borehole experiment is the product of one-dimensional RBF kernels)."""

    def __init__(self, factors: Sequence[Kernel]):
        super().__init__(len(factors), learn_outputscale=False)
        self.factors = nn.ModuleList(factors)

    @classmethod
    def rbf(cls, lengthscales: Sequence[float]) -> ProductKernel:
        return cls([RBFKernel(1, lengthscale=float(s), learn_outputscale=False)
                    for s in lengthscales])

    def base(self, x1: Tensor, x2: Tensor) -> Tensor:
        out = None
        for j, k in enumerate(self.factors):
            kj = k.gram(x1[..., j:j + 1], x2[..., j:j + 1])
            out = kj if out is None else out * kj
        return out


def _pairs(x: Tensor, y: Tensor) -> Tensor:
    return x[..., :, None, :] - y[..., None, :, :]


def _rbf(kernel: RBFKernel, x: Tensor, y: Tensor) -> Derivatives:
    ell2 = kernel.lengthscale.to(x.dtype)[..., None, None, None] ** 2
    diff = _pairs(x, y)
    k = kernel.outputscale.to(x.dtype)[..., None, None] * torch.exp(
        -0.5 * (diff.pow(2) / ell2).sum(-1))
    p = -diff / ell2  # grad_x log k; grad_y log k = -p
    q = -p
    if isinstance(kernel, PreconditionedRBFKernel):
        a = kernel.alpha
        ax = 1 / (1 + a * x.pow(2).sum(-1))
        ay = 1 / (1 + a * y.pow(2).sum(-1))
        k = k * ax[..., :, None] * ay[..., None, :]
        p = p - 2 * a * (x * ax[..., None])[..., :, None, :]
        q = q - 2 * a * (y * ay[..., None])[..., None, :, :]
    mixed = (1 / ell2).expand_as(diff).sum(-1)  # sum_j d_xj d_yj log k
    return Derivatives(k, k[..., None] * p, k[..., None] * q, k * ((p * q).sum(-1) + mixed))


def _polynomial(kernel: PolynomialKernel, x: Tensor, y: Tensor) -> Derivatives:
    scale = kernel.outputscale.to(x.dtype)[..., None, None]
    c = torch.nn.functional.softplus(kernel.raw_offset).to(x.dtype)[..., None, None]
    order, d = kernel.order, x.shape[-1]
    dot = x @ y.transpose(-1, -2)
    base = dot + c
    k = scale * base**order
    first = scale * order * base ** (order - 1)
    dx = first[..., None] * y[..., None, :, :]
    dy = first[..., None] * x[..., :, None, :]
    second = scale * order * (order - 1) * base ** (order - 2) if order > 1 else 0 * base
    return Derivatives(k, dx, dy, second * dot + d * first)


def _product(kernel: ProductKernel, x: Tensor, y: Tensor) -> Derivatives:
    parts = [derivatives(f, x[..., j:j + 1], y[..., j:j + 1]) for j, f in enumerate(kernel.factors)]
    values = torch.stack([p.k for p in parts])  # [d, ..., n, m]
    d = len(parts)
    others = [torch.prod(values[[i for i in range(d) if i != j]], 0) if d > 1
              else torch.ones_like(values[0]) for j in range(d)]
    k = torch.prod(values, 0)
    dx = torch.stack([p.dx[..., 0] * o for p, o in zip(parts, others)], -1)
    dy = torch.stack([p.dy[..., 0] * o for p, o in zip(parts, others)], -1)
    trace = sum(p.trace * o for p, o in zip(parts, others))
    return Derivatives(k, dx, dy, trace)


def _boundary(kernel: BoundaryKernel, x: Tensor, y: Tensor) -> Derivatives:
    """``k = delta(x) delta(y) r(x, y)`` by the product rule from ``r``'s derivatives."""
    r = derivatives(kernel.inner, x, y)
    dx_, dy_ = boundary_factor(x), boundary_factor(y)
    gx, gy = boundary_gradient(x), boundary_gradient(y)
    both = dx_[..., :, None] * dy_[..., None, :]
    k = both * r.k
    dx = both[..., None] * r.dx + (r.k * dy_[..., None, :])[..., None] * gx[..., :, None, :]
    dy = both[..., None] * r.dy + (r.k * dx_[..., :, None])[..., None] * gy[..., None, :, :]
    trace = (both * r.trace + dy_[..., None, :] * (gx[..., :, None, :] * r.dy).sum(-1)
             + dx_[..., :, None] * (gy[..., None, :, :] * r.dx).sum(-1)
             + r.k * (gx @ gy.transpose(-1, -2)))
    return Derivatives(k, dx, dy, trace)


def boundary_gradient(x: Tensor) -> Tensor:
    """``grad delta(x)``: ``(1 - 2 x_j) prod_{i != j} x_i (1 - x_i)``."""
    factors = x * (1 - x)
    d = x.shape[-1]
    others = torch.stack([factors[..., [i for i in range(d) if i != j]].prod(-1)
                          for j in range(d)], -1)
    return (1 - 2 * x) * others


def autograd_derivatives(kernel: Kernel, x: Tensor, y: Tensor) -> Derivatives:
    """Value, gradients and trace term of any kernel by automatic differentiation (``d`` extra
    backward passes for the trace); the reference the closed forms are tested against. A kernel
    that clamps squared distances at zero (the zoo's RBF and Matern) has a wrong trace at
    coincident points this way, which is one reason the closed forms exist."""
    n, m = x.shape[-2], y.shape[-2]
    xe = x[..., :, None, :].expand(*x.shape[:-2], n, m, x.shape[-1]).detach().requires_grad_(True)
    ye = y[..., None, :, :].expand(*y.shape[:-2], n, m, y.shape[-1]).detach().requires_grad_(True)
    k = kernel.gram(kernel.prepare(xe[..., None, :]), kernel.prepare(ye[..., None, :]))[..., 0, 0]
    dx, dy = torch.autograd.grad(k.sum(), (xe, ye), create_graph=True)
    trace = sum(torch.autograd.grad(dx[..., j].sum(), ye, retain_graph=True)[0][..., j]
                for j in range(x.shape[-1]))
    return Derivatives(k, dx, dy, trace)


def derivatives(kernel: Kernel, x: Tensor, y: Tensor) -> Derivatives:
    """The base kernel's value, gradients and trace term at all pairs of ``x [..., n, d]`` and
    ``y [..., m, d]``: closed forms where known, autograd otherwise."""
    if isinstance(kernel, RBFKernel) and type(kernel) in (RBFKernel, PreconditionedRBFKernel):
        return _rbf(kernel, x, y)
    if type(kernel) is PolynomialKernel and not kernel.normalize:
        return _polynomial(kernel, x, y)
    if isinstance(kernel, ProductKernel):
        return _product(kernel, x, y)
    if isinstance(kernel, BoundaryKernel):
        return _boundary(kernel, x, y)
    return autograd_derivatives(kernel, x, y)


def combine(parts: Derivatives, sx: Tensor, sy: Tensor) -> Tensor:
    """``k0`` from the base kernel's derivatives and the scores ``sx [..., n, d]``, ``sy [..., m, d]``."""
    return (parts.trace + (sx[..., :, None, :] * parts.dy).sum(-1)
            + (sy[..., None, :, :] * parts.dx).sum(-1) + (sx @ sy.transpose(-1, -2)) * parts.k)


def stein_kernel(kernel: Kernel, x: Tensor, y: Tensor, sx: Tensor, sy: Tensor) -> Tensor:
    """The Stein kernel ``k0(x_i, y_j) [..., n, m]`` of ``kernel`` under the distribution whose
    scores at ``x`` and ``y`` are ``sx`` and ``sy``."""
    return combine(derivatives(kernel, x, y), sx, sy)


def matrix_stein_kernel(kernel: Kernel, B: Tensor, x: Tensor, y: Tensor, sx: Tensor,
                        sy: Tensor) -> Tensor:
    """The matrix-valued Stein kernel of ``K = B k`` for ``T`` distributions (Sun 2023, Eq. 4.4):
    ``K0(x, y)_{tt'} = B_{tt'} [tr + s_t'(y) . grad_x k + s_t(x) . grad_y k + s_t(x) . s_t'(y) k]``,
    ``[n, m, T, T]`` from every distribution's scores ``sx [T, n, d]``, ``sy [T, m, d]``."""
    parts = derivatives(kernel, x, y)
    cross = (parts.trace[..., None, None]
             + torch.einsum("anj,nmj->nma", sx, parts.dy)[..., :, None]
             + torch.einsum("bmj,nmj->nmb", sy, parts.dx)[..., None, :]
             + torch.einsum("anj,bmj->nmab", sx, sy) * parts.k[..., None, None])
    return B * cross




class BoundaryKernel(Kernel):
    """``delta(x) delta(y) k(x, y)`` with ``delta(x) = prod_j x_j (1 - x_j)``: vanishes on the
    boundary of the unit cube, so that ``k0`` has zero mean under the uniform distribution, whose
    score is zero inside (Sun 2023, App. B.3.1). Derivatives by the product rule."""

    def __init__(self, base: Kernel):
        super().__init__(base.feature_dim, base.batch_shape, learn_outputscale=False)
        self.inner = base

    def base(self, x1: Tensor, x2: Tensor) -> Tensor:
        return (self.inner.gram(x1, x2) * boundary_factor(x1)[..., :, None]
                * boundary_factor(x2)[..., None, :])


def boundary_factor(x: Tensor) -> Tensor:
    """``delta(x) = prod_j x_j (1 - x_j)``, zero on the boundary of the unit cube."""
    return (x * (1 - x)).prod(-1)
