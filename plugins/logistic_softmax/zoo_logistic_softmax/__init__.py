"""Logistic-softmax GP classifier: ``p(y | f) = sigmoid(f_y / tau) / sum_c sigmoid(f_c / tau)``.

Augmentation (Galy-Fajou, Wenzel, Donner & Opper, UAI 2020): ``1 / sum_c sigmoid(g_c) = int_0^inf
exp(-lam sum_c sigmoid(g_c)) dlam``, ``exp(-lam sigmoid(g)) = sum_n Po(n | lam) sigmoid(-g)^n`` and
``sigmoid(g)^y sigmoid(-g)^n = 2^-(y+n) exp((y - n) g / 2) E_{PG(y+n, 0)}[exp(-w g^2 / 2)]`` with
``g = f / tau``. Given ``(w, n)`` each class GP has Gaussian sites, precision ``w / tau^2`` and
natural mean ``(y - n) / (2 tau)``: the core's :class:`~zoo.inference.SitePosterior`.

Two inference forms (hyper-parameter ``inference``):

* ``mean-field``: the closed-form coordinate-ascent updates of ``q(f) q(lam) q(n) q(w | n)`` and
  their ELBO (as in CDKT, Ke et al., NeurIPS 2023); 2 steps in training, 30 at test.
* ``gibbs``: the Gibbs sampler ``n | lam, f``, ``lam | n``, ``w | n, f``, ``f | w, n`` (as used by
  Snell & Zemel 2021), chains batched; 1 step in training, 50 at test.

Losses (``loss``): ``ml`` -- the ELBO (mean field) or the augmented log marginal likelihood at the
chains' last ``(w, n)`` (Gibbs), on support and query together, per point; ``pl`` -- the log
predictive probability of the query labels given the support. Class probabilities are ``E[p(y |
f*)]`` under the Gaussian predictive of each class function, by the ``estimator`` (antithetic Sobol
draws by default), averaged over chains for Gibbs.

What the Gibbs ``ml`` loss is: Fisher's identity ``grad log p(y) = E_{p(w, n | y)}[grad log p(y |
w, n)]`` needs posterior draws; with ``gibbs_train_steps = 1`` (Snell & Zemel's choice, the
default) the last ``(w, n)`` are drawn given ``f_0`` from the prior, so the loss is the gradient
of ``E_{q_1}[log p(y | w, n)]`` under that one-sweep distribution, a surrogate the authors chose.
``gibbs_train_steps = k`` burns in ``k - 1`` sweeps (cost linear in ``k``); chains cannot persist
across episodes (their variables index an episode's own points). Unlike the public CDKT code, the predictive-
likelihood support is the episode's support (all classes), the prior mean is zero at train and test
alike, and no temperature is fitted on test data (``tau`` is a hyper-parameter; the runner fits its
calibration temperature on validation episodes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

import zoo
from zoo import Episode, HParam, Prediction, device_generator, episode_generator
from zoo.families import GPMethod
from zoo.inference import (
    DTYPE,
    SitePosterior,
    augmented_log_marginal,
    polyagamma_mean,
    prior_draws,
    sample_polyagamma,
)

LOG2 = float(torch.log(torch.tensor(2.0)))


@dataclass
class MeanField:
    """Variational factors besides ``q(f)``: ``q(n_nc) = Po(gamma)``, ``q(lam_n) = Ga(alpha,
    beta = C)``, ``q(w_nc | n) = PG(y + n, c)``."""

    gamma: Tensor  # [C, N]
    alpha: Tensor  # [N]
    c: Tensor  # [C, N]


def logistic_softmax(f: Tensor, tau: float) -> Tensor:
    """``p(y | f) = sigmoid(f_y / tau) / sum_c sigmoid(f_c / tau)`` over the last axis."""
    s = torch.sigmoid(f / tau)
    return s / s.sum(-1, keepdim=True)


class LogisticSoftmax(GPMethod):
    """Logistic-softmax GP with mean-field or Gibbs inference; ``loss`` is ``ml`` or ``pl``."""

    name = "logistic-softmax"
    default_kernel: ClassVar[str | None] = "cosine"
    hyperparameters = {
        "inference": HParam("mean-field", choices=("mean-field", "gibbs"), doc="posterior inference"),
        "loss": HParam("ml", choices=("ml", "pl"), doc="marginal (ml) or predictive (pl) likelihood"),
        "tau": HParam(1.0, gt=0, doc="temperature of the logistic-softmax link"),
        "mf_train_steps": HParam(2, ge=0, doc="mean-field steps in meta-training"),
        "mf_test_steps": HParam(30, ge=0, doc="mean-field steps at test"),
        "gibbs_train_steps": HParam(1, ge=0, doc="Gibbs steps in meta-training"),
        "gibbs_test_steps": HParam(50, ge=0, doc="Gibbs steps at test"),
        "chains": HParam(20, ge=1, doc="parallel Gibbs chains"),
        "prob_samples": HParam(512, ge=1, doc="draws per query for the class probabilities"),
        "pg_sampler": HParam("auto", choices=("auto", "numpy", "torch"),
                             doc="Polya-Gamma sampler (zoo.polyagamma)"),
    }

    def __init__(self, backbone, *, way: int, kernel=None, **hparams: Any):
        super().__init__(backbone, way=way, kernel=kernel, **hparams)

    def link(self, f: Tensor) -> Tensor:
        return logistic_softmax(f, self.hparams["tau"])

    def steps(self, training: bool) -> int:
        kind = "mf" if self.hparams["inference"] == "mean-field" else "gibbs"
        return self.hparams[f"{kind}_{'train' if training else 'test'}_steps"]

    # -- mean field -----------------------------------------------------------------------------

    def sites(self, y: Tensor, mf: MeanField) -> tuple[Tensor, Tensor]:
        """Gaussian sites of ``q(f)``: precision ``E[w] / tau^2``, natural mean ``(y - gamma)/(2 tau)``."""
        tau = self.hparams["tau"]
        return polyagamma_mean(y + mf.gamma, mf.c) / tau**2, (y - mf.gamma) / (2 * tau)

    def mean_field_step(self, post: SitePosterior, y: Tensor, mf: MeanField) -> MeanField:
        """One sweep of exact coordinate updates given ``q(f)``: ``c``, then ``gamma``, then
        ``alpha``; each maximises the ELBO in its block, so the ELBO never decreases."""
        tau, C = self.hparams["tau"], y.shape[0]
        mean, var = post.mean, post.var.clamp_min(0)
        c = (mean**2 + var).sqrt() / tau
        elog_lam = torch.special.digamma(mf.alpha) - torch.log(torch.tensor(float(C), dtype=DTYPE))
        gamma = torch.exp(elog_lam - LOG2 - mean / (2 * tau) - _log_cosh(c / 2))
        return MeanField(gamma, 1 + gamma.sum(0), c)

    def elbo(self, post: SitePosterior, y: Tensor, mf: MeanField) -> Tensor:
        """Closed-form ELBO of the augmented model (sum over points and classes)."""
        tau, C = self.hparams["tau"], y.shape[0]
        b = y + mf.gamma
        theta = polyagamma_mean(b, mf.c)
        mean, var = post.mean, post.var.clamp_min(0)
        eg, eg2 = mean / tau, (mean**2 + var) / tau**2
        lam = torch.distributions.Gamma(mf.alpha, torch.full_like(mf.alpha, C))
        elog_lam = torch.special.digamma(mf.alpha) - torch.log(torch.tensor(float(C), dtype=DTYPE))
        per = (-b * LOG2 + (y - mf.gamma) * eg / 2 - theta * (eg2 - mf.c**2) / 2
               - b * _log_cosh(mf.c / 2) + torch.special.xlogy(mf.gamma, 1 / mf.gamma.clamp_min(1e-300))
               + mf.gamma * elog_lam + mf.gamma)
        return per.sum() - C * lam.mean.sum() + lam.entropy().sum() - post.kl_to_prior().sum()

    def mean_field(self, K: Tensor, y: Tensor, steps: int, episode: Episode,
                   ) -> tuple[SitePosterior, MeanField, list[float]]:
        """``steps`` sweeps from ``q(f)`` = prior, ``gamma = 1``; the variational factors other
        than ``q(f)`` are treated as constants for gradients; the returned ``q(f)`` is not."""
        C, N = y.shape
        mf = MeanField(torch.ones(C, N, dtype=DTYPE, device=K.device),
                       torch.full((N,), 1.0 + C, dtype=DTYPE, device=K.device),
                       torch.ones(C, N, dtype=DTYPE, device=K.device))
        trace = []
        with torch.no_grad():
            post = self.posterior(K.detach(), torch.zeros_like(y), torch.zeros_like(y), episode)
            for _ in range(steps):
                mf = self.mean_field_step(post, y, mf)
                post = self.posterior(K.detach(), *self.sites(y, mf), episode)
                trace.append(float(self.elbo(post, y, mf)))
        return self.posterior(K, *self.sites(y, mf), episode), mf, trace

    # -- Gibbs ------------------------------------------------------------------------------------

    def gibbs(self, K: Tensor, y: Tensor, steps: int, episode: Episode,
              generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor, list[float]]:
        """Chains as one batch from ``f ~ prior``, ``lam = 1``. Returns the last ``w``, ``n``
        (``[R, C, N]``), ``f`` and the mean augmented log marginal per step."""
        tau, R, (C, N) = self.hparams["tau"], self.hparams["chains"], y.shape
        gen = device_generator(generator, K.device)
        K = K.detach()
        priors = prior_draws(K, R * (steps + 1), gen).unflatten(0, (steps + 1, R))
        f = priors[0]
        lam = torch.ones(R, 1, N, dtype=DTYPE, device=K.device)
        trace: list[float] = []
        w = n = torch.zeros_like(f)
        for step in range(1, steps + 1):
            n = torch.poisson(lam * torch.sigmoid(-f / tau), generator=gen)
            lam = torch._standard_gamma(1 + n.sum(1, keepdim=True), generator=gen) / C
            w = sample_polyagamma(y + n, f / tau, gen, self.hparams["pg_sampler"])
            nu = (y - n) / (2 * tau)
            post = SitePosterior(K, w / tau**2, nu, self.jitter, episode.id)
            noise = torch.randn(f.shape, generator=gen, dtype=DTYPE, device=gen.device)
            f = post.sample(priors[step], noise.to(K.device))
            trace.append(float(augmented_log_marginal(post, y + n, nu).sum(-1).mean()))
        return w, n, f, trace

    # -- objectives and prediction ----------------------------------------------------------------

    def support_posterior(self, K: Tensor, y: Tensor, training: bool, episode: Episode,
                          ) -> tuple[SitePosterior, Tensor, list[float]]:
        """The posterior given labels ``y`` ``[C, N]`` (one-hot rows per class), and the ML
        objective per point (ELBO, or mean over chains of the augmented log marginal)."""
        steps, tau = self.steps(training), self.hparams["tau"]
        if self.hparams["inference"] == "mean-field":
            post, mf, trace = self.mean_field(K, y, steps, episode)
            return post, self.elbo(post, y, mf), trace
        w, n, _, trace = self.gibbs(K, y, steps, episode, episode_generator(episode))
        nu = (y - n) / (2 * tau)
        post = self.posterior(K, w / tau**2, nu, episode)
        return post, augmented_log_marginal(post, y + n, nu).sum(-1).mean(), trace

    def query_probs(self, episode: Episode, training: bool) -> tuple[Tensor, list[float]]:
        mats = self.kernel_matrices(episode)
        post, _, trace = self.support_posterior(mats.Kss, self.onehot(episode).T, training,
                                                episode)
        mean, var = post.predict(mats.Ksq, mats.kqq)  # [(R,) C, Q]
        probs = self.probabilities(mean.transpose(-1, -2), var.transpose(-1, -2), episode,
                                   samples=self.hparams["prob_samples"])
        return (probs.mean(0) if probs.ndim == 3 else probs), trace

    def integrates_in_training(self) -> bool:
        return self.hparams["loss"] == "pl"

    def meta_loss(self, episode: Episode) -> Tensor:
        if self.hparams["loss"] == "pl":
            probs, _ = self.query_probs(episode, training=True)
            return -probs.gather(1, episode.query_y[:, None]).clamp_min(1e-300).log().mean()
        K, y = self.labelled_kernel(episode)
        onehot = torch.nn.functional.one_hot(y, episode.way).T.to(DTYPE)
        _, objective, _ = self.support_posterior(K, onehot, True, episode)
        return -objective / y.numel()

    def predict(self, episode: Episode) -> Prediction:
        probs, trace = self.query_probs(episode, training=False)
        return Prediction(probs.float(), extras={"inner_objective": trace})


def _log_cosh(x: Tensor) -> Tensor:
    x = x.abs()
    return x + torch.log1p(torch.exp(-2 * x)) - LOG2


@zoo.hookimpl
def zoo_register_methods(register):
    register(LogisticSoftmax)
