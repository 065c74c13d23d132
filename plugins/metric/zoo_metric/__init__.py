"""Classic few-shot baselines as zoo methods (ProtoNet lives in its own plugin, ``protonet``).

- ``feature-transfer``: a backbone pre-trained as an ordinary classifier over the training classes;
  at test a scikit-learn logistic regression on the support features (Chen et al., "A Closer Look
  at Few-shot Classification", ICLR 2019: "Baseline").
- ``baseline-pp``: the same with a cosine classifier, and at test a new cosine classifier
  fine-tuned on the support features as in Chen et al. ("Baseline++").
- ``matchingnet``: Matching Networks (Vinyals et al., NeurIPS 2016), with the full context
  embeddings (bidirectional LSTM over the support, attention LSTM for the queries) by default.
- ``relationnet``: Relation Networks (Sung et al., CVPR 2018): a learned relation score between a
  query's feature maps and each class's summed support maps, trained by mean squared error to
  one-hot.

Pre-training from episodes: the two pre-trained baselines train their backbone as an ordinary
classifier over the training classes through the core's class table
(:class:`zoo.families.ClassTable`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import zoo
from zoo import Episode, HParam, HyperParameterError, Method, Prediction, episode_generator
from zoo.backbones import Backbone, ConvNet, MaxPool2x2
from zoo.families import ClassTable


class CosineLinear(nn.Module):
    """``scale * cos(x, w_c)`` for every class row ``w_c`` (Baseline++'s classifier)."""

    def __init__(self, weight: Tensor, scale: float):
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.scale = scale

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * F.normalize(x, dim=-1) @ F.normalize(self.weight, dim=-1).T


class PretrainedClassifier(Method):
    """A backbone trained as a plain classifier over the training classes (see the module doc)."""

    any_way = True
    hyperparameters = {"num_classes": HParam(1000, ge=1, doc="rows of the pre-training head: at "
                                             "least the number of training classes")}

    def __init__(self, backbone: Backbone, *, way: int, **hparams: Any):
        super().__init__(backbone, way=way, **hparams)
        n = self.hparams["num_classes"]
        self.pretraining = ClassTable(backbone.feature_dim, n, method=self.name,
                                      head=self.make_head(backbone.feature_dim, n))

    def make_head(self, in_features: int, out_features: int) -> nn.Module:
        return nn.Linear(in_features, out_features)

    def meta_loss(self, episode: Episode) -> Tensor:
        return self.pretraining.loss(self.features, episode)


class FeatureTransfer(PretrainedClassifier):
    """Pre-trained features; at test a scikit-learn logistic regression (L2, inverse strength
    ``logreg_c``) fitted on the support features."""

    name = "feature-transfer"
    hyperparameters = {"logreg_c": HParam(1.0, gt=0, doc="inverse L2 strength of the logistic "
                                          "regression fitted on the support")}

    def predict(self, episode: Episode) -> Prediction:
        from sklearn.linear_model import LogisticRegression  # seconds to import: on first use

        support = self.features(episode.support_x).double().cpu().numpy()
        query = self.features(episode.query_x).double().cpu().numpy()
        clf = LogisticRegression(C=self.hparams["logreg_c"], max_iter=1000)
        clf.fit(support, episode.support_y.cpu().numpy())
        probs = np.zeros((len(query), episode.way))
        probs[:, clf.classes_] = clf.predict_proba(query)
        return Prediction(torch.as_tensor(probs, dtype=torch.float32,
                                          device=episode.query_x.device))


class BaselinePP(PretrainedClassifier):
    """Cosine-classifier pre-training; at test a new cosine classifier fine-tuned on the support
    features with Chen et al.'s recipe (SGD lr 0.01, momentum 0.9, dampening 0.9, weight decay
    1e-3, batches of 4, ``finetune_epochs`` passes), its initialisation and batch order drawn
    from the episode's generator."""

    name = "baseline-pp"
    hyperparameters = {
        "scale": HParam(10.0, gt=0, doc="temperature of the cosine classifier"),
        "finetune_epochs": HParam(100, ge=0, doc="passes over the support when fine-tuning at test"),
        "finetune_batch": HParam(4, ge=1, doc="support examples per fine-tuning step"),
    }

    def make_head(self, in_features: int, out_features: int) -> nn.Module:
        weight = torch.empty(out_features, in_features)
        nn.init.kaiming_uniform_(weight, a=5 ** 0.5)
        return CosineLinear(weight, self.hparams["scale"])

    def predict(self, episode: Episode) -> Prediction:
        support, query = self.features(episode.support_x), self.features(episode.query_x)
        g = episode_generator(episode)
        bound = 1.0 / support.shape[1] ** 0.5  # nn.Linear's initialisation, from the episode
        weight = (torch.rand(episode.way, support.shape[1], generator=g) * 2 - 1) * bound
        head = CosineLinear(weight.to(support.device), self.hparams["scale"])
        opt = torch.optim.SGD(head.parameters(), lr=0.01, momentum=0.9, dampening=0.9,
                              weight_decay=1e-3)
        n, batch = len(support), self.hparams["finetune_batch"]
        with torch.enable_grad():
            for _ in range(self.hparams["finetune_epochs"]):
                order = torch.randperm(n, generator=g).to(support.device)
                for i in range(0, n, batch):
                    pick = order[i:i + batch]
                    loss = F.cross_entropy(head(support[pick]), episode.support_y[pick])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
        return Prediction(torch.softmax(head(query).detach(), -1))


class MatchingNet(Method):
    """Matching Networks: ``p(y | x) = sum_i a(x, x_i) 1[y_i = y]`` with ``a`` a softmax over
    ``scale * cos(f(x), g(x_i))``; ``f`` and ``g`` are the full context embeddings when ``fce``."""

    name = "matchingnet"
    any_way = True
    hyperparameters = {
        "fce": HParam(True, doc="full context embeddings (LSTMs over support and queries)"),
        "scale": HParam(100.0, gt=0, doc="temperature of the cosine attention"),
    }

    def __init__(self, backbone: Backbone, *, way: int, **hparams: Any):
        super().__init__(backbone, way=way, **hparams)
        d = backbone.feature_dim
        if self.hparams["fce"]:
            self.support_lstm = nn.LSTM(d, d, batch_first=True, bidirectional=True)
            self.query_cell = nn.LSTMCell(d, d)

    def embed_support(self, s: Tensor) -> Tensor:
        """``g(x_i) = x_i + h_fwd_i + h_bwd_i`` over the support sequence (Vinyals et al., App. A.2)."""
        h = self.support_lstm(s[None])[0][0]
        d = s.shape[1]
        return s + h[:, :d] + h[:, d:]

    def embed_query(self, q: Tensor, g: Tensor) -> Tensor:
        """The attention LSTM: ``len(g)`` read steps over the support embeddings ``g``."""
        h, c = q, torch.zeros_like(q)
        r = torch.zeros_like(q)
        for _ in range(len(g)):
            h, c = self.query_cell(q, (h + r, c))
            h = h + q
            r = torch.softmax(h @ g.T, -1) @ g
        return h

    def log_probs(self, episode: Episode) -> Tensor:
        s, q = self.features(episode.support_x), self.features(episode.query_x)
        if self.hparams["fce"]:
            s = self.embed_support(s)
            q = self.embed_query(q, s)
        log_a = torch.log_softmax(
            self.hparams["scale"] * F.normalize(q, dim=-1) @ F.normalize(s, dim=-1).T, -1)
        mask = F.one_hot(episode.support_y, episode.way).T.bool()  # [way, n]
        return torch.logsumexp(log_a[:, None, :].masked_fill(~mask, float("-inf")), -1)

    def meta_loss(self, episode: Episode) -> Tensor:
        return F.nll_loss(self.log_probs(episode), episode.query_y)

    def predict(self, episode: Episode) -> Prediction:
        return Prediction(self.log_probs(episode).exp())


def _relation_block(in_channels: int, channels: int) -> nn.Sequential:
    """Sung et al.'s relation-module block: conv 3x3 (padding 1), BatchNorm, ReLU, 2x2 max-pool."""
    return nn.Sequential(nn.Conv2d(in_channels, channels, 3, padding=1), nn.BatchNorm2d(channels),
                         nn.ReLU(inplace=True), MaxPool2x2())


class RelationNet(Method):
    """Relation Networks: ``r(q, c) = g([f(q), sum_{i in c} f(x_i)])``, trained by mean squared
    error to one-hot; probabilities are the scores normalised over classes.

    On a ConvNet backbone (``conv4``, ``conv4s``) this is Sung et al.'s architecture: the embedding
    ``f`` keeps spatial maps (no max-pool in its last ``unpooled_blocks`` = 2 blocks; 64 x 7 x 7 on
    28 x 28 characters), the K support maps of a class are summed, and ``g`` is two conv blocks of
    ``relation_dim`` = 64 filters (3x3, BatchNorm, ReLU, 2x2 max-pool) on the channel-concatenated
    query and class maps, then a fully connected layer of 8 units, ReLU, one output, sigmoid. On a
    backbone that returns plain vectors ``g`` is a multi-layer perceptron (``relation_dim`` hidden,
    then 8 units) on the concatenated vectors.
    """

    name = "relationnet"
    any_way = True
    hyperparameters = {
        "relation_dim": HParam(64, ge=1, doc="filters (or hidden units) of the relation module"),
        "unpooled_blocks": HParam(2, ge=0, doc="last ConvNet blocks without max-pool"),
    }

    def __init__(self, backbone: Backbone, *, way: int, **hparams: Any):
        super().__init__(backbone, way=way, **hparams)
        h = self.hparams["relation_dim"]
        if isinstance(backbone, ConvNet):
            backbone.unpool_last(self.hparams["unpooled_blocks"])
            c, height, width = backbone.feature_shape
            if min(height, width) < 4:
                raise HyperParameterError(
                    f"{self.name}: the embedding's maps are {height}x{width}, too small for the "
                    "relation module's two 2x2 max-pools; raise unpooled_blocks or the image size")
            self.feature_shape: tuple[int, ...] = (c, height, width)
            convs = nn.Sequential(_relation_block(2 * c, h), _relation_block(h, h), nn.Flatten())
            flat = h * (height // 2 // 2) * (width // 2 // 2)
            self.relation = nn.Sequential(convs, nn.Linear(flat, 8), nn.ReLU(), nn.Linear(8, 1),
                                          nn.Sigmoid())
        else:
            d = backbone.feature_dim
            self.feature_shape = (d,)
            self.relation = nn.Sequential(nn.Linear(2 * d, h), nn.ReLU(), nn.Linear(h, 8),
                                          nn.ReLU(), nn.Linear(8, 1), nn.Sigmoid())

    def scores(self, episode: Episode) -> Tensor:
        """Relation scores ``[Q, way]`` in (0, 1)."""
        s, q = self.features(episode.support_x), self.features(episode.query_x)
        classes = F.one_hot(episode.support_y, episode.way).to(s.dtype).T @ s  # summed over shots
        n, way = len(q), episode.way
        q, classes = q.view(n, *self.feature_shape), classes.view(way, *self.feature_shape)
        pairs = torch.cat([q[:, None].expand(-1, way, *self.feature_shape),
                           classes[None].expand(n, -1, *self.feature_shape)], 2)
        return self.relation(pairs.flatten(0, 1)).view(n, way)

    def meta_loss(self, episode: Episode) -> Tensor:
        target = F.one_hot(episode.query_y, episode.way).to(episode.query_x.dtype)
        return F.mse_loss(self.scores(episode), target)

    def predict(self, episode: Episode) -> Prediction:
        r = self.scores(episode).clamp_min(torch.finfo(torch.float32).tiny)
        return Prediction(r / r.sum(-1, keepdim=True))


@zoo.hookimpl
def zoo_register_methods(register):
    for cls in (FeatureTransfer, BaselinePP, MatchingNet, RelationNet):
        register(cls)
