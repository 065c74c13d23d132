"""The MD-BFSC classifier and its gradient-descent twin, on the core's GP skeleton.

Everything but the inner loop is shared: backbone -> L2-normalised features -> one deep kernel per
class -> (mirror descent | gradient descent) on Gaussian sites -> GP predictive marginals at the
queries -> ``E[softmax(f*)]`` (Eq. 6). Expectations use the ``estimator`` (antithetic scrambled Sobol
by default, ``samples_train`` / ``samples_test`` points unless its spec sets them) with draws
seeded by the episode, so a prediction is a function of (weights, episode) alone.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch.nn.functional as F
from torch import Tensor

from zoo import Episode, HParam, Prediction
from zoo.families import GPMethod
from zoo.inference import DTYPE, SoftmaxLikelihood, SoftmaxMean
from zoo_md_bfsc.inference import INNER_LOOPS, InnerResult

LOSSES = ("elbo", "predictive")


class MDBFSC(GPMethod):
    """Bayesian few-shot classification with a mirror-descent inner loop (Ke, Cao & Zhou 2024).

    Hyper-parameters (paper defaults, Appendix E): ``steps_train``/``rho_train`` inner steps and
    step size while meta-training (3, 1.0), ``steps_test``/``rho_test`` at test (50, 0.5);
    ``loss``: ``"elbo"`` (Eq. 5 on all labelled points of the training episode, support and
    query, as in the authors' code) or ``"predictive"`` (cross-entropy of the query predictive
    after inner steps on the support); ``samples_train``/``samples_test``: draws per expectation;
    ``estimator``: the expectation estimator's spec (``sobol``; its own options, e.g.
    ``sobol[samples=64]``, override the sample counts); ``normalize``: L2-normalise features
    before the kernel (the authors' code always does); ``tol_test``: the test-time loop stops at
    the first step that moves no support marginal by more than this (its fixed point, reached in
    13-16 of the 50 steps at ``rho_test = 0.5``; the predictive probabilities stay within 1e-5 of
    the ``steps_test``-step answer, ``test_early_stop_keeps_the_full_loops_answer``), the ELBO
    trace repeating its last value up to ``steps_test``.
    """

    name: ClassVar[str] = "md-bfsc"
    inner: ClassVar[str] = "md"
    hyperparameters = {
        "steps_train": HParam(3, ge=0, doc="inner steps in meta-training"),
        "rho_train": HParam(1.0, gt=0, le=1, doc="mirror-descent step size in meta-training"),
        "steps_test": HParam(50, ge=0, doc="inner steps at test"),
        "rho_test": HParam(0.5, gt=0, le=1, doc="mirror-descent step size at test"),
        "loss": HParam("elbo", choices=LOSSES, doc="meta-training objective"),
        "samples_train": HParam(256, ge=1, doc="draws per expectation in meta-training"),
        "samples_test": HParam(256, ge=1, doc="draws per expectation at test"),
        "tol_test": HParam(1e-5, ge=0, doc="stop the test-time inner loop at the first step that "
                           "moves no support marginal (mean or variance) by more than this "
                           "(its fixed point; inference.mirror_descent); 0 runs every step"),
        "normalize": HParam(True, doc="L2-normalise features before the kernel"),
    }

    @property
    def batches_episodes(self) -> bool:  # type: ignore[override]
        """A meta-batch is one batched call (:mod:`zoo.batching`) with the ELBO objective, whose
        draws are a rule per episode (:meth:`rule`); the predictive objective's expectation goes
        through the estimator's own seeding, so it runs episode by episode."""
        return self.hparams["loss"] == "elbo"

    def features(self, x: Tensor) -> Tensor:
        z = self.backbone(x)
        return F.normalize(z, dim=-1) if self.hparams["normalize"] else z

    # -- pieces ------------------------------------------------------------------------------------

    def run_inner(self, K: Tensor, labels: Tensor, episode: Episode, *, steps: int, rho: float,
                  samples: int, trace: bool = False, final_elbo: bool = False, tol: float = 0.0,
                  ) -> InnerResult:
        """The inner loop on prior covariances ``K [C, N, N]`` and labels ``[N]``, stopped at its
        fixed point to ``tol`` (0: every step)."""
        onehot = F.one_hot(labels, episode.way).to(DTYPE)
        rule = self.rule(episode, episode.way, salt=1, device=K.device, samples=samples)
        likelihood = SoftmaxLikelihood(onehot, rule)
        return INNER_LOOPS[self.inner](K, likelihood, steps, rho, jitter=self.jitter,
                                       episode=episode.id, trace=trace, final_elbo=final_elbo,
                                       tol=tol, **self.inner_options())

    def inner_options(self) -> dict[str, Any]:
        """Extra keyword arguments of this method's inner loop."""
        return {}

    def query_probs(self, episode: Episode, *, steps: int, rho: float, samples: int,
                    trace: bool = False, tol: float = 0.0) -> tuple[Tensor, InnerResult]:
        """Inner steps on the support, then ``E[softmax(f*)]`` at the queries (Eq. 6)."""
        mats = self.kernel_matrices(episode)
        result = self.run_inner(mats.Kss, episode.support_y, episode, steps=steps, rho=rho,
                                samples=samples, trace=trace, tol=tol)
        mean, var = result.posterior.predict(mats.Ksq, mats.kqq)
        probs = self.probabilities(mean.T, var.T, episode, integrand=SoftmaxMean(), salt=2,
                                   samples=samples)
        return probs, result

    # -- the runner's entry points ---------------------------------------------------------------

    def integrates_in_training(self) -> bool:
        return self.hparams["loss"] == "predictive"

    def meta_loss(self, episode: Episode) -> Tensor:
        h = self.hparams
        if h["loss"] == "predictive":
            probs, _ = self.query_probs(episode, steps=h["steps_train"], rho=h["rho_train"],
                                        samples=h["samples_train"])
            return F.nll_loss(probs.clamp_min(1e-12).log(), episode.query_y).float()
        K, labels = self.labelled_kernel(episode)
        result = self.run_inner(K, labels, episode, steps=h["steps_train"], rho=h["rho_train"],
                                samples=h["samples_train"], final_elbo=True)
        assert result.final_elbo is not None
        return (-result.final_elbo / labels.numel()).float()

    def predict(self, episode: Episode) -> Prediction:
        h = self.hparams
        probs, result = self.query_probs(episode, steps=h["steps_test"], rho=h["rho_test"],
                                         samples=h["samples_test"], trace=True, tol=h["tol_test"])
        return Prediction(probs.float(), {"inner_objective": result.elbo})


class GDBFSC(MDBFSC):
    """The same model with the paper's vanilla gradient-descent inner loop.

    ``gd_parameterisation``: ``"whitened"`` (default; gradient steps on ``(a, S)`` with
    ``f = L u``, stable at ordinary step sizes) or ``"moment"`` (on ``(m, Sigma)`` exactly as the
    paper's baseline, which needs a step size below ~``lambda_min(K)^2`` and otherwise raises a
    ``NumericalError`` naming the episode). Step sizes default to the paper's outer-loop study
    (0.02, its 5-shot value, Fig. 4; 0.1 diverges on 80-point glyph episodes).
    """

    name: ClassVar[str] = "gd-bfsc"
    inner: ClassVar[str] = "gd"
    batches_episodes: ClassVar[bool] = False  # its divergence checks branch on values
    hyperparameters = {
        "rho_train": HParam(0.02, gt=0, doc="gradient step size in meta-training"),
        "rho_test": HParam(0.02, gt=0, doc="gradient step size at test"),
        "gd_parameterisation": HParam("whitened", choices=("whitened", "moment"),
                                      doc="variables of the gradient steps"),
        "tol_test": HParam(0.0, ge=0, doc="stop the test-time inner loop at the first step that "
                           "moves no support marginal by more than this; off (0) by default: a "
                           "small gradient step is no sign of convergence"),
    }

    def inner_options(self) -> dict[str, Any]:
        return {"parameterisation": self.hparams["gd_parameterisation"]}
