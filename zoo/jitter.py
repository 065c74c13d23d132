"""The explicit, counted jitter policy for Cholesky factorisations of nearly singular matrices.

Never a silent identity or pseudo-inverse fallback: every use is counted and reported with the
results (``Method.counters``), and a matrix that stays indefinite raises with the episode.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import Tensor

from zoo.errors import NumericalError

log = logging.getLogger(__name__)


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

    def cholesky(self, A: Tensor, what: str = "matrix", episode: str | None = None) -> Tensor:
        where = f" in episode {episode}" if episode else ""
        if not torch.isfinite(A).all():
            raise NumericalError(f"{what}{where} has non-finite entries; check the features "
                                 "(NaN or inf from the backbone) and the learning rate")
        L, info = torch.linalg.cholesky_ex(A)
        if not info.any():
            return L
        scale = torch.diagonal(A, dim1=-2, dim2=-1).abs().mean(-1, keepdim=True).clamp_min(1e-12)
        eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
        jitter = self.initial
        for _ in range(self.max_tries):
            self.uses += 1
            L, info = torch.linalg.cholesky_ex(A + (jitter * scale)[..., None] * eye)
            if not info.any():
                log.debug("jitter %.1e made %s%s positive definite", jitter, what, where)
                return L
            jitter *= self.factor
        raise NumericalError(f"{what}{where} is not positive definite even with relative jitter "
                             f"{jitter / self.factor:.1e}; the kernel may be degenerate for these "
                             "features (try another kernel or a smaller learning rate)")


DEFAULT_JITTER = JitterPolicy()
