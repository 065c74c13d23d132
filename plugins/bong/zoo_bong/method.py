"""``bong``: a Gaussian belief over a network's weights, updated once per observation of a stream.

One method, every tractable cell of Jones et al. (2024)'s table as hyper-parameters: ``rule``
(bong, bog, blr, bbb), ``curvature`` (mc-hess, mc-ef, lin-hess, lin-ef), ``family`` (fc, fc-mom,
dg with ``dg_mean`` ngd or vd-ekf, dg-mom, dlr with ``rank``), dynamics ``gamma``, ``q``; e.g.
``--set bong.rule=blr --set bong.curvature=lin-ef``. The prior is ``N(theta_0, prior_var I)``
around the network's seeded initial weights; the predictive is the plug-in ``p(y | x, mu)``, Monte
Carlo over ``theta ~ q`` or linearised Monte Carlo (``f(x, mu) + F (theta - mu)``, footnote 2),
averaging probabilities.

On a regression stream (real-valued targets) the likelihood is Gaussian, ``y ~ N(f(x, theta),
noise_var)`` with one network output, and the predictive is Gaussian: the plug-in
``N(f(x, mu), noise_var)``, or for ``mc`` and ``lin-mc`` the moments of the draws' outputs plus the
noise, ``N(mean_s f_s, var_s f_s + noise_var)`` (for lin-mc with a linear network exactly the
belief's predictive up to Monte Carlo error).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from zoo import HParam, HyperParameterError, draw_seed
from zoo.gaussians import predictive
from zoo.tasks import Stream, StreamMethod
from zoo_bong.beliefs import DG_MEANS, FAMILIES, FIXED_SHAPE, Belief, prior_belief
from zoo_bong.curvature import (
    COMPILABLE,
    CURVATURES,
    Curvature,
    compile_own,
    compiled,
    linearised,
    monte_carlo,
    traceable,
)
from zoo_bong.likelihoods import Categorical, Gaussian
from zoo_bong.networks import NETWORKS, build_network, flat_function, is_linear_stack
from zoo_bong.rules import RULES, check_combination, update

PREDICTIVES = ("plugin", "mc", "lin-mc")
#: The ``torch.compile`` backend of ``compile = true`` (tests trace with ``aot_eager``, which
#: builds the same graph without inductor's code generation).
BACKEND = "inductor"
UPDATE_SALT, PREDICT_SALT = 1, 2


@dataclass
class BongState:
    """The belief after ``seen`` observations and the generator of the updates' draws."""

    belief: Belief
    generator: torch.Generator
    predictive_seed: int
    seen: int = 0


def traced_update(model: Callable[[Tensor, Tensor], Tensor], likelihood: Categorical | Gaussian,
                  like: Belief, curvature: str, rule: str, alpha: float, iterations: int
                  ) -> Callable[..., tuple[tuple[Tensor, ...], Tensor]]:
    """What :meth:`Bong._compiled_update` compiles: ``(parts, noises, x, y) -> (parts, valid)``,
    the rule's update of the belief of ``like``'s family held by ``parts`` (see
    :meth:`~zoo_bong.beliefs.Belief.parts`) with the ``i``-th estimate's draws ``noises[i]``
    (none for the LIN curvatures), and :meth:`~zoo_bong.beliefs.Belief.valid` of the result.
    The program takes tensors only, so that its guards check only their shapes."""
    estimator = traceable(model, likelihood, curvature)

    def run(parts: tuple[Tensor, ...], noises: list[Tensor], x: Tensor, y: Tensor
            ) -> tuple[tuple[Tensor, ...], Tensor]:
        predicted = like.with_parts(parts)
        draws = iter(noises)

        def estimate(q: Belief) -> Curvature:
            at = q.mu if not noises else q.gaussian.transform(next(draws))
            return estimator(at, x, y)

        belief = update(predicted, estimate, rule, alpha, iterations)
        return belief.parts(), belief.valid()

    return run


class Bong(StreamMethod):
    """The BONG family over the network ``network`` on a stream of labelled examples."""

    name = "bong"
    hyperparameters: ClassVar[dict[str, HParam]] = {
        "rule": HParam("bong", choices=RULES, doc="bong (NGD, 1 step, no KL), bog (GD, 1 step), "
                       "blr (NGD of the VI loss), bbb (GD of the VI loss)"),
        "curvature": HParam("lin-hess", choices=CURVATURES,
                            doc="estimator of E[hess log p]: Hutchinson MC diagonal, MC empirical "
                            "Fisher, generalised Gauss-Newton at the mean, linearised EF"),
        "family": HParam("dlr", choices=FAMILIES, doc="full / diagonal Gaussian in natural or "
                         "moment parameters, or diagonal plus low-rank precision"),
        "rank": HParam(10, ge=1, doc="rank L of the dlr family's precision"),
        "dg_mean": HParam("ngd", choices=DG_MEANS, doc="mean of the dg family's natural step: "
                          "pure diagonal natural gradient, or VD-EKF's (the full-covariance step's "
                          "mean from the diagonal belief, Chang et al. 2022)"),
        "alpha": HParam(0.1, gt=0, doc="learning rate of bog, blr, bbb (bong's is 1)"),
        "iterations": HParam(1, ge=1, doc="steps per observation of blr and bbb"),
        "samples": HParam(100, ge=1, doc="draws M of the mc-ef and mc-hess curvatures"),
        "prior_var": HParam(0.03, gt=0, doc="prior variance around the initial weights"),
        "gamma": HParam(1.0, gt=0, doc="dynamics theta_t = gamma theta_{t-1} + N(0, q I)"),
        "q": HParam(0.0, ge=0, doc="dynamics noise variance per step"),
        "network": HParam("cnn", choices=NETWORKS, doc="the paper's CNN, a one-hidden-layer "
                          "MLP or multinomial logistic regression"),
        "hidden": HParam(64, ge=1, doc="hidden units of the mlp network"),
        "predictive": HParam("plugin", choices=PREDICTIVES,
                             doc="plug-in at the mean, Monte Carlo, or linearised Monte Carlo"),
        "predictive_samples": HParam(32, ge=1, doc="draws of the mc and lin-mc predictives"),
        "compile": HParam(False, doc="torch.compile the update (mc-ef, lin-hess, lin-ef) into "
                          "one program per method, compiled on the first update (seconds): for "
                          "dg, dg-mom and dlr the whole update, for fc and fc-mom the curvature "
                          "estimator; the same numbers to rounding"),
        "noise_var": HParam(1.0, gt=0, doc="observation noise variance of the Gaussian "
                            "likelihood on a regression stream (unused on class streams)"),
    }
    regression = True

    def __init__(self, *, dim: int, classes: int, **hparams: Any):
        super().__init__(dim=dim, classes=classes, **hparams)
        h = self.hparams
        try:
            check_combination(h["rule"], h["curvature"], h["family"], h["iterations"])
            if h["compile"] and h["curvature"] not in COMPILABLE:
                raise ValueError(f"compile = true applies to the curvatures "
                                 f"{', '.join(COMPILABLE)}, not {h['curvature']!r}")
            if h["dg_mean"] != "ngd" and h["family"] != "dg":
                raise ValueError(f"dg_mean = {h['dg_mean']!r} applies only to family 'dg' (not "
                                 f"{h['family']!r}); leave it at 'ngd'")
        except ValueError as err:
            raise HyperParameterError(f"method 'bong': {err}") from None
        try:
            self.network = build_network(h["network"], dim, max(classes, 1), h["hidden"])
        except ValueError as err:
            raise HyperParameterError(f"method 'bong': {err}") from None
        theta, self._f = flat_function(self.network)
        self._batched = is_linear_stack(self.network)  # f_one maps [K, P] too
        self._compiled: Callable[[Tensor, Tensor, Tensor], Curvature] | None = None
        self._program: Callable[..., tuple[tuple[Tensor, ...], Tensor]] | None = None
        self.register_buffer("theta0", theta)
        self.likelihood = (Gaussian(torch.full((1, 1), float(h["noise_var"]), dtype=theta.dtype))
                           if classes == 0 else Categorical())

    def f_one(self, theta: Tensor, x: Tensor) -> Tensor:
        """Logits ``[C]`` (regression: the mean ``[1]``) of one example ``x [dim]``; for a batch
        ``theta [K, P]`` of a linear stack (``mlp``, ``linear``), ``[K, C]``."""
        return self._f(theta, x[None])[..., 0, :]

    def begin(self, stream: Stream) -> BongState:
        return BongState(self.init().belief,
                         torch.Generator().manual_seed(draw_seed(stream, UPDATE_SALT)),
                         draw_seed(stream, PREDICT_SALT))

    def init(self) -> BongState:
        h = self.hparams
        belief = prior_belief(h["family"], self.theta0, h["prior_var"], h["rank"], h["dg_mean"])
        return BongState(belief, torch.Generator().manual_seed(0), 0)

    def curvature(self, q: Belief, x: Tensor, y: Tensor, generator: torch.Generator,
                  eager: bool = False) -> Curvature:
        """``(g, G)`` of one observation under ``q`` by the ``curvature`` estimator (with
        ``compile = true`` and not ``eager``, by its compiled program)."""
        kind = self.hparams["curvature"]
        if self.hparams["compile"] and not eager:
            if self._compiled is None:  # compiled on the first update, not at construction
                self._compiled = compiled(self.f_one, self.likelihood, kind, BACKEND)
            at = q.mu if kind.startswith("lin") else q.sample(self.hparams["samples"], generator)
            return self._compiled(at, x, y)
        if kind.startswith("lin"):
            return linearised(self.f_one, self.likelihood, q.mu, x, y, kind == "lin-hess",
                              batched=self._batched)
        draws = q.sample(self.hparams["samples"], generator)
        return monte_carlo(self.f_one, self.likelihood, draws, x, y, kind == "mc-hess", generator,
                           batched=self._batched)

    def update(self, state: BongState, x: Tensor, y: Tensor) -> BongState:
        h = self.hparams
        x, y = x.to(self.theta0), y.to(self.theta0.device)
        if self.classes == 0:
            y = y.to(self.theta0).reshape(1)
        predicted = state.belief.dynamics(h["gamma"], h["q"])
        if h["compile"] and h["family"] in FIXED_SHAPE:
            belief = self._compiled_update(predicted, x, y, state.generator)
        else:
            belief = update(predicted, lambda q: self.curvature(q, x, y, state.generator),
                            h["rule"], h["alpha"], h["iterations"])
        return BongState(belief, state.generator, state.predictive_seed, state.seen + 1)

    def _compiled_update(self, predicted: Belief, x: Tensor, y: Tensor,
                         generator: torch.Generator) -> Belief:
        """The update of a fixed-shape belief (:data:`~zoo_bong.beliefs.FIXED_SHAPE`) as one
        ``torch.compile``-d program: the curvature of every iterate, the steps and their checks,
        with one host read of :meth:`~zoo_bong.beliefs.Belief.valid` at the end. MC-EF's noise
        is drawn here, before the program, as the eager update draws it (so the generator's
        stream and the draws are the same). An update the program finds invalid is made again
        eagerly from the same draws, which raises the error that names what failed."""
        h = self.hparams
        if self._program is None:  # compiled on the first update, not at construction
            self._program = compile_own(traced_update(
                self.f_one, self.likelihood, predicted, h["curvature"], h["rule"], h["alpha"],
                h["iterations"]), BACKEND)
        start = generator.get_state()
        mu = predicted.mu
        noises = ([] if h["curvature"].startswith("lin") else
                  [torch.randn(h["samples"], predicted.gaussian.noise_dim, generator=generator,
                               dtype=mu.dtype, device=mu.device)
                   for _ in range(h["iterations"])])
        parts, valid = self._program(predicted.parts(), noises, x, y)
        if bool(valid):
            return predicted.with_parts(parts)
        generator.set_state(start)
        return update(predicted, lambda q: self.curvature(q, x, y, generator, eager=True),
                      h["rule"], h["alpha"], h["iterations"])

    def predict(self, state: BongState, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        kind, q = self.hparams["predictive"], state.belief.gaussian
        x = x.to(q.mean)
        if self.classes == 0:
            return self._predict_gaussian(state, x)
        if kind == "plugin":
            return torch.softmax(predictive.plugin(lambda t: self._f(t, x), q), -1).float()
        generator = torch.Generator().manual_seed(state.predictive_seed)
        draws = self.hparams["predictive_samples"]
        if kind == "mc":
            probs = predictive.monte_carlo(lambda t: torch.softmax(self._f(t, x), -1), q, draws,
                                           generator=generator)
        else:
            probs = predictive.linearised(lambda t: self._f(t, x), q, draws, generator=generator)
        return probs.float()

    def _predict_gaussian(self, state: BongState, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(mean [n], variance [n])`` of the predictive on a regression stream."""
        kind, q, noise = self.hparams["predictive"], state.belief.gaussian, self.hparams["noise_var"]
        if kind == "plugin":
            mean = predictive.plugin(lambda t: self._f(t, x)[:, 0], q)
            return mean, torch.full_like(mean, noise)
        generator = torch.Generator().manual_seed(state.predictive_seed)
        draws = self.hparams["predictive_samples"]

        def moments(f: Tensor) -> Tensor:
            return torch.stack([f, f.square()], -1)

        if kind == "mc":
            m = predictive.monte_carlo(lambda t: moments(self._f(t, x)[:, 0]), q, draws,
                                       generator=generator)
        else:
            m = predictive.linearised(lambda t: self._f(t, x)[:, 0], q, draws, link=moments,
                                      generator=generator)
        mean = m[..., 0]
        return mean, (m[..., 1] - mean.square()).clamp_min(0) + noise
