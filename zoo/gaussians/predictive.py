"""Predictive distributions under a Gaussian belief ``q(theta)`` over a model's parameters
(BONG, Jones, Chang & Murphy 2024, Sec. 5 and footnote 2; the last-layer notes, Sec. 2):

* plug-in: ``p(y | x, mean)``;
* Monte Carlo: ``(1/S) sum_s p(y | x, theta_s)``, ``theta_s ~ q``, probabilities averaged;
* linearised Monte Carlo: the same average with the model replaced by its first-order expansion
  at the mean, ``f(mean) + J (theta_s - mean)`` (the GLM predictive, Immer et al. 2021), each
  ``J delta`` a forward-mode Jacobian-vector product (``torch.func.jvp``), ``J`` never formed.

``fn`` maps one parameter vector ``[P]`` to outputs (probabilities for :func:`monte_carlo`, the
link's argument, e.g. logits, for :func:`linearised`); samples are mapped with ``torch.func.vmap``.
``draws`` are standard-normal noise ``[S, noise_dim]`` (seeded by the caller, e.g. from
:func:`zoo.expectations.standard_normal_draws`) or a sample count with an optional generator.
Draws are mapped ``DRAW_CHUNK`` at a time: a CNN on 1,000 MNIST images under 100 draws at once
would hold 100 copies of every activation (over 20 GB), and the result does not depend on it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.func import jvp, vmap

from zoo.gaussians.base import Gaussian

DRAW_CHUNK = 8


def _samples(q: Gaussian, draws: int | Tensor, generator: torch.Generator | None) -> Tensor:
    if isinstance(draws, int):
        return q.sample(draws, generator=generator)
    return q.transform(draws.to(q.mean))


def plugin(fn: Callable[[Tensor], Tensor], q: Gaussian) -> Tensor:
    """``fn(mean)``."""
    return fn(q.mean)


def monte_carlo(fn: Callable[[Tensor], Tensor], q: Gaussian, draws: int | Tensor, *,
                generator: torch.Generator | None = None) -> Tensor:
    """``(1/S) sum_s fn(theta_s)``, ``theta_s ~ q`` (reparameterised)."""
    return vmap(fn, chunk_size=DRAW_CHUNK)(_samples(q, draws, generator)).mean(0)


def linearised(fn: Callable[[Tensor], Tensor], q: Gaussian, draws: int | Tensor, *,
               link: Callable[[Tensor], Tensor] = lambda f: torch.softmax(f, -1),
               generator: torch.Generator | None = None) -> Tensor:
    """``(1/S) sum_s link(fn(mean) + J (theta_s - mean))`` with ``J = d fn / d theta`` at the mean."""
    deltas = _samples(q, draws, generator) - q.mean
    f0 = fn(q.mean)
    tangents = vmap(lambda d: jvp(fn, (q.mean,), (d,))[1], chunk_size=DRAW_CHUNK)(deltas)
    return link(f0 + tangents).mean(0)
