"""The Bayesian last layer fitted by variational inference on each episode's support.

A Gaussian ``q(W)`` over the linear head's weights (family ``diag``, ``full`` or ``kfac``,
:mod:`zoo_bayes_last_layer.posterior`) maximises the ELBO on the support (last-layer VI notes,
Sec. 1-2): the expected categorical log-likelihood, estimated with reparameterised draws of the
weights, minus the KL to the prior ``N(0, diag(s^2))`` (``s`` per feature, learned or fixed), by
``steps`` plain gradient steps from the prior-whitened start. With batches of ``b`` of the ``N``
support points (``B = N / b`` of them; ``batch_size = 0``: one batch, ``B = 1``) the notes give
two scalings of one step's objective (Sec. 2.1):

* ``batch``: ``sum_{i in batch} E_q[log p(y_i | x_i, W)] - KL(q || p) / B``;
* ``mean``: ``(1/b) sum_{i in batch} E_q[log p(y_i | x_i, W)] - KL(q || p) / N``.

The two are the same objective up to the factor ``b``; with plain gradient steps that factor is
the step size, so the choice sets how far a step moves (``mean`` keeps it independent of the
shot). Prediction averages ``softmax(W phi)`` over the estimator's draws of ``W`` (Sec. 2).

The backbone (and a learned prior) is meta-learned through the unrolled inner VI
(``backbone_training = "meta"``: the loss is the query negative log predictive after
``steps_train`` steps), or pre-trained as an ordinary classifier over the training classes as in
Feature Transfer (``"pretrain"``; Chen et al., ICLR 2019), with the VI only at test.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo import Episode, Prediction
from zoo.backbones import Backbone
from zoo.families.last_layer import LastLayerMethod, weight_samples
from zoo.families.pretrained import ClassTable
from zoo.gaussians import DiagonalGaussian, Gaussian, kl_divergence
from zoo.gp import DTYPE
from zoo.hparams import HParam
from zoo.method import episode_generator
from zoo_bayes_last_layer.posterior import FAMILIES, build, initial_parameters

SCALINGS = ("mean", "batch")


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

    name: ClassVar[str] = "bayes-last-layer"
    hyperparameters = {
        "family": HParam("diag", choices=FAMILIES, doc="Gaussian family of the head's weights"),
        "elbo_scaling": HParam("mean", choices=SCALINGS, doc="mean: mean log-likelihood and "
                               "KL / N; batch: summed log-likelihood and KL / B (notes Sec. 2.1)"),
        "batch_size": HParam(0, ge=0, doc="support points per inner step; 0: all (B = 1)"),
        "prior": HParam("learned", choices=("learned", "fixed"),
                        doc="prior variances per feature: meta-learned or fixed at prior_var"),
        "prior_var": HParam(1.0, gt=0, doc="prior variance per weight (its initial value if "
                            "learned)"),
        "init_scale": HParam(0.1, gt=0, doc="initial posterior standard deviation, in prior "
                             "units"),
        "inner_lr": HParam(1.0, gt=0, doc="gradient step size of the inner VI"),
        "steps_train": HParam(10, ge=0, doc="inner steps in meta-training"),
        "steps_test": HParam(50, ge=0, doc="inner steps at test"),
        "samples_train": HParam(8, ge=1, doc="weight draws per ELBO and meta-loss estimate"),
        "samples_test": HParam(64, ge=1, doc="weight draws of the predictive at test"),
        "normalize": HParam(True, doc="L2-normalise the features"),
        "backbone_training": HParam("meta", choices=("meta", "pretrain"),
                                    doc="meta: through the inner VI; pretrain: as a classifier "
                                    "over the training classes (Feature Transfer)"),
        "num_classes": HParam(1000, ge=1, doc="rows of the pre-training head (pretrain only)"),
        "estimator": HParam("sobol", doc="draws of the weights: a zoo.expectations spec with "
                            "points in any dimension (sobol or mc)"),
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

    def features(self, x: Tensor) -> Tensor:
        z = self.backbone(x).to(DTYPE)
        return F.normalize(z, dim=-1) if self.hparams["normalize"] else z

    def prior(self, way: int) -> DiagonalGaussian:
        """``N(0, diag(s^2))`` over ``vec(W)``."""
        var = self.prior_log_var.exp().repeat(way)
        return DiagonalGaussian(torch.zeros_like(var), var)

    def fit(self, phi: Tensor, y: Tensor, episode: Episode, *, steps: int, samples: int,
            create_graph: bool) -> tuple[Gaussian, list[float]]:
        """``steps`` gradient steps on the scaled ELBO from the start; the belief and the full
        ELBO (per support point) after each step."""
        h, way = self.hparams, episode.way
        scale = (0.5 * self.prior_log_var).exp()
        prior = self.prior(way)
        params = initial_parameters(h["family"], way, phi.shape[-1], h["init_scale"],
                                    dtype=phi.dtype, device=phi.device)
        batches = support_batches(len(y), h["batch_size"], episode_generator(episode, salt=3))
        trace = []
        for step in range(steps):
            q = build(h["family"], params, scale)
            index = batches[step % len(batches)].to(phi.device)
            ell = self.expected_log_likelihood(q, phi[index], y[index], episode,
                                               salt=16 + step, samples=samples)
            kl = kl_divergence(q, prior)
            objective = scaled_elbo(ell, kl, len(y), len(batches), h["elbo_scaling"])
            grads = torch.autograd.grad(objective, params, create_graph=create_graph)
            params = [p + h["inner_lr"] * g for p, g in zip(params, grads)]
            trace.append(float(len(batches) * ell.sum() - kl) / len(y))
        return build(h["family"], params, scale), trace

    def expected_log_likelihood(self, q: Gaussian, phi: Tensor, y: Tensor, episode: Episode, *,
                                salt: int, samples: int) -> Tensor:
        """``E_q[log softmax(W phi_i)_{y_i}]`` ``[b]`` by the estimator's reparameterised draws."""
        rule = self.weight_rule(q, episode, salt=salt, samples=samples)
        W = weight_samples(q, episode.way, rule.points)
        log_p = torch.log_softmax(phi @ W.mT, -1)                     # [S, b, C]
        return rule.average(log_p.gather(-1, y.expand(len(W), -1)[..., None])[..., 0], 0)

    def weight_posterior(self, episode: Episode) -> Gaussian:
        with torch.enable_grad():
            phi = self.features(episode.support_x)
            q, _ = self.fit(phi, episode.support_y, episode, steps=self.hparams["steps_test"],
                            samples=self.hparams["samples_train"], create_graph=False)
        return q

    def meta_loss(self, episode: Episode) -> Tensor:
        h = self.hparams
        if h["backbone_training"] == "pretrain":
            return self.pretraining.loss(self.backbone, episode)
        q, _ = self.fit(self.features(episode.support_x), episode.support_y, episode,
                        steps=h["steps_train"], samples=h["samples_train"], create_graph=True)
        probs = self.weight_probabilities(self.features(episode.query_x), q, episode, salt=1,
                                          samples=h["samples_train"])
        return F.nll_loss(probs.clamp_min(1e-12).log(), episode.query_y).float()

    def predict(self, episode: Episode) -> Prediction:
        h = self.hparams
        with torch.enable_grad():
            phi = self.features(episode.support_x).detach()
            q, trace = self.fit(phi, episode.support_y, episode, steps=h["steps_test"],
                                samples=h["samples_train"], create_graph=False)
        probs = self.weight_probabilities(self.features(episode.query_x), q, episode, salt=1,
                                          samples=h["samples_test"])
        return Prediction(probs.detach().float(), {"inner_objective": trace})
