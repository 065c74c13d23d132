"""Labelled streams for sequential (online) tasks, generated from embedded data (no download).

``digits-stream``: scikit-learn's 1,797 handwritten digits as 64 pixel intensities in [0, 1],
10 classes. Every fifth example (by index) is held out for scoring; a stream is a seeded ordering
of the others (see :mod:`zoo.tasks.sequential`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor


@dataclass(frozen=True)
class StreamData:
    """Examples ``x [n, dim]`` with labels ``y [n]``; ``pool`` (stream source) and ``held_out``
    (scoring) index disjoint subsets."""

    name: str
    x: Tensor
    y: Tensor
    classes: int
    pool: Tensor
    held_out: Tensor

    splits = {"test": (0,)}

    @property
    def dim(self) -> int:
        return self.x.shape[1]

    @property
    def device(self) -> torch.device:
        return self.x.device

    def to(self, device: torch.device | str) -> StreamData:
        return replace(self, x=self.x.to(device), y=self.y.to(device))


def load_digits_stream(data_dir=None, download: bool = True) -> StreamData:
    """scikit-learn's handwritten digits, 64 pixels in [0, 1]; every fifth example held out."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.as_tensor(bunch.data, dtype=torch.float32) / 16.0
    y = torch.as_tensor(bunch.target, dtype=torch.long)
    index = torch.arange(len(y))
    return StreamData("digits-stream", x, y, 10, index[index % 5 != 0], index[index % 5 == 0])
