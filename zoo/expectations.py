"""Gaussian expectations ``E_{f ~ N(m, diag s^2)}[g(f)]``: the one step that turns Gaussian latent
marginals into class probabilities or expected log-likelihoods, as objects chosen by name.

An :class:`Estimator` supplies a :class:`Rule`, points ``z`` in standard-normal space with weights,
and estimates ``sum_s w_s g(m + s * z_s)``; gradients in ``m`` and ``s^2`` follow by autograd
through the reparameterisation. Built-ins (registered through ``zoo_register_estimators``, chosen
with the spec syntax, e.g. ``--set md-bfsc.estimator=sobol[samples=64]``):

* ``sobol``: scrambled Sobol points through the normal quantile, antithetic (the second half is
  the negation of the first), so odd functions of ``f - m`` integrate exactly and the error of
  smooth integrands falls nearly as ``1/S``;
* ``mc``: pseudo-random normal draws, with a standard error;
* ``gauss-hermite``: the tensor-product Gauss-Hermite rule, ``nodes`` points per dimension, exact
  for polynomials of degree up to ``2 nodes - 1`` in each coordinate. It has ``nodes^C`` points,
  so it suits few classes; an integrand that acts on each coordinate alone (OVE's pairwise
  differences) is passed as one-dimensional problems (a trailing axis of size one).

An integrand may evaluate a rule itself (:class:`FusedIntegrand`, e.g. the softmax moments with a
hand-written backward); an estimator that needs more than a rule (control variates) overrides
:meth:`Estimator.expect`, which sees the integrand and may return a standard error.
"""

from __future__ import annotations

import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from zoo.errors import HyperParameterError, UnknownNameError
from zoo.gp import DTYPE
from zoo.spec import parse_spec

MAX_POINTS = 2**20

Integrand = Callable[[Tensor], Tensor]
"""``g``: ``f [..., S, C] -> [..., S, *out]``, evaluated at all points of a rule at once."""


@dataclass(frozen=True)
class Rule:
    """``points`` ``[S, d]`` in standard-normal space and ``weights`` ``[S]`` summing to one
    (``None``: equal weights, averaged with ``mean``)."""

    points: Tensor
    weights: Tensor | None = None

    def to(self, dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> Rule:
        w = None if self.weights is None else self.weights.to(dtype=dtype, device=device)
        return Rule(self.points.to(dtype=dtype, device=device), w)

    def average(self, values: Tensor, dim: int) -> Tensor:
        """The weighted average of ``values`` over its rule axis ``dim`` (counted from the left)."""
        if self.weights is None:
            return values.mean(dim)
        w = self.weights.to(values.dtype).reshape(-1, *[1] * (values.ndim - dim - 1))
        return (values * w).sum(dim)

    def expect(self, g: Integrand | FusedIntegrand, mean: Tensor, var: Tensor) -> Tensor:
        """``E[g(f)]`` for ``f ~ N(mean, diag var)``, ``mean, var: [..., d]``."""
        if isinstance(g, FusedIntegrand):
            return g.under_rule(self, mean, var)
        points = self.points.to(mean.dtype)
        f = mean[..., None, :] + var.clamp_min(0).sqrt()[..., None, :] * points
        return self.average(g(f), mean.ndim - 1)


@runtime_checkable
class FusedIntegrand(Protocol):
    """An integrand that evaluates a rule itself (fused kernels, a hand-written backward)."""

    def under_rule(self, rule: Rule, mean: Tensor, var: Tensor) -> Tensor: ...


BLOCK_ELEMENTS = 2**17
"""Points x rule points x dimensions per block of :class:`PerPoint` (1 MB in float64)."""


@dataclass(frozen=True)
class PerPoint:
    """A link ``g`` that acts on each point's draws alone (a method's softmax or logistic-softmax
    link: ``[..., S, C] -> [..., S, *out]`` with no per-point data of its own), evaluated block by
    block of points: the same arithmetic per point as :meth:`Rule.expect` on all of them at once,
    but each ``[points, S, C]`` block stays in cache (one at 750 queries, 50 classes and 512 draws
    is 150 MB in float64, fresh pages on every call)."""

    g: Integrand

    def __call__(self, f: Tensor) -> Tensor:
        return self.g(f)

    def under_rule(self, rule: Rule, mean: Tensor, var: Tensor) -> Tensor:
        lead, dim = mean.shape[:-1], mean.shape[-1]
        mean, var = mean.reshape(-1, dim), var.reshape(-1, dim)
        step = max(1, BLOCK_ELEMENTS // (rule.points.shape[0] * dim))
        out = torch.cat([rule.expect(self.g, mean[i:i + step], var[i:i + step])
                         for i in range(0, mean.shape[0], step)])
        return out.reshape(*lead, *out.shape[1:])


@dataclass
class Estimate:
    """An estimate of ``E[g(f)]`` and, where the estimator has one, its standard error."""

    value: Tensor
    stderr: Tensor | None = None


class Estimator(ABC):
    """Estimates ``E_{N(mean, diag var)}[g(f)]`` over the last axis of ``mean`` and ``var``."""

    name: ClassVar[str]
    fits_integrand: ClassVar[bool] = False
    """A control variate: it fits a function of the integration variable, so its cost grows with
    the dimension and callers integrate in the smallest space (a last layer's class latents, not
    its weights)."""

    @abstractmethod
    def rule(self, dim: int, *, seed: int = 0, device: torch.device | str | None = None) -> Rule:
        """The points and weights for ``dim``-dimensional expectations, deterministic in ``seed``."""

    def expect(self, g: Integrand | FusedIntegrand, mean: Tensor, var: Tensor, *,
               seed: int = 0) -> Estimate:
        rule = self.rule(mean.shape[-1], seed=seed, device=mean.device)
        return Estimate(rule.expect(g, mean, var))

    def per_point(self, g: Integrand) -> Integrand | FusedIntegrand:
        """``g``, a link acting on each point's draws alone, as :meth:`expect` evaluates it
        best: block by block of points in cache (:class:`PerPoint`, the same numbers) for a plain
        rule; as it is for an estimator with its own ``expect`` (a control variate fits ``g``
        on all points at once, Monte Carlo reports a standard error over them)."""
        return PerPoint(g) if type(self).expect is Estimator.expect else g

    def make_state(self) -> torch.nn.Module | None:
        """What the estimator learns across calls (a meta-learned control variate), owned and
        checkpointed by the method that uses it; ``None`` for a stateless estimator."""
        return None

    def bind(self, state: torch.nn.Module | None) -> Estimator:
        """This estimator using ``state`` (from :meth:`make_state`)."""
        return self


def standard_normal_draws(n: int, dim: int, *, method: str = "sobol", seed: int = 0,
                          device: torch.device | str | None = None) -> Tensor:
    """``[n, dim]`` float64 standard normal draws, deterministic in ``seed``: antithetic scrambled
    Sobol points through the normal quantile (``sobol``) or pseudo-random draws (``mc``)."""
    if method == "mc":
        g = torch.Generator().manual_seed(seed)
        return torch.randn(n, dim, generator=g, dtype=DTYPE).to(device)
    if method != "sobol":
        raise ValueError(f"unknown draw method {method!r}; use 'sobol' or 'mc'")
    half = (n + 1) // 2
    u = torch.quasirandom.SobolEngine(dim, scramble=True, seed=seed).draw(half, dtype=DTYPE)
    z = torch.special.ndtri(u.clamp(1e-10, 1 - 1e-10))
    return torch.cat([z, -z])[:n].to(device)


def _positive(name: str, key: str, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise HyperParameterError(f"estimator {name!r}: {key} must be a positive integer, "
                                  f"got {value!r}")


@dataclass(frozen=True)
class _Sampled(Estimator):
    """``samples`` standard-normal draws of the kind ``draws`` names (see
    :func:`standard_normal_draws`), equally weighted."""

    draws: ClassVar[str]
    samples: int = 256

    def __post_init__(self) -> None:
        _positive(self.name, "samples", self.samples)

    def rule(self, dim: int, *, seed: int = 0, device: torch.device | str | None = None) -> Rule:
        return Rule(standard_normal_draws(self.samples, dim, method=self.draws, seed=seed,
                                          device=device))


@dataclass(frozen=True)
class SobolEstimator(_Sampled):
    """Antithetic scrambled Sobol points, ``samples`` of them."""

    name: ClassVar[str] = "sobol"
    draws: ClassVar[str] = "sobol"


@dataclass(frozen=True)
class MonteCarloEstimator(_Sampled):
    """Plain Monte Carlo with ``samples`` pseudo-random draws; reports the standard error."""

    name: ClassVar[str] = "mc"
    draws: ClassVar[str] = "mc"

    def expect(self, g: Integrand | FusedIntegrand, mean: Tensor, var: Tensor, *,
               seed: int = 0) -> Estimate:
        if isinstance(g, FusedIntegrand):
            return super().expect(g, mean, var, seed=seed)
        z = self.rule(mean.shape[-1], seed=seed, device=mean.device).points.to(mean.dtype)
        values = g(mean[..., None, :] + var.clamp_min(0).sqrt()[..., None, :] * z)
        dim = mean.ndim - 1
        return Estimate(values.mean(dim), values.std(dim) / math.sqrt(self.samples))


@dataclass(frozen=True)
class GaussHermiteEstimator(Estimator):
    """The tensor-product Gauss-Hermite rule (probabilists' weights), ``nodes`` per dimension."""

    name: ClassVar[str] = "gauss-hermite"
    nodes: int = 20

    def __post_init__(self) -> None:
        _positive(self.name, "nodes", self.nodes)

    def rule(self, dim: int, *, seed: int = 0, device: torch.device | str | None = None) -> Rule:
        if self.nodes**dim > MAX_POINTS:
            raise HyperParameterError(f"gauss-hermite with {self.nodes} nodes in {dim} dimensions "
                                      f"has {self.nodes}^{dim} points; use fewer nodes or 'sobol'")
        x, w = np.polynomial.hermite_e.hermegauss(self.nodes)
        x = torch.from_numpy(x).to(DTYPE)
        w = torch.from_numpy(w / np.sqrt(2 * np.pi)).to(DTYPE)
        if dim == 1:
            return Rule(x[:, None].to(device), w.to(device))
        points = torch.cartesian_prod(*[x] * dim)
        weights = torch.cartesian_prod(*[w] * dim).prod(-1)
        return Rule(points.to(device), weights.to(device))


BUILTIN: dict[str, type[Estimator]] = {
    cls.name: cls for cls in (SobolEstimator, MonteCarloEstimator, GaussHermiteEstimator)}


def build_estimator(spec: str, estimators: Mapping[str, type[Estimator]], **fallback: Any
                    ) -> Estimator:
    """The estimator a spec names (``"sobol[samples=64]"``), its class looked up in
    ``estimators`` (by name: a registry's ``items("estimators")``). ``fallback`` options (a
    method's sample count for the phase at hand) apply where the spec leaves them unset and the
    estimator takes them."""
    name, options = parse_spec(spec, "estimator")
    if name not in estimators:
        raise UnknownNameError("estimator", name, estimators)
    cls = estimators[name]
    # a field the method sets through bind() (a learned state) is not an option of the spec
    bound = {f.name for f in fields(cls) if f.metadata.get("bound")} if is_dataclass(cls) else set()
    accepted = set(inspect.signature(cls).parameters) - bound
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise HyperParameterError(f"estimator {name!r} has no option(s) {unknown}; its options: "
                                  f"{sorted(accepted)}")
    return cls(**{**{k: v for k, v in fallback.items() if k in accepted}, **options})
