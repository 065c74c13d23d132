"""Gaussian mixtures batched over tasks: the variational family and the prior of GMM-NP.

``q(z) = sum_k w_k N(z | mu_k, Lambda_k^{-1})`` (Volpp et al. 2023, Eq. 7) for ``T`` tasks at once:
``log_w [T, K]``, ``mean [T, K, d]``, ``prec [T, K, d, d]`` (precisions: the natural-gradient update
acts on them, Eq. 8a). Densities and draws are :mod:`torch.distributions`'; the one addition is
the log density with its gradient at many draws per task, which the TRNG step needs at its
per-component draws (:mod:`zoo_gmm_np.trng`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor
from torch.distributions import Categorical, MixtureSameFamily, MultivariateNormal


@dataclass(frozen=True)
class GMM:
    """``T`` mixtures of ``K`` full-covariance Gaussians in ``R^d`` (a diagonal family keeps
    ``prec`` diagonal)."""

    log_w: Tensor
    mean: Tensor
    prec: Tensor

    @classmethod
    def standard(cls, means: Tensor, tasks: int = 1) -> GMM:
        """Equal weights, identity covariances at ``means [K, d]`` (the prior of Arenz et al.
        2022 that GMM-NP uses, A.1.2), repeated for ``tasks`` tasks."""
        k, d = means.shape
        eye = torch.eye(d, dtype=means.dtype, device=means.device)
        return cls(torch.full((tasks, k), -math.log(k), dtype=means.dtype, device=means.device),
                   means.expand(tasks, k, d).clone(), eye.expand(tasks, k, d, d).clone())

    @cached_property
    def components(self) -> MultivariateNormal:
        """The ``[T, K]`` batch of components."""
        return MultivariateNormal(self.mean, precision_matrix=self.prec, validate_args=False)

    @cached_property
    def mixture(self) -> MixtureSameFamily:
        """The ``[T]`` batch of mixtures."""
        return MixtureSameFamily(Categorical(logits=self.log_w, validate_args=False),
                                 self.components, validate_args=False)

    def log_prob(self, z: Tensor) -> Tensor:
        """``log q(z)`` of every task's mixture at ``z [..., T, d]``: ``[..., T]``."""
        return self.mixture.log_prob(z)

    def log_prob_and_score(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """``log q(z)`` and its gradient ``-sum_k q(k|z) Lambda_k (z - mu_k)`` at ``z [..., T, d]``
        (``[..., T]``, ``[..., T, d]``; a mixture of ``T = 1`` is shared by every task), without
        autograd: the TRNG step needs the gradient of the mixture at every draw. Both come from
        one batched product ``Lambda_k (z - mu_k)`` over ``[T, K, draws, d]``, so the component
        densities are written out here (the tests check them against :attr:`mixture`'s
        ``log_prob``). Computed in ``z``'s dtype; the log-determinants in the mixture's."""
        *lead, tasks, d = z.shape
        flat = z.reshape(-1, tasks, d).transpose(0, 1)  # [T, M, d]
        diff = flat[:, None] - self.mean.to(z.dtype)[..., None, :]  # [T, K, M, d]
        pulled = diff @ self.prec.to(z.dtype)  # Lambda_k symmetric: rows of Lambda_k (z - mu_k)
        log_norm = (torch.log_softmax(self.log_w, -1)
                    + 0.5 * (torch.logdet(self.prec) - d * math.log(2 * math.pi)))
        joint = log_norm.to(z.dtype)[..., None] - 0.5 * (diff * pulled).sum(-1)  # [T, K, M]
        total = torch.logsumexp(joint, 1)
        score = -torch.einsum("tkm,tkmd->tmd", torch.softmax(joint, 1), pulled)
        return (total.T.reshape(*lead, tasks),
                score.transpose(0, 1).reshape(*lead, tasks, d))

    def select(self, index: Tensor | slice) -> GMM:
        return GMM(self.log_w[index], self.mean[index], self.prec[index])

    def where(self, keep: Tensor, other: GMM) -> GMM:
        """Per (task, component): this mixture's component where ``keep [T, K]``, else
        ``other``'s (weights are taken from this mixture)."""
        return GMM(self.log_w, torch.where(keep[..., None], self.mean, other.mean),
                   torch.where(keep[..., None, None], self.prec, other.prec))

    def detach(self) -> GMM:
        return GMM(self.log_w.detach(), self.mean.detach(), self.prec.detach())
