"""Natural-image few-shot sets read from files (CUB, mini-ImageNet), with the standard transforms.

The transforms are those of CloserLookFewShot (Chen et al., 2019) and the GP few-shot work built
on it: evaluation resizes to 1.15 x 84 = 96 pixels, takes the centre 84x84 crop and normalises
with the ImageNet channel statistics; training augmentation (``augment=True``) is a random
resized 84x84 crop, colour jitter (brightness, contrast, saturation 0.4) and a horizontal flip.
Augmentation touches only the classes of the ``train`` split. Its random draws are seeded by the
episode's own class and example indices (inside a forked RNG, leaving the global one untouched),
so an augmented training episode is as reproducible as any other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from PIL import Image
from torch import Tensor

from zoo.data.base import FileDataset, read_image
from zoo.seeds import coordinate_seed

IMAGE_SIZE = 84
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
RESIZE_FACTOR = 1.15


def eval_transform(size: int = IMAGE_SIZE) -> Callable[[Image.Image], Tensor]:
    """Resize to ``1.15 size``, centre crop ``size``, ImageNet normalisation."""
    from torchvision import transforms as T

    return T.Compose([T.Resize(int(size * RESIZE_FACTOR)), T.CenterCrop(size), T.ToTensor(),
                      T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def train_transform(size: int = IMAGE_SIZE) -> Callable[[Image.Image], Tensor]:
    """Random resized crop, colour jitter, horizontal flip, ImageNet normalisation."""
    from torchvision import transforms as T

    return T.Compose([T.RandomResizedCrop(size), T.ColorJitter(0.4, 0.4, 0.4),
                      T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


class ImageFileDataset(FileDataset):
    """A :class:`FileDataset` of RGB images whose ``train`` classes may be augmented."""

    def __init__(self, name: str, files: Sequence[Sequence[Path]], class_names: Sequence[str],
                 splits: Mapping[str, Sequence[int]], image_size: int = IMAGE_SIZE,
                 augment: bool = False):
        super().__init__(name, files, class_names, splits, eval_transform(image_size),
                         image_size, in_channels=3)
        self.augmented = augment
        self.train_transform = train_transform(image_size)
        self._train_classes = set(self.splits.get("train", ())) if augment else set()

    def gather(self, classes: Tensor, examples: Tensor) -> Tensor:
        seed = coordinate_seed(classes.tolist(), examples.tolist())
        rows = []
        # torchvision's transforms draw from the global CPU generator: it alone is forked and
        # seeded (torch.manual_seed would also reseed, and not restore, every CUDA generator,
        # and costs ~0.3 ms a call on a machine without one)
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            for c, ex in zip(classes.tolist(), examples.tolist(), strict=True):
                transform = self.train_transform if c in self._train_classes else self.transform
                rows.append(torch.stack([transform(read_image(self.files[c][i], "RGB")) for i in ex]))
        return torch.stack(rows)
