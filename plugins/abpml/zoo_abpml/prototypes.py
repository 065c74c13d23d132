"""Gaussian class prototypes from diagonal-Gaussian embeddings (Sun et al., AISTATS 2021; Sun's
thesis, chapter 6, Eqs. 6.6-6.9).

Every image is an embedding ``N(mu(x), diag var(x))``. A class's variational posterior
``q(z_c | S_c) = N(mu_c, diag Sigma_c)`` aggregates its ``K`` support embeddings by the matrix
harmonic mean (Eq. 6.6)::

    mu_c = (sum_n Sigma_n^-1)^-1 sum_n Sigma_n^-1 mu_n,    Sigma_c = ((1/K) sum_n Sigma_n^-1)^-1

``Sigma_c`` is ``K`` times the product-of-Gaussians covariance, so it does not shrink as the shot
grows: this is the thesis's definition and is kept. ``aggregation="mean"`` (the thesis's ablation)
takes the arithmetic means of the means and of the variances instead.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

AGGREGATIONS = ("harmonic", "mean")


def aggregate(mu: Tensor, var: Tensor, labels: Tensor, way: int,
              aggregation: str = "harmonic") -> tuple[Tensor, Tensor]:
    """Class means and variances ``[way, p]`` from embeddings ``mu``, ``var`` ``[n, p]`` with
    ``labels`` in ``0..way-1`` (Eq. 6.6 for ``"harmonic"``)."""
    onehot = F.one_hot(labels, way).to(mu.dtype)  # [n, way]
    count = onehot.sum(0)[:, None]
    if aggregation == "harmonic":
        precision = onehot.T @ var.reciprocal()
        return (onehot.T @ (mu / var)) / precision, count / precision
    if aggregation == "mean":
        return (onehot.T @ mu) / count, (onehot.T @ var) / count
    raise ValueError(f"aggregation {aggregation!r} is not one of {AGGREGATIONS}")


def log_density(x: Tensor, mean: Tensor, var: Tensor) -> Tensor:
    """``log N(x_i; mean_c, diag var_c)``, ``[n, C]`` for ``x`` ``[n, p]`` and ``mean``, ``var``
    ``[C, p]``: the class scores of Eq. 6.8."""
    diff = x[:, None, :] - mean[None]
    return -0.5 * (diff.pow(2) / var + var.log() + math.log(2 * math.pi)).sum(-1)


def kl_diagonal(mean_q: Tensor, var_q: Tensor, mean_p: Tensor, var_p: Tensor) -> Tensor:
    """``KL[N(mean_q, diag var_q) || N(mean_p, diag var_p)]``, summed over the last dimension."""
    return 0.5 * ((var_q + (mean_q - mean_p).pow(2)) / var_p + var_p.log() - var_q.log()
                  - 1).sum(-1)


def task_prior_kl(mu: Tensor, var: Tensor, labels: Tensor, class_mean: Tensor, class_var: Tensor
                  ) -> Tensor:
    """The KL to the task-dependent prior estimated from the support embeddings alone (Eq. 6.7).

    With several shots, the mean over support points ``n`` of
    ``KL[q(z_{c(n)}) || N(mu_n, Sigma_n)]``; with one shot, where that KL is zero, the prior is the
    harmonic mean of all the support embeddings (the union prior) and the estimate the mean over
    classes of ``KL[q(z_c) || N(mu_union, Sigma_union)]``. Queries never enter: that would leak
    their labels.
    """
    if bool((torch.bincount(labels) <= 1).all()):
        union_mean, union_var = aggregate(mu, var, torch.zeros_like(labels), 1)
        return kl_diagonal(class_mean, class_var, union_mean, union_var).mean()
    return kl_diagonal(class_mean[labels], class_var[labels], mu, var).mean()
