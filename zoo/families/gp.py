"""Function-space members of the latent-Gaussian family: the skeleton every GP classifier in the
zoo shares, backbone -> features -> kernel matrices -> (the plugin's inference: Gaussian sites per
class) -> :class:`~zoo.gp.SitePosterior` -> predictive marginals at the queries -> probabilities.

A GP plugin subclasses :class:`GPMethod` and supplies only its inference and likelihood; kernels
(one builder for every kernel matrix), float64 algebra, the jitter policy, finiteness checks, the
predictive and the expectation step live in the core once. That is
what makes "mirror descent vs gradient descent, all else identical" a one-line change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from zoo.episode import Episode
from zoo.errors import check_finite
from zoo.families.latent_gaussian import LatentGaussianMethod
from zoo.gp import DTYPE, SitePosterior
from zoo.hparams import HParam


@dataclass
class KernelMatrices:
    """Prior covariances per class, float64: support-support ``[C, n, n]``, support-query
    ``[C, n, Q]`` and the query prior variances ``[C, Q]``."""

    Kss: Tensor
    Ksq: Tensor
    kqq: Tensor


class GPMethod(LatentGaussianMethod):
    """Base of the GP classifiers: one latent GP per class over deep-kernel features."""

    uses_kernel: ClassVar[bool] = True
    default_kernel: ClassVar[str | None] = "rbf"
    any_way: ClassVar[bool] = True
    hyperparameters = {
        "kernel_lr": HParam(1e-4, gt=0, doc="Adam learning rate of the kernel"),
        "per_class_kernel": HParam(False, doc="one set of kernel hyper-parameters per class "
                                   "(read by zoo.method.build_method)"),
    }

    @classmethod
    def scores_any_way(cls, hparams: Mapping[str, Any]) -> bool:
        """One GP per class, its kernel shared unless ``per_class_kernel`` gives one per class."""
        return cls.any_way and not hparams.get("per_class_kernel", False)

    def _prepared(self, x: Tensor, episode: Episode) -> Tensor:
        """Features from one backbone pass (one set of batch statistics) and one kernel transform
        for all points."""
        return self.kernel.prepare(check_finite(self.features(x), "features", episode))

    @staticmethod
    def _per_class(K: Tensor, episode: Episode) -> Tensor:
        K = check_finite(K, "kernel matrix", episode).to(DTYPE)
        return K.expand(episode.way, *K.shape[-2:]) if K.ndim == 2 else K

    def kernel_matrices(self, episode: Episode) -> KernelMatrices:
        """Support-support and support-query blocks and the query prior variances, per class."""
        n = episode.support_x.shape[0]
        z = self._prepared(torch.cat([episode.support_x, episode.query_x]), episode)
        zs, zq = z[:n], z[n:]
        Kss = self._per_class(self.kernel.gram(zs, zs), episode)
        Ksq = self._per_class(self.kernel.gram(zs, zq), episode)
        kqq = self._per_class(self.kernel.gram_diag(zq)[..., None, :], episode)[..., 0, :]
        return KernelMatrices(Kss, Ksq, kqq)

    def labelled_kernel(self, episode: Episode) -> tuple[Tensor, Tensor]:
        """The prior covariance ``[C, N, N]`` of support and query together and their labels
        ``[N]``: the training objective of methods that fit every labelled point of an episode."""
        z = self._prepared(torch.cat([episode.support_x, episode.query_x]), episode)
        return (self._per_class(self.kernel.gram(z, z), episode),
                torch.cat([episode.support_y, episode.query_y]))

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
