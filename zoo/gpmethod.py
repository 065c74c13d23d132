"""The skeleton every GP classifier in the zoo shares: backbone -> features -> kernel matrices ->
(the plugin's inference: Gaussian sites per class) -> :class:`~zoo.gp.SitePosterior` -> predictive
marginals at the queries.

A GP plugin subclasses :class:`GPMethod` and supplies only its inference and likelihood; kernels,
float64 algebra, the jitter policy, finiteness checks and the predictive live here once. That is
what makes "mirror descent vs gradient descent, all else identical" a one-line change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from zoo.episode import Episode
from zoo.errors import check_finite
from zoo.gp import DTYPE, SitePosterior
from zoo.hparams import HParam
from zoo.method import Method


@dataclass
class KernelMatrices:
    """Prior covariances per class, float64: support-support ``[C, n, n]``, support-query
    ``[C, n, Q]`` and the query prior variances ``[C, Q]``."""

    Kss: Tensor
    Ksq: Tensor
    kqq: Tensor


class GPMethod(Method):
    """Base of the GP classifiers: one latent GP per class over deep-kernel features."""

    uses_kernel: ClassVar[bool] = True
    default_kernel: ClassVar[str | None] = "rbf"
    hyperparameters = {"kernel_lr": HParam(1e-4, gt=0, doc="Adam learning rate of the kernel")}

    def kernel_matrices(self, episode: Episode, with_query: bool = True) -> KernelMatrices:
        """Features of support and query from one backbone pass (one set of batch statistics),
        one kernel transform for all points, then per-class kernel blocks in float64."""
        n, C = episode.support_x.shape[0], episode.way
        x = torch.cat([episode.support_x, episode.query_x]) if with_query else episode.support_x
        z = self.kernel.prepare(check_finite(self.features(x), "features", episode))
        zs, zq = z[:n], z[n:]

        def per_class(K: Tensor) -> Tensor:
            K = check_finite(K, "kernel matrix", episode).to(DTYPE)
            return K.expand(C, *K.shape[-2:]) if K.ndim == 2 else K

        Kss, Ksq = per_class(self.kernel.gram(zs, zs)), per_class(self.kernel.gram(zs, zq))
        kqq = per_class(self.kernel.gram_diag(zq)[..., None, :])[..., 0, :]
        return KernelMatrices(Kss, Ksq, kqq)

    def posterior(self, K: Tensor, lam: Tensor, nu: Tensor, episode: Episode) -> SitePosterior:
        return SitePosterior(K, lam, nu, jitter=self.jitter, episode=episode.id)

    @staticmethod
    def predictive(post: SitePosterior, mats: KernelMatrices) -> tuple[Tensor, Tensor]:
        """Query marginals per class, returned as ``[Q, C]`` mean and variance."""
        mean, var = post.predict(mats.Ksq, mats.kqq)
        return mean.T, var.T

    @staticmethod
    def onehot(episode: Episode) -> Tensor:
        return torch.nn.functional.one_hot(episode.support_y, episode.way).to(DTYPE)

    def param_groups(self) -> list[dict[str, Any]]:
        kernel = [p for p in self.kernel.parameters() if p.requires_grad]
        ids = {id(p) for p in kernel}
        rest = [p for p in self.parameters() if p.requires_grad and id(p) not in ids]
        groups = [{"params": rest, "lr": self.hparams["lr"]}]
        if kernel:
            groups.append({"params": kernel, "lr": self.hparams["kernel_lr"]})
        return groups
