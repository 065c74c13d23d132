"""Deep Kernel Transfer (Patacchiola, Turner, Crowley, O'Boyle & Storkey, NeurIPS 2020).

One-vs-rest GP regression: class ``c``'s GP regresses ``+1`` on its own points and ``-1`` on the
others, with a Gaussian likelihood (noise variance 0.1, fixed by default) and a learnable constant
mean. Meta-training maximises the exact marginal likelihood of support and query together (per
point, summed over the class GPs); prediction conditions on the support only.

Class probabilities (DKT itself only takes the argmax of the predictive means) are the expected
softmax of the independent Gaussian predictives of the latent class functions, ``E[softmax(f*)]``,
estimated by the ``estimator`` (antithetic Sobol, ``prob_samples`` draws, by default) seeded by the
episode; the runner's validation-fitted
temperature is applied afterwards as for every other method.

Deviation from the authors' code, declared: there each class's GP is its own gpytorch model with
its own ``ConstantMean`` and ``ScaleKernel`` (a constant mean and an output scale per class); here
the constant mean is one scalar shared by the classes and the kernel (its output scale included)
is shared unless ``per_class_kernel=true``, so that a model trained ``way``-way scores any way.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

import zoo
from zoo import Episode, HParam
from zoo.families import GPMethod
from zoo.inference import DTYPE, gaussian_log_marginal


class DKT(GPMethod):
    """Deep kernel transfer: exact GP regression on +-1 one-vs-rest targets."""

    name = "dkt"
    default_kernel: ClassVar[str | None] = "bncosine"
    batches_episodes = True  # the marginal likelihood draws nothing
    hyperparameters = {
        "noise": HParam(0.1, gt=0, doc="Gaussian observation noise variance (initial if learnt)"),
        "learn_noise": HParam(False, doc="meta-learn the noise variance"),
        "prob_samples": HParam(512, ge=1, doc="draws per query for the class probabilities"),
    }

    def __init__(self, backbone, *, way: int, kernel=None, **hparams: Any):
        super().__init__(backbone, way=way, kernel=kernel, **hparams)
        raw = torch.tensor(math.log(math.expm1(self.hparams["noise"])))
        self.raw_noise = nn.Parameter(raw, requires_grad=self.hparams["learn_noise"])
        self.mean = nn.Parameter(torch.zeros(()))

    @property
    def noise(self) -> Tensor:
        return nn.functional.softplus(self.raw_noise)

    @staticmethod
    def targets(y: Tensor, way: int) -> Tensor:
        """``[C, n]`` one-vs-rest regression targets: +1 for the class, -1 elsewhere."""
        return 2 * nn.functional.one_hot(y, way).T.to(DTYPE) - 1

    def meta_loss(self, episode: Episode) -> Tensor:
        """Negative exact log marginal likelihood per point, summed over the class GPs, on
        support and query together (as DKT trains)."""
        K, y = self.labelled_kernel(episode)
        r = self.targets(y, episode.way) - self.mean.to(DTYPE)
        log_ml = gaussian_log_marginal(K, r, self.noise.to(DTYPE), self.jitter, episode.id)
        return -(log_ml / y.numel()).sum()

    def latent(self, episode: Episode) -> tuple[Tensor, Tensor]:
        """Latent predictive mean and variance ``[Q, C]`` from the support (Gaussian sites with
        precision ``1/noise`` and natural mean ``(t - mean)/noise`` are exact GP regression)."""
        mats = self.kernel_matrices(episode)
        noise, m0 = self.noise.to(DTYPE), self.mean.to(DTYPE)
        t = self.targets(episode.support_y, episode.way) - m0
        lam = torch.ones_like(t[:1]) / noise  # shared by the classes: one factorisation
        post = self.posterior(mats.Kss, lam, t / noise, episode)
        mean, var = self.predictive(post, mats)
        return mean + m0, var

    def probabilities(self, mean: Tensor, var: Tensor, episode: Episode, **options: Any) -> Tensor:
        return super().probabilities(mean, var, episode, samples=self.hparams["prob_samples"],
                                     **options)


@zoo.hookimpl
def zoo_register_methods(register):
    register(DKT)
