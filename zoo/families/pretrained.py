"""Pre-training a backbone from episodes as an ordinary classifier over the training classes
(Chen et al., "A Closer Look at Few-shot Classification", ICLR 2019: the "Baseline" features).

The runner only hands methods episodes, so a :class:`ClassTable` keeps a class table: each global
class name (``episode.info["classes"]``) gets the next free row of a linear head of fixed capacity
``num_classes`` the first time it is seen, and every training episode (support and query
together) is one mini-batch of supervised classification over all rows. The table is module state
(saved in checkpoints via ``get_extra_state``); more training classes than ``num_classes`` is an
error that says to raise it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.episode import Episode
from zoo.errors import EpisodeError, HyperParameterError


class ClassTable(nn.Module):
    """A linear head over the training classes and the table of their rows."""

    def __init__(self, in_features: int, num_classes: int, *, method: str,
                 head: nn.Module | None = None):
        super().__init__()
        self.method, self.capacity = method, num_classes
        self.classifier = head if head is not None else nn.Linear(in_features, num_classes)
        self.class_index: dict[str, int] = {}

    def get_extra_state(self) -> dict[str, Any]:
        return {"classes": sorted(self.class_index, key=self.class_index.__getitem__)}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.class_index = {name: i for i, name in enumerate(state["classes"])}

    def global_labels(self, episode: Episode, labels: Tensor) -> Tensor:
        """Episode labels ``0..way-1`` mapped to rows of the head, growing the class table."""
        names = episode.info.get("classes")
        if names is None or len(names) != episode.way:
            raise EpisodeError(f"{self.method} pre-trains on global classes but episode "
                               f"{episode.id} has no info['classes'] (one name per way); sample "
                               "it with zoo.EpisodeSampler")
        for name in names:
            if name not in self.class_index:
                if len(self.class_index) == self.capacity:
                    raise HyperParameterError(
                        f"{self.method}: more than num_classes={self.capacity} training classes "
                        f"seen (episode {episode.id}); raise num_classes to at least the number "
                        "of training classes")
                self.class_index[name] = len(self.class_index)
        rows = torch.tensor([self.class_index[n] for n in names], device=labels.device)
        return rows[labels]

    def loss(self, features: Callable[[Tensor], Tensor], episode: Episode) -> Tensor:
        """Cross-entropy of the head on ``features`` of the whole episode (support and query)."""
        x = torch.cat([episode.support_x, episode.query_x])
        y = self.global_labels(episode, torch.cat([episode.support_y, episode.query_y]))
        return F.cross_entropy(self.classifier(features(x)), y)
