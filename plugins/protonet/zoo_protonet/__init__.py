"""Prototypical Networks (Snell, Swersky & Zemel, NeurIPS 2017) as a zoo plugin.

This package is the template for third-party plugins: one module with the method, one hook that
registers it, an entry point in ``pyproject.toml`` under the group ``zoo.plugins``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from zoo import Episode, Method, Prediction


class ProtoNet(Method):
    """Class prototypes are the mean support embeddings; logits are negative squared Euclidean
    distances from a query to each prototype."""

    name = "protonet"
    meta_loss_name = "query cross-entropy"
    any_way = True
    batches_episodes = True

    def logits(self, episode: Episode) -> Tensor:
        support = self.features(episode.support_x)
        query = self.features(episode.query_x)
        onehot = F.one_hot(episode.support_y, episode.way).to(support.dtype)
        prototypes = (onehot.T @ support) / onehot.sum(0)[:, None]
        return -torch.cdist(query, prototypes).pow(2)

    def meta_loss(self, episode: Episode) -> Tensor:
        return F.cross_entropy(self.logits(episode), episode.query_y)

    def predict(self, episode: Episode) -> Prediction:
        return Prediction(torch.softmax(self.logits(episode), dim=-1))


@zoo.hookimpl
def zoo_register_methods(register):
    register(ProtoNet)
