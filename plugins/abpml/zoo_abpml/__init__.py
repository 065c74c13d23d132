"""Amortised Bayesian prototype meta-learning, ABPML (Sun, Wu, Li, Wang & Jin, AISTATS 2021;
Sun's thesis, chapter 6 and appendix C), as the zoo method ``abpml``.

The embedding network maps an image to a diagonal Gaussian ``N(mu(x), diag sigma^2(x))`` with
``sigma^2(x) = |w| sigmoid(r(x)) + |b|`` (``w``, ``b`` learnt scalars), so ``sigma^2`` lies in
``[|b|, |w| + |b|]``. A class's prototype posterior ``q(z_c | S)`` is the matrix harmonic mean of
its support embeddings (:mod:`zoo_abpml.prototypes`; its covariance does not shrink with the
shot, as in the thesis); queries are scored by ``log N(mu(x); mu_c, Sigma_c)`` (Eq. 6.8).
Amortisation (Algorithm 8): ``L`` SGD steps of the embedding network from the meta-parameters on
the support loss ``J(S) = L_PR(S|z) + KL[q(z|S) || p(z)]`` (Eq. 6.4, the prior estimated from the
support alone, Eq. 6.7), then the query loss ``L_PR(Q|z)`` (Eq. 6.5) of the adapted network is
meta-learned by Adam; test episodes take the same ``L`` steps (Algorithm 9). The inner loop is
learn2learn's ``MAML`` clone/adapt, the family's base :class:`~zoo.families.InnerLoopMethod`.

Defaults per protocol (appendix C; ``protocol="auto"`` picks ``omniglot`` for grey-scale inputs,
``miniimagenet`` for colour): Omniglot ``L = 1``, ``alpha = 0.1``, meta-batch 32; natural images
``L = 5``, ``alpha = 0.01``, meta-batch 4; outer learning rate 1e-3. Values given in a suite's
``[methods.abpml]`` or ``--set abpml.KEY=VALUE`` take precedence. Choices the thesis leaves open:
the embedding is ``p = 64`` (inferred from its 128-unit linear layer split into mean and raw
variance), the meta-gradient is second-order unless ``first_order`` is set, ``w`` and ``b`` start
at 1 and 1 (sigma^2 starts in [1, 2]; ``b`` chosen on glyphs validation episodes, see
benchmarks/cards/abpml.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import zoo
from zoo import Episode, HParam, Prediction, check_finite
from zoo.backbones import Backbone
from zoo.families import DIVERGED, InnerLoopMethod, learn2learn_algorithms, require_learn2learn
from zoo_abpml.prototypes import AGGREGATIONS, aggregate, log_density, task_prior_kl

if TYPE_CHECKING:
    import learn2learn as l2l

require_learn2learn("bayes-meta-zoo-abpml")

#: Appendix C of the thesis: protocol -> way -> inner-loop settings and meta-batch.
PUBLISHED = {
    "omniglot": {None: {"inner_lr": 0.1, "inner_steps": 1, "test_inner_steps": 1,
                        "meta_batch": 32}},
    "miniimagenet": {None: {"inner_lr": 0.01, "inner_steps": 5, "test_inner_steps": 5,
                            "meta_batch": 4}},
}


class GaussianEmbedding(nn.Module):
    """``x -> (mu(x), sigma^2(x))``: the backbone, a linear layer to ``2 p`` split into the mean
    and the raw part ``r(x)``, and ``sigma^2 = |w| sigmoid(r) + |b|``."""

    def __init__(self, backbone: Backbone, dim: int, w: float = 1.0, b: float = 1.0):
        super().__init__()
        self.backbone = backbone
        self.linear = nn.Linear(backbone.feature_dim, 2 * dim)
        self.w = nn.Parameter(torch.tensor(w))
        self.b = nn.Parameter(torch.tensor(b))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        mu, raw = self.linear(self.backbone(x)).chunk(2, dim=-1)
        return mu, self.w.abs() * torch.sigmoid(raw) + self.b.abs()


class ABPML(InnerLoopMethod):
    """Gaussian prototypes from a Gaussian embedding adapted by ``L`` inner steps."""

    name = "abpml"
    any_way = True
    published = PUBLISHED
    hyperparameters = {
        "meta_batch": HParam(None, type=int, ge=1,
                             doc="episodes per optimizer step (None: 32 Omniglot, 4 natural images)"),
        "embedding_dim": HParam(64, ge=1, doc="p, the dimension of mu(x) and of sigma^2(x)"),
        "first_order": HParam(False, doc="drop the second-order terms of the meta-gradient"),
        "kl": HParam(True, doc="add the KL to the task-dependent prior to the support loss"),
        "aggregation": HParam("harmonic", choices=AGGREGATIONS,
                              doc="class posterior: matrix harmonic mean (Eq. 6.6) or plain means"),
        "init_w": HParam(1.0, gt=0, doc="initial w of sigma^2 = |w| sigmoid(r) + |b| (not given "
                                        "in the thesis)"),
        # 1 over the hand-picked 0.1: better validation accuracy at 1 and 5 shots on glyphs
        # (sweep in benchmarks/cards/abpml.md, suite abpml-sweep)
        "init_b": HParam(1.0, gt=0, doc="initial b of sigma^2, its lower bound at the start"),
    }

    def __init__(self, backbone: Backbone, *, way: int, **hparams: Any):
        super().__init__(backbone, way=way, **hparams)
        self.embedding = GaussianEmbedding(self.backbone, self.hparams["embedding_dim"],
                                           self.hparams["init_w"], self.hparams["init_b"])

    def learner(self, first_order: bool) -> l2l.algorithms.BaseLearner:
        """A clone of the embedding network that ``adapt`` updates, the meta-parameters untouched."""
        return learn2learn_algorithms().MAML(self.embedding, lr=self.hparams["inner_lr"],
                                             first_order=first_order).clone()

    def prototypes(self, embed: nn.Module, episode: Episode
                   ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Support embeddings (mean, variance) and the class posteriors (mean, variance)."""
        mu, var = embed(episode.support_x)
        mean, cvar = aggregate(mu, var, episode.support_y, episode.way, self.hparams["aggregation"])
        return mu, var, mean, cvar

    def support_loss(self, embed: nn.Module, episode: Episode) -> Tensor:
        """``J(S) = L_PR(S|z) + KL`` (Eq. 6.4), the KL only with ``kl`` on."""
        mu, var, mean, cvar = self.prototypes(embed, episode)
        loss = F.cross_entropy(log_density(mu, mean, cvar), episode.support_y)
        if self.hparams["kl"]:
            loss = loss + task_prior_kl(mu, var, episode.support_y, mean, cvar)
        return loss

    def logits(self, embed: nn.Module, episode: Episode) -> Tensor:
        """``log N(mu(x); mu_c, Sigma_c)`` for every query and class (Eq. 6.8)."""
        _, _, mean, cvar = self.prototypes(embed, episode)
        return log_density(embed(episode.query_x)[0], mean, cvar)

    def adapt(self, episode: Episode, steps: int, first_order: bool,
              record: list[float] | None = None) -> l2l.algorithms.BaseLearner:
        """``steps`` SGD steps of ``inner_lr`` on the support loss from the meta-parameters;
        ``record`` (if given) gets each loss value."""
        learner = self.learner(first_order)
        for _ in range(steps):
            loss = self.support_loss(learner, episode)
            check_finite(loss, "support loss", episode, DIVERGED)
            if record is not None:
                record.append(loss.item())
            learner.adapt(loss)
        return learner

    def meta_loss(self, episode: Episode) -> Tensor:
        """``L_PR(Q|z)`` of the adapted network (Eq. 6.5)."""
        learner = self.adapt(episode, self.inner_steps(), self.hparams["first_order"])
        return F.cross_entropy(self.logits(learner, episode), episode.query_y)

    def predict(self, episode: Episode) -> Prediction:
        objective: list[float] = []
        with torch.enable_grad():
            learner = self.adapt(episode, self.inner_steps(), True, objective)
            objective.append(self.support_loss(learner, episode).item())
            logits = self.logits(learner, episode)
        return Prediction(torch.softmax(logits.detach(), -1), {"inner_objective": objective})


@zoo.hookimpl
def zoo_register_methods(register):
    register(ABPML)
