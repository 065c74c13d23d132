"""The MAML family as zoo methods, through learn2learn's ``MAML`` and ``MetaSGD`` (clone/adapt).

- ``maml``: second-order MAML (Finn, Abbeel & Levine, ICML 2017), every weight adapted.
- ``fomaml``: first-order MAML: the inner gradients are constants, so the meta-gradient is the
  query-loss gradient at the adapted weights; no second-order graph is ever built.
- ``metasgd``: Meta-SGD (Li et al. 2017): a meta-learned learning rate per weight, one inner step.
- ``anil``: ANIL (Raghu et al., ICLR 2020): only the ``way``-output head is adapted; the backbone's
  features are computed once per set and the inner loop never differentiates through it.

Every method puts a linear head of ``way`` outputs on the host's backbone and normalises batch
norm with batch statistics (:func:`zoo.backbones.use_batch_statistics`), as the MAML papers do.
At test the inner loop runs first-order (the meta-gradient is not needed there).

The inner-loop base, the published settings of each protocol and ``meta_batch`` live in the core
(:class:`zoo.families.InnerLoopMethod`); outer Adam learning rate 1e-3 throughout, as published.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import zoo
from zoo import Episode, Prediction, check_finite
from zoo.backbones import Backbone
from zoo.families import (
    DIVERGED,
    InnerLoopMethod,
    learn2learn_algorithms,
    published_with_steps,
    require_learn2learn,
)

if TYPE_CHECKING:
    import learn2learn as l2l

require_learn2learn("bayes-meta-zoo-maml")


def _adapt(learner: l2l.algorithms.BaseLearner, support: Tensor, episode: Episode, steps: int,
           record: list[float] | None) -> l2l.algorithms.BaseLearner:
    """``steps`` learn2learn steps of the cross-entropy of ``learner(support)`` against the support
    labels; ``record`` (if given) gets each loss value."""
    for _ in range(steps):
        loss = F.cross_entropy(learner(support), episode.support_y)
        check_finite(loss, "support loss", episode, DIVERGED)
        if record is not None:
            record.append(loss.item())
        learner.adapt(loss)
    return learner


class MAML(InnerLoopMethod):
    """Second-order MAML over every weight of backbone + head, via ``l2l.algorithms.MAML``."""

    name = "maml"
    first_order: ClassVar[bool] = False

    def __init__(self, backbone: Backbone, *, way: int, **hparams: Any):
        super().__init__(backbone, way=way, **hparams)
        self.head = nn.Linear(backbone.feature_dim, way)

    def learner(self, first_order: bool) -> l2l.algorithms.BaseLearner:
        """A fresh clone of backbone + head that ``adapt`` updates without touching the originals."""
        net = nn.Sequential(self.backbone, self.head)
        return learn2learn_algorithms().MAML(net, lr=self.hparams["inner_lr"],
                                             first_order=first_order).clone()

    def adapt(self, learner: l2l.algorithms.BaseLearner, episode: Episode, steps: int,
              record: list[float] | None = None) -> l2l.algorithms.BaseLearner:
        """``steps`` gradient steps of the support cross-entropy; ``record`` gets each value."""
        return _adapt(learner, episode.support_x, episode, steps, record)

    def meta_loss(self, episode: Episode) -> Tensor:
        learner = self.adapt(self.learner(self.first_order), episode, self.inner_steps())
        return F.cross_entropy(learner(episode.query_x), episode.query_y)

    def predict(self, episode: Episode) -> Prediction:
        objective: list[float] = []
        with torch.enable_grad():
            learner = self.adapt(self.learner(True), episode, self.inner_steps(), objective)
            final = F.cross_entropy(learner(episode.support_x), episode.support_y)
            logits = learner(episode.query_x)
        objective.append(final.item())
        return Prediction(torch.softmax(logits.detach(), -1), {"inner_objective": objective})


class FOMAML(MAML):
    """First-order MAML: same inner loop, no second-order terms in the meta-gradient."""

    name = "fomaml"
    first_order = True


class MetaSGD(MAML):
    """Meta-SGD: per-weight inner learning rates, meta-learned, initialised at ``inner_lr``; one
    inner step in training and at test, as in Li et al. (2017)."""

    name = "metasgd"
    published = published_with_steps(1)

    def __init__(self, backbone: Backbone, *, way: int, **hparams: Any):
        super().__init__(backbone, way=way, **hparams)
        lr = self.hparams["inner_lr"]
        self.inner_lrs = nn.ParameterList(
            [nn.Parameter(torch.full_like(p, lr)) for p in self._net().parameters()])

    def _net(self) -> nn.Module:
        return nn.Sequential(self.backbone, self.head)

    def learner(self, first_order: bool) -> l2l.algorithms.BaseLearner:
        return learn2learn_algorithms().MetaSGD(self._net(), lrs=self.inner_lrs,
                                                first_order=first_order).clone()


class ANIL(InnerLoopMethod):
    """ANIL: the backbone is meta-learned by the outer loop only; the inner loop adapts the head
    (second-order through the head, which is cheap)."""

    name = "anil"

    def __init__(self, backbone: Backbone, *, way: int, **hparams: Any):
        super().__init__(backbone, way=way, **hparams)
        self.head = nn.Linear(backbone.feature_dim, way)

    def adapt_head(self, support: Tensor, episode: Episode, first_order: bool, steps: int,
                   record: list[float] | None = None) -> l2l.algorithms.BaseLearner:
        head = learn2learn_algorithms().MAML(self.head, lr=self.hparams["inner_lr"],
                                             first_order=first_order).clone()
        return _adapt(head, support, episode, steps, record)

    def meta_loss(self, episode: Episode) -> Tensor:
        head = self.adapt_head(self.features(episode.support_x), episode, False, self.inner_steps())
        return F.cross_entropy(head(self.features(episode.query_x)), episode.query_y)

    def predict(self, episode: Episode) -> Prediction:
        support, query = self.features(episode.support_x), self.features(episode.query_x)
        objective: list[float] = []
        with torch.enable_grad():
            head = self.adapt_head(support, episode, True, self.inner_steps(), objective)
            objective.append(F.cross_entropy(head(support), episode.support_y).item())
            logits = head(query)
        return Prediction(torch.softmax(logits.detach(), -1), {"inner_objective": objective})


@zoo.hookimpl
def zoo_register_methods(register):
    for cls in (MAML, FOMAML, MetaSGD, ANIL):
        register(cls)
