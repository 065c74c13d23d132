"""Covariance functions on features, batched over a leading class (or episode) axis.

A kernel built with ``batch_shape=(C,)`` has one set of hyper-parameters per class and maps
features ``[n, d]`` (shared) or ``[C, n, d]`` to ``[C, n1, n2]``; ``batch_shape=()`` shares them.
Positive hyper-parameters are stored as softplus pre-images.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.errors import HyperParameterError

__all__ = ["BUILTIN", "BNCosineKernel", "CosineKernel", "Kernel", "LinearKernel", "MaternKernel",
           "PolynomialKernel", "RBFKernel"]


def _inv_softplus(y: float) -> float:
    return y + math.log(-math.expm1(-y))


def _option(kernel: str, name: str, value: object, smallest: float = 0.0,
            whole: bool = False) -> None:
    """Refuse a kernel option that is not a number > ``smallest`` (an int where ``whole``)."""
    kind_ = numbers.Integral if whole else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind_) or not value > smallest:
        kind = "a whole number" if whole else "a number"
        raise HyperParameterError(f"kernel {kernel!r}: option {name}={value!r} must be {kind} > "
                                  f"{smallest:g}")


class Kernel(nn.Module):
    """``k(x1, x2) = outputscale * base(z1, z2)`` on prepared features ``z = prepare(x)``.

    A subclass defines :meth:`base` (and :meth:`base_diag` where the diagonal is cheaper than
    the matrix's). A method calls ``z = kernel.prepare(x)`` once on all of an episode's features,
    then :meth:`gram` for a block of the matrix and :meth:`gram_diag` for its diagonal, both with
    the outputscale; ``kernel(x1, x2)`` and :meth:`diag` do the same from unprepared features.
    The host builds a method's kernel with ``batch_shape=(way,)`` when its ``per_class_kernel``
    hyper-parameter is true, else ``()``."""

    def __init__(self, feature_dim: int, batch_shape: Sequence[int] = (), outputscale: float = 1.0,
                 learn_outputscale: bool = True):
        super().__init__()
        _option(type(self).__name__, "outputscale", outputscale)
        self.feature_dim, self.batch_shape = feature_dim, torch.Size(batch_shape)
        raw = torch.full(self.batch_shape, _inv_softplus(outputscale))
        self.raw_outputscale = nn.Parameter(raw, requires_grad=learn_outputscale)

    def _positive(self, raw: Tensor) -> Tensor:
        return F.softplus(raw)[(...,) + (None,) * 2]  # [*batch, 1, 1] for broadcasting

    @property
    def outputscale(self) -> Tensor:
        return F.softplus(self.raw_outputscale)

    def prepare(self, x: Tensor) -> Tensor:
        """Per-kernel feature transform (identity by default; L2 normalisation, BatchNorm).

        Apply it once to all points of an episode, then use :meth:`gram` on the parts, so that
        every block of the kernel matrix sees the same transform (and batch statistics)."""
        return x

    def base(self, z1: Tensor, z2: Tensor) -> Tensor:
        """The kernel without its outputscale, ``[*batch, n1, n2]`` from prepared features
        ``[n, d]`` or ``[*batch, n, d]``: what a subclass defines."""
        raise NotImplementedError

    def base_diag(self, z: Tensor) -> Tensor:
        """The diagonal of ``base(z, z)``, ``[*batch, n]`` (or a shape that broadcasts to it);
        a subclass overrides it where that is cheaper than the matrix."""
        return torch.diagonal(self.base(z, z), dim1=-2, dim2=-1)

    def gram(self, z1: Tensor, z2: Tensor) -> Tensor:
        """``[*batch, n1, n2]`` from prepared features."""
        return self._positive(self.raw_outputscale) * self.base(z1, z2)

    def gram_diag(self, z: Tensor) -> Tensor:
        """The diagonal of ``gram(z, z)``, ``[*batch, n]``, from prepared features (what
        :func:`zoo.testing.check_kernel` holds equal to it)."""
        return self._positive(self.raw_outputscale)[..., 0] * self.base_diag(z)

    def map_dim(self, d: int) -> int | None:
        """Dimension of a finite feature map with ``gram(z1, z2) = feature_map(z1) @
        feature_map(z2)^T`` on ``d``-dimensional prepared features; ``None`` when there is none
        (RBF, Matern). Lets :mod:`zoo.gram` do the GP algebra in that dimension."""
        return None

    def feature_map(self, z: Tensor) -> Tensor:
        """``[*batch, n, map_dim]`` from prepared features ``[n, d]`` (outputscale included)."""
        raise NotImplementedError(f"{type(self).__name__} has no finite feature map")

    def _scaled(self, phi: Tensor) -> Tensor:
        """``sqrt(outputscale) * phi``, the root taken in ``phi``'s dtype so that the product of
        two factors carries the very outputscale :meth:`gram` uses."""
        return self._positive(self.raw_outputscale).to(phi.dtype).sqrt() * phi

    def forward(self, x1: Tensor, x2: Tensor | None = None) -> Tensor:
        """:meth:`gram` of unprepared features (both prepared together)."""
        if x2 is None:
            z = self.prepare(x1)
            return self.gram(z, z)
        z = self.prepare(torch.cat([x1, x2], dim=-2))
        return self.gram(z[..., : x1.shape[-2], :], z[..., x1.shape[-2]:, :])

    def diag(self, x: Tensor) -> Tensor:
        """:meth:`gram_diag` of unprepared features."""
        return self.gram_diag(self.prepare(x))

    def extra_repr(self) -> str:
        return f"feature_dim={self.feature_dim}, batch_shape={tuple(self.batch_shape)}"


def _sqdist(x1: Tensor, x2: Tensor) -> Tensor:
    d = (x1.pow(2).sum(-1)[..., :, None] + x2.pow(2).sum(-1)[..., None, :]
         - 2 * x1 @ x2.transpose(-1, -2))
    return d.clamp_min(0)


class LinearKernel(Kernel):
    def base(self, x1: Tensor, x2: Tensor) -> Tensor:
        return x1 @ x2.transpose(-1, -2)

    def base_diag(self, x: Tensor) -> Tensor:
        return x.pow(2).sum(-1)

    def map_dim(self, d: int) -> int:
        return d

    def feature_map(self, z: Tensor) -> Tensor:
        return self._scaled(z)


class CosineKernel(LinearKernel):
    """Inner product of L2-normalised features: the linear kernel after normalisation."""

    def prepare(self, x: Tensor) -> Tensor:
        return F.normalize(x, dim=-1)


class BNCosineKernel(CosineKernel):
    """DKT's ``bncossim``: BatchNorm1d over the features, then cosine."""

    def __init__(self, feature_dim: int, batch_shape: Sequence[int] = (), **options):
        super().__init__(feature_dim, batch_shape, **options)
        self.bn = nn.BatchNorm1d(feature_dim)

    def prepare(self, x: Tensor) -> Tensor:
        return F.normalize(self.bn(x), dim=-1)


class RBFKernel(Kernel):
    def __init__(self, feature_dim: int, batch_shape: Sequence[int] = (), lengthscale: float = 1.0,
                 **options):
        _option(type(self).__name__, "lengthscale", lengthscale)
        super().__init__(feature_dim, batch_shape, **options)
        self.raw_lengthscale = nn.Parameter(torch.full(self.batch_shape, _inv_softplus(lengthscale)))

    @property
    def lengthscale(self) -> Tensor:
        return F.softplus(self.raw_lengthscale)

    def base(self, x1: Tensor, x2: Tensor) -> Tensor:
        return torch.exp(-0.5 * _sqdist(x1, x2) / self._positive(self.raw_lengthscale) ** 2)

    def base_diag(self, x: Tensor) -> Tensor:
        # NumPy's rule: torch.broadcast_shapes imports sympy (~1 s per process)
        return x.new_ones(np.broadcast_shapes(self.batch_shape + (1,), x.shape[:-1]))


def _distance(x1: Tensor, x2: Tensor) -> Tensor:
    """Euclidean distances ``[..., n1, n2]`` from the coordinate differences (``torch.cdist``
    without the matrix-product expansion ``|x|^2 - 2 x.y + |y|^2``, whose cancellation leaves
    ``~sqrt(eps) |x|`` at coincident points): exactly 0 where two points coincide, with gradient
    0 there, and differentiable twice."""
    return torch.cdist(x1, x2, compute_mode="donot_use_mm_for_euclid_dist")


class MaternKernel(RBFKernel):
    """Matern with smoothness ``nu`` in {0.5, 1.5, 2.5}, exact at coincident points (``k(x, x)``
    is the outputscale, so the diagonal of :meth:`gram` equals :meth:`gram_diag`)."""

    def __init__(self, feature_dim: int, batch_shape: Sequence[int] = (), nu: float = 2.5, **options):
        if nu not in (0.5, 1.5, 2.5):
            raise ValueError(f"Matern nu must be 0.5, 1.5 or 2.5, got {nu}")
        super().__init__(feature_dim, batch_shape, **options)
        self.nu = nu

    def base(self, x1: Tensor, x2: Tensor) -> Tensor:
        r = _distance(x1, x2) / self._positive(self.raw_lengthscale)
        s = math.sqrt(2 * self.nu) * r
        poly = {0.5: 1.0, 1.5: 1 + s, 2.5: 1 + s + s**2 / 3}[self.nu]
        return poly * torch.exp(-s)


class PolynomialKernel(Kernel):
    """``(x1 . x2 + c)^order`` with a learnable offset ``c >= 0``; ``normalize`` L2-normalises first."""

    def __init__(self, feature_dim: int, batch_shape: Sequence[int] = (), order: int = 2,
                 offset: float = 1.0, normalize: bool = False, **options):
        _option("polynomial", "order", order, 0, whole=True)
        _option("polynomial", "offset", offset)
        super().__init__(feature_dim, batch_shape, **options)
        self.order, self.normalize = int(order), normalize
        self.raw_offset = nn.Parameter(torch.full(self.batch_shape, _inv_softplus(offset)))

    def prepare(self, x: Tensor) -> Tensor:
        return F.normalize(x, dim=-1) if self.normalize else x

    def base(self, x1: Tensor, x2: Tensor) -> Tensor:
        return (x1 @ x2.transpose(-1, -2) + self._positive(self.raw_offset)) ** self.order

    def base_diag(self, x: Tensor) -> Tensor:
        return (x.pow(2).sum(-1) + F.softplus(self.raw_offset)[..., None]) ** self.order

    def map_dim(self, d: int) -> int | None:
        """Orders 1 and 2 only: ``d + 1`` and ``d (d + 1) / 2 + d + 1`` (higher orders grow as
        ``d^p``, beyond any episode's size)."""
        return {1: d + 1, 2: d * (d + 1) // 2 + d + 1}.get(self.order)

    def feature_map(self, z: Tensor) -> Tensor:
        """``(x.y + c)^2 = sum_{i<=j} w_ij x_i x_j y_i y_j + 2c x.y + c^2`` with ``w_ij`` = 1 on
        the diagonal and 2 off it; order 1 is ``[x, sqrt(c)]``."""
        if self.map_dim(z.shape[-1]) is None:
            raise NotImplementedError(f"polynomial order {self.order} has no feature map here")
        c = F.softplus(self.raw_offset).to(z.dtype)[..., None, None]  # [*batch, 1, 1]
        z = z.expand(*self.batch_shape, *z.shape[-2:])
        ones = torch.ones_like(z[..., :1])
        if self.order == 1:
            return self._scaled(torch.cat([z, c.sqrt() * ones], -1))
        i, j = torch.triu_indices(z.shape[-1], z.shape[-1], device=z.device)
        weight = torch.full(i.shape, math.sqrt(2.0), dtype=z.dtype, device=z.device)
        weight[i == j] = 1.0
        quad = weight * z[..., i] * z[..., j]
        return self._scaled(torch.cat([quad, (2 * c).sqrt() * z, c * ones], -1))


BUILTIN = {"linear": LinearKernel, "cosine": CosineKernel, "bncosine": BNCosineKernel,
           "rbf": RBFKernel, "polynomial": PolynomialKernel, "matern": MaternKernel}
