"""Function-space members of the latent-Gaussian family: the skeleton every GP classifier in the
zoo shares, backbone -> features -> kernel matrices -> (the plugin's inference: Gaussian sites per
class) -> :class:`~zoo.gp.SitePosterior` -> predictive marginals at the queries -> probabilities.

A GP plugin subclasses :class:`GPMethod` and supplies only its inference and likelihood; kernels
(one builder for every kernel matrix), float64 algebra, the jitter policy, finiteness checks, the
predictive and the expectation step live in the core once. That is
what makes "mirror descent vs gradient descent, all else identical" a one-line change.

The builder also picks the algebra route (hyper-parameter ``algebra``, :mod:`zoo.gram`): dense
``N x N`` matrices, or a :class:`~zoo.gram.FeatureGram` factor (the kernel's exact feature map, or
a Nystrom factor from ``inducing`` points) on which :class:`~zoo.gp.SitePosterior` works in the
factor's dimension; the methods' inner loops are the same code on every route.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from zoo.episode import Episode
from zoo.families.latent_gaussian import LatentGaussianMethod
from zoo.gp import DTYPE, SitePosterior
from zoo.gram import ROUTES, FeatureGram, Gram, choose_route, inducing_index, nystrom_factor
from zoo.hparams import HParam
from zoo.jitter import check_finite


@dataclass
class KernelMatrices:
    """Prior covariances per class, float64: support-support ``[C, n, n]``, support-query
    ``[C, n, Q]`` (dense, or :class:`~zoo.gram.FeatureGram` factors) and the query prior variances
    ``[C, Q]``."""

    Kss: Gram
    Ksq: Gram
    kqq: Tensor


class GPMethod(LatentGaussianMethod):
    """Base of the GP classifiers: one latent GP per class over deep-kernel features."""

    uses_kernel: ClassVar[bool] = True
    default_kernel: ClassVar[str | None] = "rbf"
    any_way: ClassVar[bool] = True
    hyperparameters = {
        "kernel_lr": HParam(1e-4, gt=0, doc="Adam learning rate of the kernel"),
        "outputscale_lr": HParam(None, type=float, gt=0, doc="Adam learning rate of the kernel's "
                                 "output scale (None: kernel_lr). At the papers' kernel_lr = 1e-4 "
                                 "the scale stays near its initial 1 for thousands of steps, which "
                                 "keeps bounded kernels' probabilities near uniform"),
        "per_class_kernel": HParam(False, doc="one set of kernel hyper-parameters per class "
                                   "(read by zoo.method.build_method)"),
        "algebra": HParam("auto", choices=ROUTES, doc="GP algebra route (zoo.gram): dense N x N, "
                          "the kernel's feature map, Nystrom, or auto (the cheaper exact one)"),
        "inducing": HParam(128, ge=1, doc="inducing points of algebra=nystrom"),
        "meta_batch": HParam(1, ge=1, doc="episodes per optimizer step (read by the trainer; "
                             "one batched call where the method declares batches_episodes)"),
    }

    @classmethod
    def scores_any_way(cls, hparams: Mapping[str, Any]) -> bool:
        """One GP per class, its kernel shared unless ``per_class_kernel`` gives one per class."""
        return cls.any_way and not hparams.get("per_class_kernel", False)

    def _prepared(self, x: Tensor, episode: Episode) -> Tensor:
        """Features from one backbone pass (one set of batch statistics) and one kernel transform
        for all points, in float64: the kernel matrix is formed in the precision of the algebra
        that factorises it (a float32 Gram of near-duplicate features loses the small
        eigenvalues that the Cholesky and the KL read, and no later conversion brings them
        back)."""
        return self.kernel.prepare(check_finite(self.features(x), "features", episode)).to(DTYPE)

    @staticmethod
    def _per_class(K: Tensor, episode: Episode) -> Tensor:
        K = check_finite(K, "kernel matrix", episode)
        return K.expand(episode.way, *K.shape[-2:]) if K.ndim == 2 else K

    def route(self, n: int, d: int, episode: Episode | None = None) -> str:
        """The algebra route for ``n`` labelled points with ``d``-dimensional prepared features
        (``episode``: for a method whose algebra is not sized by the labelled points alone, as
        OVE's pair space)."""
        return choose_route(self.hparams["algebra"], n, self.kernel.map_dim(d))

    def _factor(self, z: Tensor, n: int, route: str, episode: Episode) -> Tensor:
        """``Phi`` ``[(C,) N, D]`` float64 with ``Phi Phi^T`` = the kernel on all of ``z``
        (``features``) or its Nystrom approximation from inducing points among the first ``n``."""
        if route == "features":
            return check_finite(self.kernel.feature_map(z), "feature map", episode).to(DTYPE)
        zm = z[inducing_index(n, self.hparams["inducing"], z.device)]
        K_nm = check_finite(self.kernel.gram(z, zm), "kernel matrix", episode).to(DTYPE)
        K_mm = self.kernel.gram(zm, zm).to(DTYPE)
        return nystrom_factor(K_nm, K_mm, lambda A: self.jitter.cholesky(
            A, "inducing-point kernel K_mm", episode.id))

    def kernel_matrices(self, episode: Episode) -> KernelMatrices:
        """Support-support and support-query blocks and the query prior variances, per class."""
        n = episode.support_x.shape[0]
        z = self._prepared(torch.cat([episode.support_x, episode.query_x]), episode)
        zs, zq = z[:n], z[n:]
        kqq = self._per_class(self.kernel.gram_diag(zq)[..., None, :], episode)[..., 0, :]
        route = self.route(n, z.shape[-1], episode)
        if route != "dense":
            phi = self._factor(z, n, route, episode)
            left, right = phi[..., :n, :], phi[..., n:, :]
            return KernelMatrices(FeatureGram.of(left).expand(episode.way),
                                  FeatureGram(left, right).expand(episode.way), kqq)
        Kss = self._per_class(self.kernel.gram(zs, zs), episode)
        Ksq = self._per_class(self.kernel.gram(zs, zq), episode)
        return KernelMatrices(Kss, Ksq, kqq)

    def labelled_kernel(self, episode: Episode) -> tuple[Gram, Tensor]:
        """The prior covariance ``[C, N, N]`` of support and query together and their labels
        ``[N]``: the training objective of methods that fit every labelled point of an episode."""
        z = self._prepared(torch.cat([episode.support_x, episode.query_x]), episode)
        labels = torch.cat([episode.support_y, episode.query_y])
        route = self.route(z.shape[0], z.shape[-1], episode)
        if route != "dense":
            phi = self._factor(z, z.shape[0], route, episode)
            return FeatureGram.of(phi).expand(episode.way), labels
        return self._per_class(self.kernel.gram(z, z), episode), labels

    def posterior(self, K: Gram, lam: Tensor, nu: Tensor, episode: Episode) -> SitePosterior:
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
        """The backbone at ``lr``, the kernel at ``kernel_lr``, and its output scale(s) at
        ``outputscale_lr`` when that is set."""
        kernel = [p for p in self.kernel.parameters() if p.requires_grad]
        scale_lr = self.hparams["outputscale_lr"]
        scales = [p for name, p in self.kernel.named_parameters()
                  if p.requires_grad and name.endswith("raw_outputscale")] if scale_lr else []
        ids = {id(p) for p in kernel}
        scale_ids = {id(p) for p in scales}
        rest = [p for p in self.parameters() if p.requires_grad and id(p) not in ids]
        groups = [{"params": rest, "lr": self.hparams["lr"]}]
        kernel = [p for p in kernel if id(p) not in scale_ids]
        if kernel:
            groups.append({"params": kernel, "lr": self.hparams["kernel_lr"]})
        if scales:
            groups.append({"params": scales, "lr": scale_lr})
        return groups
