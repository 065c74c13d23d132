"""Control variates as estimators of Gaussian expectations (:mod:`zoo.expectations`), for the class
probabilities of the latent-Gaussian classifiers: ``E[g(f)]``, ``f ~ N(m, diag v)``.

In whitened coordinates ``f = m + sqrt(v) z`` the target is ``N(0, I)`` with score ``-z``
whatever the marginals, so one design (draws ``z`` and their CV features or Stein Gram matrix)
serves every query and class, and the estimated class probabilities sum to one exactly:

* ``poly-cv``, ``control-functional``: linear in the integrand values, so each is a weighted rule
  (weights summing to one, some negative) that plugs into every place taking a rule, fused
  integrands and md-bfsc's inner loop included; shared weights keep the sum. ``poly-cv``: degree
  1 or 2 (degree 2 is exact for quadratics, ``1 + d + d^2`` coefficients, ridge-regularised when
  under-determined); ``control-functional``: the Stein kernel of an RBF, ``lengthscale`` fixed
  or (unset) by the Stein marginal likelihood summed over all integrands (``sqrt(d)`` for a fused
  integrand that cannot be evaluated point-wise).
* ``neural-cv``, ``vv-cv``, ``meta-cv`` (:class:`_FittedCV`): fitted to the values, not rules.
  The neural CVs give each integral's ``K`` integrands ``K`` potentials, centred so that their
  Stein values sum to zero when the integrands sum to a constant; ``vv-cv`` couples the queries
  (its related tasks) by one linear map ``A`` with ``A H = I`` shared by the classes; ``meta-cv``
  is meta-trained on the integrals the classifier evaluates during its own meta-training.

``estimate``: ``intercept`` (default of ``poly-cv``, ``control-functional``, ``vv-cv``) or
``split`` (default of ``neural-cv``, ``meta-cv``), see :mod:`zoo.control_variates.fitting`. Each
reports its standard error: the regression's (intercept), the held-out one (split), the GLS one
(``vv-cv``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from typing import ClassVar

import torch
from torch import Tensor, nn

from zoo.control_variates import linear, neural, vector_valued
from zoo.control_variates.fitting import CVEstimate, check_mode, fit_size
from zoo.errors import HyperParameterError
from zoo.expectations import Estimate, Estimator, FusedIntegrand, Integrand, Rule, standard_normal_draws
from zoo.kernels import Kernel, RBFKernel
from zoo.stein_kernels import stein_kernel


def _check_samples(estimator: Estimator, minimum: int) -> None:
    """A control variate fits on its draws: it needs at least ``minimum`` of them."""
    samples = estimator.samples
    if not isinstance(samples, int) or samples < minimum:
        raise HyperParameterError(f"estimator {estimator.name!r}: samples must be an integer >= "
                                  f"{minimum}, got {samples!r}")


@dataclass(frozen=True)
class _WhitenedCV(Estimator):
    samples: int = 256
    estimate: str = "intercept"
    draws: str = "mc"
    exact_rule: ClassVar[bool] = True
    fits_integrand: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_mode(self.estimate)
        _check_samples(self, 2)

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
        if isinstance(g, FusedIntegrand) and not callable(g):  # its values are hidden: no error
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


TASK_CHUNK = 1024
"""Tasks fitted at once by the fitted CVs (their per-task parameters bound the memory)."""


def _pointwise(g: Integrand | FusedIntegrand) -> Integrand:
    if isinstance(g, FusedIntegrand) and not callable(g):
        raise HyperParameterError(f"{type(g).__name__} is evaluated only under a rule; a fitted "
                                  "control variate needs its values at points: give it __call__")
    return g  # a fused integrand that is also callable (SoftmaxMean) is evaluated point-wise


def _sums_to_constant(values: Tensor) -> bool:
    """Whether the ``K > 1`` integrands ``[T, S, K]`` sum to the same value at every draw (class
    probabilities), to rounding."""
    if values.shape[-1] < 2:
        return False
    total = values.sum(-1)
    return bool((total - total[..., :1]).abs().max() <= 1e-5 * (1 + total.abs().max()))


@dataclass(frozen=True)
class _FittedCV(Estimator):
    """Base of the CVs fitted to the integrand's values by a non-linear fit, or coupling several
    integrals: not a fixed rule. The integrals are ``T`` tasks (every leading entry of ``mean``,
    e.g. each query) of ``K`` integrands each (the integrand's outputs, e.g. the classes), fitted
    together in whitened coordinates; the fit sees the values detached, and the estimate is
    differentiable in ``mean`` and ``var`` through them. When the ``K`` integrands sum to the same
    value at every draw (probabilities), one design serves all ``K`` so that the estimates keep that
    sum exactly. Where a caller needs a fixed rule (md-bfsc's inner loop), :meth:`rule` is the
    plain draws with equal weights: Monte Carlo on the same draws."""

    samples: int = 64
    estimate: str = "split"
    draws: str = "mc"
    fits_integrand: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_mode(self.estimate)
        _check_samples(self, 4)

    def rule(self, dim: int, *, seed: int = 0, device: torch.device | str | None = None) -> Rule:
        return Rule(standard_normal_draws(self.samples, dim, method=self.draws, seed=seed,
                                          device=device))

    def task_draws(self, dim: int, tasks: int, seed: int) -> Tensor:
        """``[T, S, d]`` whitened draws: the same for every task unless a subclass says otherwise."""
        return self.rule(dim, seed=seed).points.expand(tasks, self.samples, dim)

    def fit(self, z: Tensor, values: Tensor, centre: bool) -> CVEstimate:
        """Estimates and standard errors ``[T, K]`` from draws ``z [T, S, d]`` (score ``-z``) and
        values ``[T, S, K]``."""
        raise NotImplementedError

    def expect(self, g: Integrand | FusedIntegrand, mean: Tensor, var: Tensor, *,
               seed: int = 0) -> Estimate:
        g = _pointwise(g)
        dim, batch = mean.shape[-1], mean.shape[:-1]
        m, sd = mean.reshape(-1, dim), var.clamp_min(0).sqrt().reshape(-1, dim)
        z = self.task_draws(dim, len(m), seed).to(device=mean.device, dtype=torch.float64)
        values = g(m[:, None, :] + sd[:, None, :] * z.to(mean.dtype))  # [T, S, *out]
        out = values.shape[2:]
        v = values.reshape(len(m), self.samples, -1).double()
        centre = _sums_to_constant(v.detach())
        parts = [self.fit(z[i:i + TASK_CHUNK], v[i:i + TASK_CHUNK], centre)
                 for i in range(0, len(m), TASK_CHUNK)]
        value, stderr = torch.cat([e.value for e in parts]), torch.cat([e.stderr for e in parts])
        return Estimate(value.reshape(*batch, *out).to(values.dtype),
                        stderr.reshape(*batch, *out).to(values.dtype))


def _check_field(spec: NeuralCVEstimator | MetaCVEstimator) -> None:
    if spec.field not in neural.FIELDS:
        raise HyperParameterError(f"estimator {spec.name!r}: field={spec.field!r}; use one of "
                                  f"{neural.FIELDS} (ones: the thesis's u 1_d, which cannot remove "
                                  "variation across the all-ones direction, e.g. of a softmax "
                                  "whose classes have equal variances; vector: d potentials)")


@dataclass(frozen=True)
class NeuralCVEstimator(_FittedCV):
    """A neural Stein CV fitted to each task alone (:func:`zoo.control_variates.neural.
    neural_cv_params`: ``epochs`` passes of Adam in mini-batches of ``batch``), one potential per
    integrand from a shared ``width x width`` sigmoid MLP, batched over the tasks."""

    name: ClassVar[str] = "neural-cv"
    width: int = 32
    epochs: int = 20
    batch: int = 5
    lr: float = 2e-3
    penalty: float = 5e-6
    field: str = "ones"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_field(self)

    def fit(self, z: Tensor, values: Tensor, centre: bool) -> CVEstimate:
        theta = neural.neural_cv_params(z, -z, values.detach(), hidden=(self.width, self.width),
                                        epochs=self.epochs, batch=self.batch, lr=self.lr,
                                        penalty=self.penalty, mode=self.estimate, centre=centre,
                                        field=self.field)
        return neural.estimate_with(theta, z, -z, values, False, self.estimate, centre,
                                    self.field)


@dataclass(frozen=True)
class VectorValuedCVEstimator(_FittedCV):
    """vv-CV (Sun 2023, Ch. 4) whose related integrals are the tasks (queries): each task has its
    own draws of the shared whitened ``N(0, I)``, and groups of ``tasks`` of them are fitted by the
    reduced closed form with ``B = (1 - correlation) I + correlation 11^T``, so each task's
    integrands borrow strength from the others' samples. (The ``K`` class integrals of one query are
    not the tasks: on shared draws a separable ``B k0`` with a shared design fits each output as
    if alone, and on separate draws their estimates would no longer sum to one.) The RBF
    lengthscale maximises the Stein marginal likelihood of every task's own block, summed over
    tasks and integrands, unless ``lengthscale`` is set; the intercept (default) is the GLS estimate
    with its GLS standard error."""

    name: ClassVar[str] = "vv-cv"
    estimate: str = "intercept"
    tasks: int = 8
    correlation: float = 0.5
    lam: float = 1e-6
    lengthscale: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.estimate != "intercept":
            raise HyperParameterError("vv-cv: only estimate=intercept (the closed form's GLS "
                                      "intercept, as the thesis's vv-CV experiments)")
        if not 0 <= self.correlation < 1 or not isinstance(self.tasks, int) or self.tasks < 1:
            raise HyperParameterError(f"vv-cv: correlation in [0, 1) (B positive definite for any "
                                      f"number of tasks) and tasks >= 1, got "
                                      f"{self.correlation!r}, {self.tasks!r}")

    def task_draws(self, dim: int, tasks: int, seed: int) -> Tensor:
        return torch.stack([standard_normal_draws(self.samples, dim, method=self.draws,
                                                  seed=seed + t) for t in range(tasks)])

    def kernel(self, z: Tensor, values: Tensor) -> Kernel:
        return linear.select_stein_kernel([(z, -z, values.detach())],
                                          lengthscale=self.lengthscale).kernel

    def fit(self, z: Tensor, values: Tensor, centre: bool) -> CVEstimate:
        kernel = self.kernel(z, values)
        value, stderr = [], []
        for start in range(0, len(z), self.tasks):
            zg, vg = z[start:start + self.tasks], values[start:start + self.tasks]
            T, S = zg.shape[:2]
            x = zg.reshape(T * S, -1)
            task = torch.arange(T, device=z.device).repeat_interleave(S)
            k0 = vector_valued.base_gram(kernel, x, -x)
            B = torch.full((T, T), self.correlation, dtype=z.dtype,
                           device=z.device).fill_diagonal_(1.0)
            lam = self.lam * float(k0.diagonal().mean())
            fit = vector_valued.closed_form(k0, B, task, vg.reshape(T * S, -1), lam)
            value.append(fit.beta)
            stderr.append(fit.stderr)
        return CVEstimate(torch.cat(value), torch.cat(stderr))


class MetaCVState(nn.Module):
    """What a classifier's ``meta-cv`` estimator learns during the classifier's meta-training:
    the meta-parameters (built at the first integral), a ring buffer of the newest ``harvest``
    integrals (whitened draws and integrand values at them) and the Adam optimiser of the outer
    loop. A submodule of the method, so the meta-parameters are checkpointed with it; they get no
    gradient from the classifier's loss (the estimate uses them detached)."""

    def __init__(self, spec: MetaCVEstimator):
        super().__init__()
        self.spec = spec
        self.register_buffer("centred", torch.zeros((), dtype=torch.bool))
        self.meta: neural.MetaCV | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.z: Tensor | None = None
        self.values: Tensor | None = None
        self.harvested = 0

    def build(self, dim: int, outputs: int, centre: bool) -> neural.MetaCV:
        s = self.spec
        if self.meta is None:
            self.meta = neural.MetaCV(dim, hidden=(s.width, s.width), outputs=outputs,
                                      steps=s.steps, inner_lr=s.inner_lr, penalty=s.penalty,
                                      first_order=s.first_order, centre=centre, field=s.field,
                                      inner_rule=s.inner_rule)
            self.optimizer = torch.optim.Adam(self.meta.parameters(), lr=s.lr)
            self.centred.fill_(centre)
        first, last = self.meta.params[0], self.meta.params[-1]
        if (first.shape[0], last.shape[0]) != (dim, neural.field_outputs(outputs, dim, s.field)):
            raise HyperParameterError(f"meta-cv was meta-trained on {first.shape[0]}-dimensional "
                                      f"integrals ({last.shape[0]} potentials); this one has "
                                      f"{dim} dimensions and {outputs} integrands (another way?)")
        return self.meta

    def step(self, z: Tensor, values: Tensor, centre: bool) -> None:
        """Harvest ``T`` integrals ``z [T, S, d]``, ``values [T, S, K]`` and take ``meta_steps``
        outer steps, each on ``meta_batch`` of the kept ones (Sun 2023, Algorithm 6)."""
        meta = self.build(z.shape[-1], values.shape[-1], centre)
        z, values = z.detach().cpu(), values.detach().cpu()
        self.harvested += len(z)
        if self.z is not None and self.z.shape[1:] == z.shape[1:]:
            z, values = torch.cat([self.z, z]), torch.cat([self.values, values])
        self.z, self.values = z[-self.spec.harvest:], values[-self.spec.harvest:]
        g = torch.Generator().manual_seed(self.harvested)
        device = meta.params[0].device
        params = list(meta.parameters())
        assert self.optimizer is not None
        for _ in range(self.spec.meta_steps):
            idx = torch.randint(len(self.z), (self.spec.meta_batch,), generator=g)
            zb, vb = self.z[idx].to(device), self.values[idx].to(device)
            with torch.enable_grad():
                grads = torch.autograd.grad(meta.meta_loss(zb, -zb, vb), params)
            for p, grad in zip(params, grads):
                p.grad = grad
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)  # the classifier's optimiser must skip them

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[override]
        """Builds the meta-parameters from a checkpoint's shapes before loading them."""
        first, n = prefix + "meta.params.0", len([k for k in state_dict
                                                   if k.startswith(prefix + "meta.params.")])
        if self.meta is None and first in state_dict:
            last, dim = state_dict[f"{prefix}meta.params.{n - 1}"], state_dict[first].shape[0]
            self.build(dim, last.shape[0] // (dim if self.spec.field == "vector" else 1),
                       bool(state_dict.get(prefix + "centred", False)))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


@dataclass(frozen=True)
class MetaCVEstimator(_FittedCV):
    """The meta-learned CV for tiny budgets (Sun 2023, Ch. 5) inside a classifier: while the
    classifier meta-trains, every integral it evaluates through this estimator is harvested
    (whitened draws and integrand values) and the meta-CV takes ``meta_steps`` outer steps, each on
    ``meta_batch`` harvested integrals (its own Adam, rate ``lr``); at test each integral adapts
    the meta-CV by ``steps`` inner steps (``inner_rule``: Adam, the thesis's, or sgd) on its
    fitting half and estimates on the other (``split``). The classifier owns the learned
    :class:`MetaCVState` (``state``, set by the method)."""

    name: ClassVar[str] = "meta-cv"
    steps: int = 1
    inner_lr: float = 0.01
    width: int = 32
    lr: float = 2e-3
    penalty: float = 5e-6
    meta_batch: int = 16
    meta_steps: int = 1
    harvest: int = 4096
    first_order: bool = False
    field: str = "ones"
    inner_rule: str = "adam"
    state: MetaCVState | None = dataclass_field(default=None, compare=False, repr=False,
                                                metadata={"bound": True})

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_field(self)
        if self.inner_rule not in neural.INNER_RULES:
            raise HyperParameterError(f"estimator 'meta-cv': inner_rule={self.inner_rule!r}; use "
                                      f"one of {neural.INNER_RULES}")

    def make_state(self) -> MetaCVState:
        return MetaCVState(self)

    def bind(self, state: nn.Module | None) -> Estimator:
        return replace(self, state=state)

    def fit(self, z: Tensor, values: Tensor, centre: bool) -> CVEstimate:
        state = self.state
        if state is None:
            raise HyperParameterError("meta-cv learns across a classifier's meta-training; it "
                                      "needs the MetaCVState the method binds (estimator hparam "
                                      "of a latent-Gaussian method)")
        if state.training and torch.is_grad_enabled():
            state.step(z, values, centre)
        if state.meta is None:
            raise HyperParameterError("meta-cv harvested no integrals: the classifier's meta-"
                                      "training evaluated none through its estimator (md-bfsc: "
                                      "loss=predictive); choose another estimator")
        meta = state.build(z.shape[-1], values.shape[-1], centre)
        m = fit_size(z.shape[1], self.estimate)
        theta = meta.adapt(z[:, :m], -z[:, :m], values.detach()[:, :m])
        return neural.estimate_with(theta, z, -z, values, False, self.estimate, meta.centre,
                                    meta.field)


BUILTIN: dict[str, type[Estimator]] = {
    cls.name: cls for cls in (PolynomialCVEstimator, ControlFunctionalEstimator,
                              NeuralCVEstimator, VectorValuedCVEstimator, MetaCVEstimator)}
