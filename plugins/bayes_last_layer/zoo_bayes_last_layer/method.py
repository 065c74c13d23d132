"""The Bayesian last layer fitted by variational inference on each episode's support.

A Gaussian ``q(W)`` over the linear head's weights (family ``diag``, ``full`` or ``kfac``,
:mod:`zoo_bayes_last_layer.posterior`) maximises the ELBO on the support (last-layer VI notes,
Sec. 1-2): the expected categorical log-likelihood, estimated with reparameterised draws of the
weights, minus the KL to the prior ``N(0, diag(s^2))`` (``s`` per feature, learned or fixed), by
unrolled ascent steps (plain or Adam, ``inner_optimizer``) from a start in prior-whitened
coordinates. With batches of ``b`` of the ``N``
support points (``B = N / b`` of them; ``batch_size = 0``: one batch, ``B = 1``) the notes give
two scalings of one step's objective (Sec. 2.1):

* ``batch``: ``sum_{i in batch} E_q[log p(y_i | x_i, W)] - KL(q || p) / B``;
* ``mean``: ``(1/b) sum_{i in batch} E_q[log p(y_i | x_i, W)] - KL(q || p) / N``.

The two are the same objective up to the factor ``b``; with plain ascent that factor is the step
size, so the choice sets how far a step moves (``mean`` keeps it independent of the shot); Adam is
invariant to it. Prediction averages ``softmax(W phi)`` over the estimator's draws of ``W`` (Sec. 2);
its own uncertainty is the latent variance ``Var_q(phi^T w_c)`` summed over the classes.

The backbone (and a learned prior) is meta-learned through the unrolled inner VI
(``backbone_training = "meta"``: the loss is the query negative log predictive after
``steps_train`` steps), or pre-trained as an ordinary classifier over the training classes as in
Feature Transfer (``"pretrain"``; Chen et al., ICLR 2019), with the VI only at test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo import Episode, HParam, Prediction, check_finite, episode_generator
from zoo.backbones import Backbone
from zoo.families import ClassTable, LastLayerMethod, linear_gaussian_marginals, weight_samples
from zoo.gaussians import DiagonalGaussian, Gaussian, kl_divergence
from zoo.inference import DTYPE, UnrolledAdam
from zoo_bayes_last_layer.posterior import FAMILIES, build, initial_parameters

SCALINGS = ("mean", "batch")
FEATURES = ("raw", "l2", "centred-l2")
DIVERGED = ("lower inner_lr (with inner_optimizer=sgd and elbo_scaling=batch the step grows with "
            "the batch size) or use inner_optimizer=adam")


class Ascent:
    """Plain gradient ascent ``p + lr g`` (differentiable, for the unrolled inner loop)."""

    def __init__(self, lr: float):
        self.lr = lr

    def __call__(self, params: list[Tensor], grads: tuple[Tensor, ...]) -> list[Tensor]:
        return [p + self.lr * g for p, g in zip(params, grads)]


class AdamAscent(UnrolledAdam):
    """Adam (Kingma & Ba 2015) on the ascent direction, unrolled (the core's moments):
    ``p + lr m_hat / (sqrt(v_hat + eps^2) + eps)``, the ``eps^2`` keeping the square root
    differentiable at a zero second moment. It is invariant to the objective's scale (up to
    ``eps``), so it needs no per-family step size, where plain ascent diverges on K-FAC's factors
    (each shared by ``D`` or ``C`` weights)."""

    def __call__(self, params: list[Tensor], grads: tuple[Tensor, ...]) -> list[Tensor]:
        m_t, v_t, c1, c2 = self.moments(grads)
        return [p + self.lr * (m / c1) / ((v / c2 + self.eps**2).sqrt() + self.eps)
                for p, m, v in zip(params, m_t, v_t)]


INNER_OPTIMIZERS = {"adam": AdamAscent, "sgd": Ascent}
DEFAULT_INNER_LR = {"adam": 0.1, "sgd": 0.2}


LogLikelihood = Callable[[Tensor, Tensor], Tensor]


def categorical_log_likelihood(logits: Tensor, y: Tensor) -> Tensor:
    """``log softmax(f)_y`` ``[S, b]`` for logits ``[S, b, C]`` and labels ``[b]``."""
    log_p = torch.log_softmax(logits, -1)
    return log_p.gather(-1, y.expand(*logits.shape[:-1])[..., None])[..., 0]


def support_batches(n: int, batch_size: int, generator: torch.Generator) -> list[Tensor]:
    """The support's indices in ``B = ceil(n / b)`` batches of one random order (one batch of all
    ``n`` when ``batch_size`` is 0 or at least ``n``)."""
    if batch_size == 0 or batch_size >= n:
        return [torch.arange(n)]
    return list(torch.randperm(n, generator=generator).split(batch_size))


def scaled_elbo(ell: Tensor, kl: Tensor, n: int, batches: int, scaling: str) -> Tensor:
    """One step's objective from a batch's expected log-likelihoods ``ell [b]`` and the KL, under
    the notes' ``batch`` (``sum ell - KL / B``) or ``mean`` (``mean ell - KL / N``) scaling."""
    if scaling == "batch":
        return ell.sum() - kl / batches
    if scaling == "mean":
        return ell.mean() - kl / n
    raise ValueError(f"unknown ELBO scaling {scaling!r}; use one of {SCALINGS}")


class BayesLastLayer(LastLayerMethod):
    """See the module docstring; ``family`` picks the Gaussian over the head's weights."""

    # its own uncertainty: the family's, the latent variance of f_c = phi^T w_c under q summed
    # over classes (uncertainty_name of LatentGaussianMethod)

    name: ClassVar[str] = "bayes-last-layer"
    inner_objective_name = "ELBO per support point"
    inner_objective_better = "higher"

    @property
    def meta_loss_name(self) -> str:  # type: ignore[override]
        return ("pre-training cross-entropy over the training classes"
                if self.hparams["backbone_training"] == "pretrain" else "query cross-entropy")

    hyperparameters = {
        "family": HParam("diag", choices=FAMILIES, doc="Gaussian family of the head's weights"),
        "elbo_scaling": HParam("mean", choices=SCALINGS, doc="mean: mean log-likelihood and "
                               "KL / N; batch: summed log-likelihood and KL / B (notes Sec. 2.1)"),
        "batch_size": HParam(0, ge=0, doc="support points per inner step; 0: all (B = 1)"),
        "prior": HParam("learned", choices=("learned", "fixed"),
                        doc="prior variances per feature: meta-learned or fixed at prior_var"),
        "prior_var": HParam(100.0, gt=0, doc="prior variance per weight of unit-norm features "
                            "(its initial value if learned); chosen on glyphs validation episodes"),
        "init_scale": HParam(0.1, gt=0, doc="initial posterior standard deviation, in prior "
                             "units"),
        "inner_optimizer": HParam(None, type=str, choices=tuple(INNER_OPTIMIZERS),
                                  doc="ascent rule of the inner VI (sgd: the ELBO scaling sets "
                                  "its step; adam: scale-free); None: sgd for diag (chosen on "
                                  "glyphs validation episodes), adam for full and kfac (plain "
                                  "ascent diverges on their shared factors)"),
        "inner_lr": HParam(None, type=float, gt=0, doc="step size of the inner VI; None: "
                           "0.2 with sgd, 0.1 with adam"),
        "steps_train": HParam(10, ge=0, doc="inner steps in meta-training"),
        "steps_test": HParam(10, ge=0, doc="inner steps at test: the meta-training budget "
                             "(the belief the backbone is meta-learned for), chosen on glyphs "
                             "validation episodes over 10, 50 and 200 steps"),
        "samples_train": HParam(8, ge=1, doc="weight draws per ELBO and meta-loss estimate"),
        "samples_test": HParam(64, ge=1, doc="weight draws of the predictive at test"),
        "features": HParam("centred-l2", choices=FEATURES, doc="raw; l2: L2-normalised; "
                            "centred-l2: minus the support's mean feature, then L2-normalised"),
        "backbone_training": HParam("meta", choices=("meta", "pretrain"),
                                    doc="meta: through the inner VI; pretrain: as a classifier "
                                    "over the training classes (Feature Transfer)"),
        "num_classes": HParam(1000, ge=1, doc="rows of the pre-training head (pretrain only)"),
        "estimator": HParam("mc", doc="draws of the weights: a zoo.expectations spec with "
                            "points in any dimension (mc; sobol scrambles a new point set per "
                            "inner step, slow at C D dimensions)"),
    }

    def __init__(self, backbone: Backbone, *, way: int, **hparams: Any):
        super().__init__(backbone, way=way, **hparams)
        d = backbone.feature_dim
        log_var = torch.full((d,), float(self.hparams["prior_var"]), dtype=DTYPE).log()
        if self.hparams["prior"] == "learned":
            self.prior_log_var = nn.Parameter(log_var)
        else:
            self.register_buffer("prior_log_var", log_var)
        if self.hparams["backbone_training"] == "pretrain":
            self.pretraining = ClassTable(d, self.hparams["num_classes"], method=self.name)

    def integrates_in_training(self) -> bool:
        """Pre-training fits a classifier over the training classes: no predictive integral is
        evaluated before test, so a learning estimator (meta-cv) would learn nothing."""
        return self.hparams["backbone_training"] == "meta"

    def head_features(self, episode: Episode) -> tuple[Tensor, Tensor]:
        """The head's inputs for the support and the queries (``features``: centred by the
        support's mean feature only, never the queries', so a prediction uses the support alone;
        raw features of an untrained Conv4 have cosine similarities near 1, which a head with a
        zero-mean prior cannot separate)."""
        x = torch.cat([episode.support_x, episode.query_x])
        z = self.features(x).to(DTYPE)
        n = len(episode.support_y)
        mode = self.hparams["features"]
        if mode == "centred-l2":
            z = z - z[:n].mean(0)
        if mode != "raw":
            z = F.normalize(z, dim=-1)
        return z[:n], z[n:]

    def prior(self, way: int) -> DiagonalGaussian:
        """``N(0, diag(s^2))`` over ``vec(W)``."""
        var = self.prior_log_var.exp().repeat(way)
        return DiagonalGaussian(torch.zeros_like(var), var)

    def fit(self, phi: Tensor, y: Tensor, episode: Episode, *, steps: int, samples: int,
            create_graph: bool, log_likelihood: LogLikelihood = categorical_log_likelihood,
            ) -> tuple[Gaussian, list[float]]:
        """``steps`` ascent steps on the scaled ELBO from the start (fresh weight draws each
        step); the belief and the ELBO per support point before each step. ``log_likelihood``
        maps logits ``[S, b, C]`` and targets to ``[S, b]`` (the categorical one; tests pass a
        Gaussian one for the conjugate limit)."""
        h, way = self.hparams, episode.way
        scale = (0.5 * self.prior_log_var).exp()
        prior = self.prior(way)
        params = initial_parameters(h["family"], way, phi.shape[-1], h["init_scale"],
                                    dtype=phi.dtype, device=phi.device)
        batches = support_batches(len(y), h["batch_size"], episode_generator(episode, salt=3))
        step_fn = self.inner_optimizer()
        trace = []
        for step in range(steps):
            q = build(h["family"], params, scale)
            index = batches[step % len(batches)].to(phi.device)
            ell = self.expected_log_likelihood(q, phi[index], y[index], episode, log_likelihood,
                                               salt=16 + step, samples=samples)
            kl = kl_divergence(q, prior)
            objective = check_finite(
                scaled_elbo(ell, kl, len(y), len(batches), h["elbo_scaling"]),
                f"ELBO at inner step {step}", episode, DIVERGED)
            grads = torch.autograd.grad(objective, params, create_graph=create_graph)
            params = step_fn(params, grads)
            trace.append((len(batches) * ell.sum() - kl).item() / len(y))
        check_finite(torch.cat([p.detach().flatten() for p in params]),
                     f"variational parameters after {steps} inner steps", episode, DIVERGED)
        return build(h["family"], params, scale), trace

    def inner_optimizer(self) -> Ascent | AdamAscent:
        """A fresh inner ascent rule (see the ``inner_optimizer`` and ``inner_lr`` defaults)."""
        h = self.hparams
        name = h["inner_optimizer"] or ("sgd" if h["family"] == "diag" else "adam")
        lr = h["inner_lr"] if h["inner_lr"] is not None else DEFAULT_INNER_LR[name]
        return INNER_OPTIMIZERS[name](lr)

    def expected_log_likelihood(self, q: Gaussian, phi: Tensor, y: Tensor, episode: Episode,
                                log_likelihood: LogLikelihood = categorical_log_likelihood, *,
                                salt: int, samples: int) -> Tensor:
        """``E_q[log p(y_i | W phi_i)]`` ``[b]`` by the estimator's reparameterised draws."""
        rule = self.weight_rule(q, episode, salt=salt, samples=samples)
        W = weight_samples(q, episode.way, rule.points)
        return rule.average(log_likelihood(phi @ W.mT, y), 0)

    def posterior(self, phi: Tensor, episode: Episode) -> tuple[Gaussian, list[float]]:
        """The belief after ``steps_test`` inner steps on the support features ``phi``, and the
        ELBO trace."""
        with torch.enable_grad():
            return self.fit(phi.detach(), episode.support_y, episode,
                            steps=self.hparams["steps_test"], samples=self.hparams["samples_train"],
                            create_graph=False)

    def weight_posterior(self, episode: Episode) -> Gaussian:
        return self.posterior(self.head_features(episode)[0], episode)[0]

    def latent(self, episode: Episode) -> tuple[Tensor, Tensor]:
        phi_s, phi_q = self.head_features(episode)
        return linear_gaussian_marginals(phi_q, self.posterior(phi_s, episode)[0], episode.way)

    def meta_loss(self, episode: Episode) -> Tensor:
        h = self.hparams
        if h["backbone_training"] == "pretrain":
            return self.pretraining.loss(self.features, episode)
        phi_s, phi_q = self.head_features(episode)
        q, _ = self.fit(phi_s, episode.support_y, episode, steps=h["steps_train"],
                        samples=h["samples_train"], create_graph=True)
        probs = self.weight_probabilities(phi_q, q, episode, salt=1, samples=h["samples_train"])
        return F.nll_loss(probs.clamp_min(1e-12).log(), episode.query_y).float()

    def predict(self, episode: Episode) -> Prediction:
        phi_s, phi_q = self.head_features(episode)
        q, trace = self.posterior(phi_s, episode)
        probs = self.weight_probabilities(phi_q, q, episode, salt=1,
                                          samples=self.hparams["samples_test"])
        _, var = linear_gaussian_marginals(phi_q.detach(), q, episode.way)
        return Prediction(probs.detach().float(), {"inner_objective": trace,
                                                   "uncertainty": var.detach().sum(-1).float()})
