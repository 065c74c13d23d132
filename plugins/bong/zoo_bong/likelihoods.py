"""Observation models of the network output ``f``, in the form the linearised curvatures need.

Each gives ``log p(y | f)``, its gradient in ``f`` (the residual ``T(y) - h(f)`` when ``f`` is the
natural parameter) and a root ``A`` of its Fisher matrix in ``f``, ``A A^T = -E[d^2 log p / df^2]``.
For the softmax this is the "logits form" of Jones et al. (2024, Prop. 4.2): with ``F = df/dtheta``
the linearised curvature is ``G = -F^T R F``, ``R = diag(p) - p p^T``, and
``A = diag(sqrt p) - p sqrt(p)^T`` is an exact root of ``R`` (``A A^T = R`` because ``sum p = 1``),
so no inverse of the singular ``R`` is ever formed.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch
from torch import Tensor


class Likelihood(ABC):
    """``p(y | f)`` for one observation, ``f [C]``."""

    @abstractmethod
    def log_prob(self, f: Tensor, y: Tensor) -> Tensor:
        """``log p(y | f)``, a scalar."""

    @abstractmethod
    def score(self, f: Tensor, y: Tensor) -> Tensor:
        """``d log p(y | f) / df``, ``[C]``."""

    @abstractmethod
    def fisher_root(self, f: Tensor) -> Tensor:
        """``A [C, C]`` with ``A A^T`` the Fisher matrix of ``p(y | f)`` in ``f``."""


class Categorical(Likelihood):
    """Softmax over logits ``f``; ``y`` a class index."""

    def log_prob(self, f: Tensor, y: Tensor) -> Tensor:
        return torch.log_softmax(f, -1)[..., y]

    def score(self, f: Tensor, y: Tensor) -> Tensor:
        p = torch.softmax(f, -1)
        return torch.nn.functional.one_hot(y, f.shape[-1]).to(f.dtype) - p

    def fisher_root(self, f: Tensor) -> Tensor:
        p = torch.softmax(f, -1)
        root_p = p.sqrt()
        return torch.diag(root_p) - p[:, None] * root_p[None, :]


class Gaussian(Likelihood):
    """``y ~ N(f, R)`` with a known noise covariance ``R [C, C]`` (regression streams, the
    linear-Gaussian tests); ``log_prob`` by the precision's Cholesky root ``L`` (``L L^T = R^-1``),
    ``-|L^T (y - f)|^2 / 2 - log det(2 pi R) / 2``, which ``torch.func`` maps over draws."""

    def __init__(self, noise: Tensor):
        self.noise = noise
        self.precision_root = torch.linalg.cholesky(torch.linalg.inv(noise))
        self._log_norm = -0.5 * torch.logdet(2 * math.pi * noise)

    def log_prob(self, f: Tensor, y: Tensor) -> Tensor:
        r = (y - f) @ self.precision_root.to(f)
        return self._log_norm.to(f) - 0.5 * r.square().sum(-1)

    def score(self, f: Tensor, y: Tensor) -> Tensor:
        root = self.precision_root.to(f)
        return root @ (root.T @ (y - f))

    def fisher_root(self, f: Tensor) -> Tensor:
        return self.precision_root.to(f)
