"""Control variates as estimators of Gaussian expectations (:mod:`zoo.expectations`), for the class
probabilities of the latent-Gaussian classifiers: ``E[g(f)]``, ``f ~ N(m, diag v)``.

In whitened coordinates ``f = m + sqrt(v) z`` the target is ``N(0, I)`` with score ``-z``
whatever the marginals, so one design (draws ``z`` and their CV features or Stein Gram matrix)
serves every query and class. Both CVs here are linear in the integrand values, so each is a
weighted rule (weights summing to one, some negative): it plugs into every place that takes a
rule, fused integrands and md-bfsc's inner loop included, and because the weights are shared
across classes, estimated softmax probabilities sum to one exactly.

* ``poly-cv``: polynomial Stein CV (degree 1 or 2; degree 2 is exact for quadratics, ``1 + d +
  d^2`` coefficients, under-determined below that many samples and then ridge-regularised);
* ``control-functional``: Stein kernel of an RBF; ``lengthscale`` fixed, or (unset) by the Stein
  marginal likelihood summed over all integrands when the integrand is evaluated point-wise
  (``sqrt(d)`` for a fused integrand, which hides its values).

``estimate``: ``intercept`` (default) or ``split``, see :mod:`zoo.control_variates.fitting`.
The reported standard error is the regression's (intercept) or the held-out one (split).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from zoo.control_variates import linear
from zoo.control_variates.fitting import check_mode, fit_size
from zoo.errors import HyperParameterError
from zoo.expectations import Estimate, Estimator, FusedIntegrand, Integrand, Rule, standard_normal_draws
from zoo.kernels import RBFKernel
from zoo.stein_kernels import stein_kernel


@dataclass(frozen=True)
class _WhitenedCV(Estimator):
    samples: int = 256
    estimate: str = "intercept"
    draws: str = "mc"
    exact_rule: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_mode(self.estimate)
        if not isinstance(self.samples, int) or self.samples < 2:
            raise HyperParameterError(f"estimator {self.name!r}: samples must be an integer >= 2, "
                                      f"got {self.samples!r}")

    def draw(self, dim: int, seed: int) -> Tensor:
        return standard_normal_draws(self.samples, dim, method=self.draws, seed=seed)

    def weights(self, z: Tensor) -> Tensor:
        raise NotImplementedError

    def rule(self, dim: int, *, seed: int = 0, device: torch.device | str | None = None) -> Rule:
        z = self.draw(dim, seed)
        return Rule(z.to(device), self.weights(z).to(device))

    def fit(self, z: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Estimates and standard errors ``[K]`` of ``values [S, K]`` at draws ``z``."""
        raise NotImplementedError

    def expect(self, g: Integrand | FusedIntegrand, mean: Tensor, var: Tensor, *,
               seed: int = 0) -> Estimate:
        if isinstance(g, FusedIntegrand):
            return super().expect(g, mean, var, seed=seed)
        z = self.draw(mean.shape[-1], seed).to(mean.device)
        values = g(mean[..., None, :] + var.clamp_min(0).sqrt()[..., None, :] * z.to(mean.dtype))
        dim = mean.ndim - 1
        moved = values.movedim(dim, 0)
        flat = moved.reshape(len(z), -1).double()
        value, stderr = self.fit(z, flat)
        if self.exact_rule:  # the fit is the rule: take its weights, which sum to one exactly
            value = self.weights(z) @ flat
        shape = moved.shape[1:]
        return Estimate(value.reshape(shape).to(values.dtype),
                        stderr.reshape(shape).to(values.dtype))


@dataclass(frozen=True)
class PolynomialCVEstimator(_WhitenedCV):
    """Polynomial Stein CV on ``samples`` standard-normal draws (``degree`` 1 or 2)."""

    name: ClassVar[str] = "poly-cv"
    degree: int = 2
    ridge: float = linear.RIDGE

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.degree not in (1, 2):
            raise HyperParameterError(f"poly-cv: degree must be 1 or 2, got {self.degree!r}")

    def weights(self, z: Tensor) -> Tensor:
        return linear.polynomial_weights(linear.polynomial_features(z, -z, self.degree),
                                         self.estimate, self.ridge)

    def fit(self, z: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        e = linear.polynomial_cv(z, -z, values, degree=self.degree, mode=self.estimate,
                                 ridge=self.ridge)
        return e.value, e.stderr


@dataclass(frozen=True)
class ControlFunctionalEstimator(_WhitenedCV):
    """Control functional on ``samples`` standard-normal draws, RBF Stein kernel."""

    name: ClassVar[str] = "control-functional"
    exact_rule: ClassVar[bool] = False
    lengthscale: float | None = None
    nugget: float = linear.NUGGET

    def weights(self, z: Tensor) -> Tensor:
        ell = self.lengthscale or math.sqrt(z.shape[-1])
        kernel = RBFKernel(z.shape[-1], lengthscale=ell, learn_outputscale=False).double()
        m = fit_size(len(z), self.estimate)
        K0 = stein_kernel(kernel, z[:m], z[:m], -z[:m], -z[:m]).detach()
        if self.estimate == "intercept":
            return linear.kernel_weights(K0, nugget=self.nugget)
        cross = stein_kernel(kernel, z[m:], z[:m], -z[m:], -z[:m]).detach().mean(0)
        held = torch.full((len(z) - m,), 1 / (len(z) - m), dtype=z.dtype)
        return torch.cat([linear.kernel_weights(K0, cross, nugget=self.nugget), held])

    def fit(self, z: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        e = linear.control_functional(z, -z, values, mode=self.estimate,
                                      lengthscale=self.lengthscale, standardise=False,
                                      nugget=self.nugget)
        return e.value, e.stderr


BUILTIN: dict[str, type[Estimator]] = {
    cls.name: cls for cls in (PolynomialCVEstimator, ControlFunctionalEstimator)}
