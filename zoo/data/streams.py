"""Labelled streams for sequential (online) tasks, generated from embedded data (no download).

``digits-stream``: scikit-learn's 1,797 handwritten digits as 64 pixel intensities in [0, 1],
10 classes. Every fifth example (by index) is held out for scoring; a stream is a seeded ordering
of the others (see :mod:`zoo.tasks.sequential`). Its validation split never touches the test
examples: streams from the pool less the examples with index 1 mod 5, scored on those.

``mnist-stream``: the protocol of Jones et al. (2024): pixels / 255, a stream
of the first 2,000 MNIST training images (in a seeded order), 500 further training images for
validation (scored after the same stream), and the first 1,000 test images for scoring. Files in
torchvision's layout, ``<data dir>/mnist/MNIST/raw/*-idx*-ubyte``, which torchvision downloads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor


@dataclass(frozen=True)
class StreamData:
    """Examples ``x [n, dim]`` with labels ``y [n]``; ``pool`` (stream source) and ``held_out``
    (scoring) index disjoint subsets; ``val_pool`` and ``val_held_out`` those of the validation
    split (disjoint from ``held_out``), when it has one."""

    name: str
    x: Tensor
    y: Tensor
    classes: int
    pool: Tensor
    held_out: Tensor
    val_pool: Tensor | None = None
    val_held_out: Tensor | None = None

    @property
    def splits(self) -> dict[str, tuple[int, ...]]:
        return {"test": (0,), **({"val": (0,)} if self.val_pool is not None else {})}

    def indices(self, split: str) -> tuple[Tensor, Tensor]:
        """``(pool, held_out)`` of ``split`` (``"test"`` or ``"val"``)."""
        if split == "val" and self.val_pool is not None:
            return self.val_pool, self.val_held_out
        return self.pool, self.held_out

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
    return StreamData("digits-stream", x, y, 10, index[index % 5 != 0], index[index % 5 == 0],
                      index[index % 5 > 1], index[index % 5 == 1])


MNIST_STREAM, MNIST_VAL, MNIST_TEST = 2000, 500, 1000


def load_mnist_stream(data_dir=None, download: bool = True) -> StreamData:
    """MNIST as Jones et al. (2024) stream it: 2,000 training images, 500 validation, 1,000 test."""
    from zoo.data.mnist import load_mnist

    train, test = load_mnist(data_dir, "mnist-stream", download)
    n_train = MNIST_STREAM + MNIST_VAL
    x = torch.cat([train.data[:n_train], test.data[:MNIST_TEST]]).reshape(-1, 784).float() / 255
    y = torch.cat([train.targets[:n_train], test.targets[:MNIST_TEST]]).long()
    index = torch.arange(len(y))
    pool, val = index[:MNIST_STREAM], index[MNIST_STREAM:n_train]
    return StreamData("mnist-stream", x, y, 10, pool, index[n_train:], pool, val)
