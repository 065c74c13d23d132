"""Labelled streams for sequential (online) tasks, generated from embedded data (no download).

``digits-stream``: scikit-learn's 1,797 handwritten digits as 64 pixel intensities in [0, 1],
10 classes. Every fifth example (by index) is held out for scoring; a stream is a seeded ordering
of the others (see :mod:`zoo.tasks.sequential`). Its validation split never touches the test
examples: streams from the pool less the examples with index 1 mod 5, scored on those.

``diabetes-stream``: a regression stream (real-valued targets, ``classes = 0``): scikit-learn's
diabetes data (Efron et al. 2004), 442 patients, 10 baseline measurements (age, sex, body mass
index, blood pressure, six blood serum values) and a measure of disease progression one year
later. It ships inside scikit-learn (no download) and is read from scikit-learn's files without
importing it; the values read are checked against their SHA-256. Inputs and target are
standardised by the mean and standard deviation of the validation pool (the examples with index 2,
3 or 4 mod 5), which both splits' held-out examples are outside of. Held out and validation as for
``digits-stream``: 89 test examples, a stream pool of 353 (validation: a pool of 264, 89
scored). (The regression stream of Jones et al.'s code configurations, SARCOS, ships with no
installed package.)

``mnist-stream``: the protocol of Jones et al. (2024): pixels / 255, a stream
of the first 2,000 MNIST training images (in a seeded order), 500 further training images for
validation (scored after the same stream), and the first 1,000 test images for scoring. Files in
torchvision's layout, ``<data dir>/mnist/MNIST/raw/*-idx*-ubyte``, which torchvision downloads.
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor

from zoo.data.digits import sklearn_file
from zoo.errors import ChecksumError


@dataclass(frozen=True)
class StreamData:
    """Examples ``x [n, dim]`` with labels ``y [n]`` (class indices; real values when
    ``classes = 0``, a regression stream); ``pool`` (stream source) and ``held_out`` (scoring)
    index disjoint subsets; ``val_pool`` and ``val_held_out`` those of the validation split
    (disjoint from ``held_out``), when it has one."""

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
    def regression(self) -> bool:
        """Real-valued targets (``classes = 0``)."""
        return self.classes == 0

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


#: SHA-256 of the diabetes data as read, ``[442, 11]`` float64 little-endian (10 inputs, target).
DIABETES_SHA256 = "839c546b0b4ac02c2e6cbe5e5c92313cefa993446c9733e9b49477cc3f96e104"
DIABETES_FILES = ("diabetes_data_raw.csv.gz", "diabetes_target.csv.gz")


def load_diabetes_stream(data_dir=None, download: bool = True) -> StreamData:
    """scikit-learn's diabetes regression data as a stream, standardised; every fifth held out."""
    columns = []
    for name in DIABETES_FILES:
        with gzip.open(sklearn_file(name, "diabetes-stream"), mode="rt", encoding="utf-8") as f:
            columns.append(np.loadtxt(f).reshape(442, -1))
    data = np.ascontiguousarray(np.concatenate(columns, 1), dtype="<f8")
    digest = hashlib.sha256(data.tobytes()).hexdigest()
    if digest != DIABETES_SHA256:
        raise ChecksumError(f"data set 'diabetes-stream': scikit-learn's diabetes files read as "
                            f"SHA-256 {digest}, not {DIABETES_SHA256}; reinstall scikit-learn "
                            "(pip install --force-reinstall scikit-learn)")
    index = torch.arange(len(data))
    values = torch.as_tensor(data)
    basis = values[index % 5 > 1]
    values = (values - basis.mean(0)) / basis.std(0)
    return StreamData("diabetes-stream", values[:, :-1].float(), values[:, -1].float(), 0,
                      index[index % 5 != 0], index[index % 5 == 0], index[index % 5 > 1],
                      index[index % 5 == 1])
