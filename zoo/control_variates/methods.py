"""Control-variate methods of the integration task kind (:mod:`zoo.tasks.integration`), compared
with its Monte Carlo baseline on the same samples: ``poly-cv``, ``control-functional``,
``neural-cv``, ``vv-cv`` (using the problem's related integrals) and ``meta-cv`` (meta-trained by
the runner over training integrands).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from zoo.control_variates import linear, neural, vector_valued
from zoo.control_variates.fitting import MODES, CVEstimate, fit_size
from zoo.errors import EpisodeError
from zoo.hparams import HParam
from zoo.tasks.integration import IntegralEstimate, IntegrationEpisode, IntegrationProblem
from zoo.tasks.methods import IntegrationMethod


def _result(e: CVEstimate) -> IntegralEstimate:
    return IntegralEstimate(float(e.value.reshape(-1)[0]), float(e.stderr.reshape(-1)[0]))


def _boundary(problem: IntegrationProblem) -> bool:
    return problem.info.get("support") == "unit-cube"


def _inputs(problem: IntegrationProblem, fit: int) -> tuple[Tensor, Tensor, Tensor]:
    """``x``, score and ``f`` with a leading task axis, ``x`` standardised by the fitting samples
    (score ``scale * s``: a fixed affine change of variables) unless ``pi`` lives on the cube."""
    x, score = problem.x.double(), problem.score.double()
    if not _boundary(problem):
        centre, scale = linear.standardiser(x[:fit])
        x, score = (x - centre) / scale, score * scale
    return x[None], score[None], problem.fx.double()[None]


def _stacked(problems: Sequence[IntegrationProblem], mode: str) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`_inputs` of problems of one budget, stacked on the task axis."""
    if len({len(p.x) for p in problems}) != 1 or len({_boundary(p) for p in problems}) != 1:
        raise EpisodeError("a batched control variate estimates problems of one sample size "
                           "and one support together; estimate the others separately")
    fit = fit_size(len(problems[0].x), mode)
    x, score, fx = zip(*(_inputs(p, fit) for p in problems))
    return torch.cat(x), torch.cat(score), torch.cat(fx)


def _scaling(fx: Tensor, fit: int, on: bool) -> tuple[Tensor, Tensor]:
    """Each task's centre and scale ``[T, 1]`` of ``f [T, N]`` from its fitting samples (``on``;
    else 0 and 1): a neural CV fitted by fixed-size gradient steps is not equivariant to the
    scale of ``f``, so it is fitted to ``(f - centre) / scale`` and its estimate mapped back."""
    if not on:
        return fx.new_zeros(len(fx), 1), fx.new_ones(len(fx), 1)
    scale = fx[:, :fit].std(-1, keepdim=True)
    return fx[:, :fit].mean(-1, keepdim=True), torch.where(scale > 0, scale, 1.0)


def _results(e: CVEstimate, centre: Tensor, scale: Tensor) -> list[IntegralEstimate]:
    value, stderr = e.value * scale + centre, e.stderr * scale
    return [IntegralEstimate(float(v[0]), float(s[0])) for v, s in zip(value, stderr)]


def _neural_hparams() -> dict[str, HParam]:
    return {
        "field": HParam("ones", choices=neural.FIELDS,
                        doc="ones: the thesis's u 1_d, which removes only the variation of f along "
                            "the all-ones direction; vector: d potentials, div u + u . s (d times "
                            "the cost)"),
        "standardise": HParam(False, doc="fit to f standardised by each task's fitting samples "
                                         "(needed where f's scale is far from 1, e.g. Borehole)"),
    }


def _estimate_hparam(default: str) -> HParam:
    return HParam(default, choices=MODES, doc="split: fit on the first half, unbiased mean of f - g "
                  "on the second; intercept: the fitted intercept on all samples (biased, "
                  "consistent)")


class PolynomialCV(IntegrationMethod):
    """Polynomial Stein CV (degree 1: ``a . s``; degree 2: affine fields), least squares."""

    name = "poly-cv"
    hyperparameters: ClassVar[dict[str, Any]] = {
        "degree": HParam(2, choices=(1, 2), doc="polynomial degree of the potential"),
        "estimate": _estimate_hparam("intercept"),
        "ridge": HParam(linear.RIDGE, ge=0, doc="ridge on the standardised coefficients"),
    }

    def estimate(self, problem: IntegrationProblem) -> IntegralEstimate:
        h = self.hparams
        return _result(linear.polynomial_cv(problem.x.double(), problem.score.double(),
                                            problem.fx.double()[:, None], degree=h["degree"],
                                            mode=h["estimate"], ridge=h["ridge"]))


class ControlFunctional(IntegrationMethod):
    """Control functional: Stein kernel of an RBF, lengthscale and nugget by the Stein marginal
    likelihood on the fitting samples."""

    name = "control-functional"
    hyperparameters: ClassVar[dict[str, Any]] = {
        "estimate": _estimate_hparam("intercept"),
        "nugget": HParam(None, type=float, gt=0,
                         doc="relative nugget of the Stein Gram matrix; None: chosen with the "
                             "lengthscale by the Stein marginal likelihood from "
                             f"{linear.NUGGETS} (1e-8: the thesis's near-interpolation)"),
    }

    batched = True

    def estimate(self, problem: IntegrationProblem) -> IntegralEstimate:
        return self.estimate_batch([problem])[0]

    def estimate_batch(self, problems: Sequence[IntegrationProblem]) -> list[IntegralEstimate]:
        """Each problem's own control functional (its own lengthscale and nugget), the search
        batched over :data:`CHUNK` problems at a time; each estimate equals its fit alone."""
        h = self.hparams
        nugget = linear.NUGGETS if h["nugget"] is None else h["nugget"]
        x, score, fx = _stacked(problems, h["estimate"])  # standardised by the fitting samples
        out: list[IntegralEstimate] = []
        for i in range(0, len(problems), CHUNK):
            e = linear.control_functionals(
                x[i:i + CHUNK], score[i:i + CHUNK], fx[i:i + CHUNK, :, None], mode=h["estimate"],
                boundary=_boundary(problems[0]), standardise=False, nugget=nugget)
            out += [IntegralEstimate(float(v[0]), float(se[0])) for v, se in zip(e.value, e.stderr)]
        return out


CHUNK = 128
"""Problems whose control functionals are searched at once (the candidates' factors bound the
memory: nuggets x CHUNK x m^2)."""


class NeuralCV(IntegrationMethod):
    """A neural Stein CV fitted to each task alone (Wan et al. 2019; the thesis's baseline)."""

    name = "neural-cv"
    hyperparameters: ClassVar[dict[str, Any]] = {
        "lr": HParam(2e-3, gt=0, doc="Adam learning rate of the per-task fit"),
        "epochs": HParam(20, ge=1, doc="passes over the fitting samples"),
        "batch": HParam(5, ge=2, doc="mini-batch size"),
        "width": HParam(80, ge=1, doc="units in each of the two hidden layers"),
        "estimate": _estimate_hparam("split"),
        **_neural_hparams(),
    }
    batched = True

    def estimate(self, problem: IntegrationProblem) -> IntegralEstimate:
        return self.estimate_batch([problem])[0]

    def estimate_batch(self, problems: Sequence[IntegrationProblem]) -> list[IntegralEstimate]:
        """One batched Adam fit of every problem's own CV, each from its own seed (its
        initialisation and mini-batch order), so each estimate equals its fit alone."""
        h = self.hparams
        seeds = [int(p.info.get("seed", 0)) % 2**31 for p in problems]
        x, score, fx = _stacked(problems, h["estimate"])
        centre, scale = _scaling(fx, fit_size(fx.shape[-1], h["estimate"]), h["standardise"])
        return _results(neural.fit_neural_cv(
            x, score, (fx - centre) / scale, hidden=(h["width"], h["width"]),
            epochs=h["epochs"], batch=h["batch"], lr=h["lr"], mode=h["estimate"],
            boundary=_boundary(problems[0]), field=h["field"], seed=seeds), centre, scale)


class VectorValuedCV(IntegrationMethod):
    """vv-CV over the problem and its related integrals: separable ``B k`` with an RBF ``k``
    (standardised inputs, lengthscale by the Stein marginal likelihood with ``B = I`` summed over
    the integrals), the reduced closed form for a fixed ``B``; a learned ``B`` by the profiled fit
    (the default, chosen by the fitting objective on validation integrands: the thesis's joint
    Adam does not converge in 2,000 steps) or by that joint Adam, a cell's problems in one run."""

    name = "vv-cv"
    hyperparameters: ClassVar[dict[str, Any]] = {
        "coupling": HParam("fixed", choices=("fixed", "learned"),
                           doc="the task-coupling matrix B: fixed (diagonal 1, off-diagonal "
                               "`correlation`) or learned B = L L^T from the identity"),
        "correlation": HParam(0.1, ge=-1, le=1, doc="off-diagonal of the fixed B"),
        "lam": HParam(1e-5, gt=0, doc="regulariser, relative to the mean diagonal of k0"),
        "optimiser": HParam("profiled", choices=("profiled", "adam"),
                            doc="learned B: profiled (Adam on B, (alpha, beta) at their closed-"
                                "form optimum every step) or adam (the thesis's Algorithm 5: "
                                "joint full-batch Adam, slow to converge in alpha); both minimise "
                                "Eq. 4.8 + ||B||^2"),
        "steps": HParam(200, ge=1, doc="Adam steps when B is learned"),
        "lr": HParam(0.1, gt=0, doc="Adam learning rate when B is learned"),
    }

    batched = True

    def estimate(self, problem: IntegrationProblem) -> IntegralEstimate:
        return self.estimate_batch([problem])[0]

    def estimate_batch(self, problems: Sequence[IntegrationProblem]) -> list[IntegralEstimate]:
        """The closed form one problem at a time (fixed ``B``), or one Adam run for all problems
        (learned ``B``; each with its own Gram matrix and ``B``, the same fits as one by one)."""
        h = self.hparams
        grams = [self.gram(p) for p in problems]
        if h["coupling"] == "fixed":
            out = []
            for k0, task, fx, lam in grams:
                T = int(task.max()) + 1
                B = torch.full((T, T), h["correlation"], dtype=torch.float64).fill_diagonal_(1.0)
                fit = vector_valued.closed_form(k0, B, task, fx, lam)
                out.append(IntegralEstimate(float(fit.beta[0]), float(fit.stderr[0]), {"B": B.tolist()}))
            return out
        tasks = [g[1] for g in grams]
        if any(len(t) != len(tasks[0]) or not torch.equal(t, tasks[0]) for t in tasks):
            return [self.estimate_batch([p])[0] for p in problems]  # unequal sample counts
        task = tasks[0]
        T = int(task.max()) + 1
        k0, fx = torch.stack([g[0] for g in grams]), torch.stack([g[2] for g in grams])
        lam = torch.tensor([g[3] for g in grams], dtype=torch.float64)
        eye = torch.eye(T, dtype=torch.float64)
        if h["optimiser"] == "profiled":
            fit = vector_valued.fit_profiled(k0, task, fx, lam=lam, B=eye, steps=h["steps"],
                                             lr=h["lr"])
        else:
            fit = vector_valued.fit_stochastic(k0, task, fx, lam=lam, B=eye, learn_B=True,
                                               steps=h["steps"], lr=h["lr"])
        out = []
        for (k0, _, fx, lam), beta, B in zip(grams, fit.beta, fit.B):
            stderr = vector_valued.closed_form(k0, B, task, fx, lam).stderr  # at the learned B
            out.append(IntegralEstimate(float(beta[0]), float(stderr[0]), {"B": B.tolist()}))
        return out

    def gram(self, problem: IntegrationProblem) -> tuple[Tensor, Tensor, Tensor, float]:
        """The problem and its related integrals as one fit: the cross-Stein Gram matrix at the
        selected lengthscale, each point's integral, the values and the absolute regulariser."""
        problems = (problem, *problem.related)
        x = torch.cat([p.x.double() for p in problems])
        score = torch.cat([p.score.double() for p in problems])
        fx = torch.cat([p.fx.double() for p in problems])
        task = torch.cat([torch.full((len(p.x),), t, dtype=torch.long)
                          for t, p in enumerate(problems)])
        boundary = _boundary(problem)
        if boundary:
            z, s = x, score
        else:
            centre, scale = linear.standardiser(x)
            z, s = (x - centre) / scale, score * scale
        k0 = self.select_kernel(z, s, fx, task, boundary)
        return k0, task, fx, self.hparams["lam"] * float(k0.diagonal().mean())

    @staticmethod
    def select_kernel(z: Tensor, s: Tensor, fx: Tensor, task: Tensor, boundary: bool) -> Tensor:
        """The cross-Stein Gram matrix at the lengthscale of highest Stein marginal likelihood,
        summed over the integrals (``B = I``: each integral's own block)."""
        blocks = [(z[task == t], s[task == t], fx[task == t, None])
                  for t in range(int(task.max()) + 1)]
        kernel = linear.select_stein_kernel(blocks, boundary=boundary).kernel
        return vector_valued.base_gram(kernel, z, s)


class MetaControlVariate(IntegrationMethod):
    """Meta-learned neural CV (Sun 2023, Ch. 5): meta-trained over training integrands by the
    runner (``train_episodes``, ``meta_batch``), adapted to each test integrand by ``steps``
    inner steps (``inner_rule``) on its first half, the split estimate on its second half."""

    name = "meta-cv"
    hyperparameters: ClassVar[dict[str, Any]] = {
        "lr": HParam(2e-3, gt=0, doc="outer Adam learning rate (eta)"),
        "meta_batch": HParam(5, ge=1, doc="tasks per outer step (B)"),
        "steps": HParam(1, ge=0, doc="inner steps (L)"),
        "inner_lr": HParam(0.01, gt=0, doc="inner step size (alpha)"),
        "inner_rule": HParam("adam", choices=neural.INNER_RULES,
                             doc="inner update rule: adam (the thesis's, App. B.3) or sgd (plain "
                                 "gradient steps)"),
        "width": HParam(80, ge=1, doc="units in each of the two hidden layers"),
        "penalty": HParam(5e-6, ge=0, doc="penalty on the CV's outputs (lambda)"),
        "first_order": HParam(False, doc="first-order MAML (no second derivatives)"),
        **_neural_hparams(),
    }
    batched = True

    def __init__(self, *, dim: int, **hparams: Any):
        super().__init__(dim=dim, **hparams)
        h = self.hparams
        self.meta = neural.MetaCV(dim, hidden=(h["width"], h["width"]), steps=h["steps"],
                                  inner_lr=h["inner_lr"], penalty=h["penalty"],
                                  first_order=h["first_order"], field=h["field"],
                                  inner_rule=h["inner_rule"])

    meta_loss_name = "held-out squared residual after adaptation (thesis eq. 5.3)"

    def meta_loss(self, episode: IntegrationEpisode) -> Tensor:
        p = episode.problem
        self.meta.boundary = _boundary(p)  # the family's support, the same for all its tasks
        x, score, fx = _inputs(p, fit_size(len(p.x), "split"))
        centre, scale = _scaling(fx, fit_size(len(p.x), "split"), self.hparams["standardise"])
        return self.meta.meta_loss(x, score, (fx - centre) / scale)

    def estimate(self, problem: IntegrationProblem) -> IntegralEstimate:
        return self.estimate_batch([problem])[0]

    def estimate_batch(self, problems: Sequence[IntegrationProblem]) -> list[IntegralEstimate]:
        """Algorithm 7 for every problem in one batched adaptation."""
        self.meta.boundary = _boundary(problems[0])
        x, score, fx = _stacked(problems, "split")
        centre, scale = _scaling(fx, fit_size(fx.shape[-1], "split"), self.hparams["standardise"])
        return _results(self.meta.estimate(x, score, (fx - centre) / scale), centre, scale)


METHODS = [PolynomialCV, ControlFunctional, NeuralCV, VectorValuedCV, MetaControlVariate]
