"""Image completion as regression (Garnelo et al. 2018; GMM-NP, Volpp et al. 2023, A.4 "MNIST"):
a task is one image, ``x`` a pixel's coordinates scaled to ``[-1, 1]^2``, ``y`` its intensity in
``[0, 1]`` plus Gaussian noise (std 0.25 as the paper; it adds noise to the context pixels only,
here every observed pixel is noisy so that context and targets are draws of one function); ``n``
pixels drawn without replacement.

- ``digits-completion``: scikit-learn's embedded digits (:mod:`zoo.data.digits`, no download),
  1,797 images split by a fixed permutation into 70% train, 10% validation, 20% test.
- ``mnist-completion``: MNIST from the data directory in torchvision's layout
  (``<data dir>/mnist/MNIST/raw``), read only when present (never downloaded): the 60,000 training
  images, the last 5,000 of them for validation, and the 10,000 test images.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
from torch import Tensor

from zoo.data.functions import FunctionFamily


@dataclass(frozen=True)
class ImageCompletion(FunctionFamily):
    """Images ``[M, H, W]`` in ``[0, 1]`` per split; a task is one image of the split."""

    images: dict[str, Tensor] = field(default_factory=dict, compare=False, repr=False)

    @property
    def splits(self) -> dict[str, tuple[int, ...]]:  # type: ignore[override]
        return {k: (len(v),) for k, v in self.images.items() if len(v)}

    def draw(self, g: torch.Generator, n: int, split: str = "train"
             ) -> tuple[Tensor, Tensor, dict[str, float]]:
        pool = self.images[split]
        index = int(torch.randint(0, len(pool), (), generator=g))
        h, w = pool.shape[1:]
        if not 0 < n <= h * w:
            raise ValueError(f"{self.name}: {n} pixels asked of a {h}x{w} image; use 1..{h * w}")
        pixels = torch.randperm(h * w, generator=g)[:n]
        rows, cols = pixels // w, pixels % w
        x = torch.stack([2 * rows / (h - 1) - 1, 2 * cols / (w - 1) - 1], -1).float()
        y = pool[index].flatten()[pixels, None].double()
        y = y + self.noise * torch.randn((n, 1), generator=g, dtype=torch.float64)
        return x, y.float(), {"image": float(index)}


def load_digits_completion(data_dir=None, download: bool = True, image_size: int = 28,
                           noise: float = 0.25) -> ImageCompletion:
    """Completion of the embedded digits (70/10/20% train/val/test images)."""
    from zoo.data.digits import load_digits

    images = load_digits(image_size=image_size).images[:, 0]
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
    a, b = int(0.7 * len(images)), int(0.8 * len(images))
    splits = {"train": images[order[:a]], "val": images[order[a:b]], "test": images[order[b:]]}
    return ImageCompletion("digits-completion", 2, 1, float(noise), images=splits)


def load_mnist_completion(data_dir: str | os.PathLike | None = None, download: bool = True,
                          noise: float = 0.25) -> ImageCompletion:
    """Completion of MNIST images read from the data directory (never downloaded: ``download``
    is accepted for the loader interface and ignored)."""
    from zoo.data.mnist import load_mnist

    train_set, test_set = load_mnist(data_dir, "mnist-completion", download=False)
    train = train_set.data.float() / 255
    test = test_set.data.float() / 255
    splits = {"train": train[:-5000], "val": train[-5000:], "test": test}
    return ImageCompletion("mnist-completion", 2, 1, float(noise), images=splits)
