"""Free variational parameters of a Gaussian over the head's weights ``W [C, D]``, per family,
in coordinates whitened by the prior ``N(0, diag(s^2))`` (``s [D]`` per feature, shared by the
classes): ``W = s * U``. A gradient step on ``U``'s parameters is then equally scaled in every
feature whatever the prior, and the KL is invariant to the change of variables.

* ``diag``: ``U_cd ~ N(m_cd, exp(2 r_cd))``;
* ``full``: ``vec(U) ~ N(m, L L^T)``, ``L`` lower triangular with a positive (exponentiated)
  diagonal, over all ``C D`` weights (the notes' "one layer: K-FAC's block is the full matrix");
* ``kfac``: ``U ~ N(M, A (x) I)`` in whitened features, i.e. ``vec(W) ~ N(vec(s * M), A (x) B)``
  with ``A = L_A L_A^T`` over classes and ``B = diag(s) L_B L_B^T diag(s)`` over features.

Every family starts at mean zero with whitened variance ``init_scale^2``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from zoo.gaussians import DiagonalGaussian, FullGaussian, Gaussian, KroneckerGaussian

FAMILIES = ("diag", "full", "kfac")


def _tril(off: Tensor, log_diag: Tensor) -> Tensor:
    return off.tril(-1) + torch.diag_embed(log_diag.exp())


def initial_parameters(family: str, way: int, dim: int, init_scale: float, *,
                       dtype: torch.dtype, device: torch.device) -> list[Tensor]:
    """The free parameters of ``family`` at its starting point (each a leaf with gradients)."""
    zeros = lambda *shape: torch.zeros(*shape, dtype=dtype, device=device)  # noqa: E731
    log0 = math.log(init_scale)
    if family == "diag":
        params = [zeros(way, dim), zeros(way, dim) + log0]
    elif family == "full":
        P = way * dim
        params = [zeros(P), zeros(P, P), zeros(P) + log0]
    elif family == "kfac":
        params = [zeros(way, dim), zeros(way, way), zeros(way) + log0, zeros(dim, dim), zeros(dim)]
    else:
        raise ValueError(f"unknown family {family!r}; use one of {FAMILIES}")
    return [p.requires_grad_() for p in params]


def _diag(params: list[Tensor], scale: Tensor) -> Gaussian:
    m, r = params
    return DiagonalGaussian((scale * m).flatten(), (scale**2 * (2 * r).exp()).flatten())


def _full(params: list[Tensor], scale: Tensor) -> Gaussian:
    m, off, log_diag = params
    s = scale.repeat(m.shape[0] // scale.shape[0])
    return FullGaussian.from_scale_tril(s * m, s[:, None] * _tril(off, log_diag))


def _kfac(params: list[Tensor], scale: Tensor) -> Gaussian:
    m, a_off, a_log, b_off, b_log = params
    return KroneckerGaussian(scale * m, _tril(a_off, a_log), scale[:, None] * _tril(b_off, b_log))


BUILD: dict[str, Callable[[list[Tensor], Tensor], Gaussian]] = {
    "diag": _diag, "full": _full, "kfac": _kfac}


def build(family: str, params: list[Tensor], scale: Tensor) -> Gaussian:
    """The belief over ``vec(W)`` (``[C D]``, row-major) for prior scales ``scale [D]``."""
    return BUILD[family](params, scale)
