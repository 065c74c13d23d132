"""scikit-learn's handwritten digits (UCI optdigits test set): a real cross-domain target, no download.

1,797 8x8 images of 10 classes, upsampled to 28x28 with strokes bright on a dark ground like the
zoo's other character sets. All ten classes are in the ``test`` split: the set exists to score
models trained elsewhere.

The file is read where scikit-learn installs it, as ``sklearn.datasets.load_digits`` reads it
(``np.loadtxt`` of the gzipped CSV), without importing scikit-learn: its import (SciPy's stats
and more) took seconds, far longer than reading 1,797 rows.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from zoo.data.base import TensorDataset
from zoo.errors import ZooError


def sklearn_file(name: str, dataset: str) -> Path:
    """``sklearn/datasets/data/<name>`` of the installed scikit-learn (not imported); the error
    names the zoo's ``dataset`` that needs it."""
    spec = importlib.util.find_spec("sklearn")
    path = (Path(spec.origin).parent / "datasets" / "data" / name
            if spec is not None and spec.origin else None)
    if path is None or not path.exists():
        raise ZooError(f"data set {dataset!r} is scikit-learn's: install scikit-learn "
                       "(pip install scikit-learn)")
    return path


def digits_file() -> Path:
    """``sklearn/datasets/data/digits.csv.gz`` of the installed scikit-learn (not imported)."""
    return sklearn_file("digits.csv.gz", "digits")


def load_digits(data_dir=None, download: bool = True, image_size: int = 28) -> TensorDataset:
    """scikit-learn's handwritten digits, 10 classes, all in the test split (cross-domain target)."""
    with gzip.open(digits_file(), mode="rt", encoding="utf-8") as f:
        data = np.loadtxt(f, delimiter=",")
    images, target = data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int, copy=False)
    x = torch.as_tensor(images, dtype=torch.float32)[:, None] / 16.0
    x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    y = torch.as_tensor(target, dtype=torch.long)
    return TensorDataset("digits", x.clamp_(0, 1), y, [str(d) for d in range(10)],
                         {"test": list(range(10))})
