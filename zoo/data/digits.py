"""scikit-learn's handwritten digits (UCI optdigits test set): a real cross-domain target, no download.

1,797 8x8 images of 10 classes, upsampled to 28x28 with strokes bright on a dark ground like the
zoo's other character sets. All ten classes are in the ``test`` split: the set exists to score
models trained elsewhere.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.data.base import TensorDataset


def load_digits(data_dir=None, download: bool = True, image_size: int = 28) -> TensorDataset:
    """scikit-learn's handwritten digits, 10 classes, all in the test split (cross-domain target)."""
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    x = torch.as_tensor(bunch.images, dtype=torch.float32)[:, None] / 16.0
    x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    y = torch.as_tensor(bunch.target, dtype=torch.long)
    return TensorDataset("digits", x.clamp_(0, 1), y, [str(d) for d in range(10)],
                         {"test": list(range(10))})
