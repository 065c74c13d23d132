"""Numerical checks: values that must be finite (:func:`check_finite`), and the explicit,
counted jitter policy for Cholesky factorisations of nearly singular matrices.

Never a silent identity or pseudo-inverse fallback: every use is counted and reported with the
results (``Method.counters``), and a matrix that stays indefinite raises with the episode.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from zoo.batching import defer_check, in_batched_call
from zoo.errors import NumericalError

if TYPE_CHECKING:
    from zoo.episode import Episode

log = logging.getLogger(__name__)


def check_finite(x: Tensor, what: str, episode: Episode,
                 remedy: str = "lower the learning rate or check the input images") -> Tensor:
    """``x`` itself if every value is finite, else a :class:`~zoo.errors.NumericalError` that
    names ``what``, the episode and the ``remedy``; inside a batched meta-loss
    (:mod:`zoo.batching`) the check is made at the end of the call."""
    if defer_check(x.isfinite()):
        return x
    if not bool(x.isfinite().all()):
        raise NumericalError(f"non-finite {what} in episode {episode.id}; {remedy}")
    return x


@dataclass
class JitterPolicy:
    """What to do when a Cholesky factorisation fails: add ``initial * mean(diag)`` to the diagonal,
    grow it by ``factor`` up to ``max_tries`` times, count every use, then raise.

    Never falls back to an identity or a pseudo-inverse silently; ``uses`` is reported in results.
    """

    initial: float = 1e-8
    factor: float = 10.0
    max_tries: int = 6
    uses: int = 0
    _pending: list[tuple[Tensor, str]] | None = field(default=None, repr=False, compare=False)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Inside, :meth:`require` and :meth:`cholesky_pd` on an accelerator queue their checks
        and the exit makes them all at once: an inner loop then never waits for the device (one
        synchronisation per loop instead of several per step). On the CPU nothing changes. Nested,
        the checks wait for the outermost exit."""
        outer, self._pending = self._pending, []
        try:
            yield
            pending = self._pending
        finally:
            self._pending = outer
        if outer is not None:
            outer.extend(pending)
        elif pending:
            failed = torch.stack([flag for flag, _ in pending]).cpu()
            for flag, message in zip(failed.tolist(), (m for _, m in pending), strict=True):
                if flag:
                    raise NumericalError(message)

    def require(self, ok: Tensor, message: str) -> None:
        """Raise :class:`NumericalError` with ``message`` unless the boolean tensor ``ok``; inside
        :meth:`deferred` on an accelerator, at its exit; inside a batched meta-loss, at the end of
        that call (:mod:`zoo.batching`)."""
        if defer_check(ok):
            return
        if self._pending is not None and ok.device.type != "cpu":
            self._pending.append((~ok, message))
        elif not bool(ok):
            raise NumericalError(message)

    def cholesky_pd(self, A: Tensor, what: str = "matrix", episode: str | None = None) -> Tensor:
        """Cholesky of a matrix positive definite by construction (``I + S K S``, eigenvalues
        >= 1: only non-finite entries make it fail, and no jitter would help): inside
        :meth:`deferred` on an accelerator the check waits for the exit, else as :meth:`cholesky`."""
        if self._pending is None or A.device.type == "cpu" or in_batched_call():
            return self.cholesky(A, what, episode)
        L, info = torch.linalg.cholesky_ex(A)
        where = f" in episode {episode}" if episode else ""
        self.require(factorised(L, info),
                     f"{what}{where} could not be factorised (non-finite entries); check the "
                     "features (NaN or inf from the backbone) and the learning rate")
        return L

    def cholesky(self, A: Tensor, what: str = "matrix", episode: str | None = None) -> Tensor:
        """The Cholesky factor of ``A`` (batched over leading axes), with counted jitter when it
        is not numerically positive definite. Inside a batched meta-loss (:mod:`zoo.batching`)
        no jitter is tried: a factorisation that would need it fails the call's deferred check,
        and the loop that replays the meta-batch applies the policy.

        Non-finite entries are found on the factor, not on ``A``: the factorisation reads ``A``'s
        lower triangle, and a NaN or infinity there makes a pivot non-finite or not positive (the
        pivot of row ``i`` is ``sqrt(A_ii - sum_j L_ij^2)``, and ``L_ij`` carries ``A_ij``), so
        :func:`factorised` reads ``D`` numbers a matrix instead of ``D^2`` (at ``D = 64``,
        testing ``A`` took about as long as factorising it). ``A`` itself is read only when the
        factorisation fails, to say why."""
        where = f" in episode {episode}" if episode else ""
        L, info = torch.linalg.cholesky_ex(A)
        ok = factorised(L, info)
        if defer_check(ok) or bool(ok):
            return L
        if not torch.isfinite(A.tril()).all():
            raise NumericalError(f"{what}{where} has non-finite entries; check the features "
                                 "(NaN or inf from the backbone) and the learning rate")
        scale = torch.diagonal(A, dim1=-2, dim2=-1).abs().mean(-1, keepdim=True).clamp_min(1e-12)
        eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
        jitter = self.initial
        for _ in range(self.max_tries):
            self.uses += 1
            L, info = torch.linalg.cholesky_ex(A + (jitter * scale)[..., None] * eye)
            if bool(factorised(L, info)):
                log.debug("jitter %.1e made %s%s positive definite", jitter, what, where)
                return L
            jitter *= self.factor
        raise NumericalError(f"{what}{where} is not positive definite even with relative jitter "
                             f"{jitter / self.factor:.1e}; the kernel may be degenerate for these "
                             "features (try another kernel or a smaller learning rate)")


def factorised(L: Tensor, info: Tensor) -> Tensor:
    """Whether ``torch.linalg.cholesky_ex`` factorised every matrix of a batch into finite
    factors ``L`` (``info`` zero), the finiteness read on the diagonals: an entry ``L_ij`` that is
    not finite makes the pivot ``L_ii`` not finite (:meth:`JitterPolicy.cholesky`)."""
    return (info == 0).all() & torch.isfinite(torch.diagonal(L, dim1=-2, dim2=-1)).all()


DEFAULT_JITTER = JitterPolicy()
