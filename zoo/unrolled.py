"""Adam written out as tensor expressions, so that an inner loop of Adam steps stays
differentiable in what it starts from (unrolled, second-order meta-learning): Meta-CV's inner
loop (:mod:`zoo.control_variates.neural`) and the inner ascent of a last-layer method.

``torch.optim.Adam`` updates parameters in place, outside the autograd graph; this is its
update (Kingma & Ba 2015, Algorithm 1) with fresh moments per adaptation:
``m_t = b1 m_{t-1} + (1 - b1) g``, ``v_t = b2 v_{t-1} + (1 - b2) g^2``, and the step
``p - lr (m_t / c1) / (sqrt(v_t / c2) + eps)`` with the bias corrections ``c1 = 1 - b1^t``,
``c2 = 1 - b2^t``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["ADAM_BETAS", "ADAM_EPS", "UnrolledAdam"]

ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8
"""``torch.optim.Adam``'s defaults."""


class UnrolledAdam:
    """Adam steps on a list of tensors, each step a differentiable function of the parameters
    and gradients it is given, the moments kept from one call to the next (a fresh instance
    per adaptation).

    :meth:`__call__` is ``torch.optim.Adam``'s descent step, with the arithmetic in its order
    (so to rounding the same numbers); the square root is taken where the second moment is
    positive only, so that a gradient that is exactly zero (a centred output's bias) leaves a
    finite second derivative. One step from fresh moments moves each parameter by about ``lr``
    whatever its gradient's scale (``lr g / (|g| + eps)``). A subclass with another step (an
    ascent) uses :meth:`moments` for the same bookkeeping."""

    def __init__(self, lr: float, betas: tuple[float, float] = ADAM_BETAS, eps: float = ADAM_EPS):
        self.lr, self.betas, self.eps = lr, betas, eps
        self.t = 0
        self.m: list[Tensor] = []
        self.v: list[Tensor] = []

    def moments(self, grads: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor], float, float]:
        """Advance the moments by one step with ``grads``: ``(m_t, v_t, c1, c2)``, the moments
        and their bias corrections."""
        b1, b2 = self.betas
        if not self.m:
            self.m = [torch.zeros_like(g) for g in grads]
            self.v = [torch.zeros_like(g) for g in grads]
        self.t += 1
        self.m = [b1 * m + (1 - b1) * g for m, g in zip(self.m, grads)]
        self.v = [b2 * v + (1 - b2) * g * g for v, g in zip(self.v, grads)]
        return self.m, self.v, 1 - b1**self.t, 1 - b2**self.t

    def __call__(self, params: Sequence[Tensor], grads: Sequence[Tensor]) -> list[Tensor]:
        """One descent step: ``p - (lr / c1) m / (sqrt(v) / sqrt(c2) + eps)`` per parameter."""
        m_t, v_t, c1, c2 = self.moments(grads)
        out = []
        for p, m, v in zip(params, m_t, v_t):
            positive = v > 0
            root = torch.where(positive, torch.where(positive, v, 1.0).sqrt(), 0.0)
            out.append(p - (self.lr / c1) * m / (root / math.sqrt(c2) + self.eps))
        return out
