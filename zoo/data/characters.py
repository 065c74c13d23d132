"""Decoding handwritten-character scans (Omniglot's 105x105 PNGs) into the zoo's character format.

Every character set in the zoo is 28x28 grayscale with bright strokes (1.0) on a dark ground,
like ``glyphs``. Omniglot draws dark strokes on white, so images are inverted, then shrunk by
area averaging (each output pixel is the mean of the input pixels it covers), which keeps thin
strokes visible where nearest-neighbour sampling would drop them. Results are uint8 to keep the
decoded sets small in memory and on disk.
"""

from __future__ import annotations

import io
import math
from collections.abc import Collection, Iterable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from zoo.data.base import TensorDataset
from zoo.errors import ZooError

SIZE = 28
BATCH = 512


def decode_png(data: bytes, name: str) -> np.ndarray:
    """One scan as a float32 array in [0, 1] with strokes bright, or an error naming the file."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            gray = np.asarray(im.convert("L"), dtype=np.float32) / 255.0
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ZooError(f"cannot read image {name}: {exc}; delete the file (or the archive that "
                       "holds it) and download the data set again, or point --data-dir at an "
                       "intact copy") from exc
    return 1.0 - gray


def shrink(images: torch.Tensor, size: int = SIZE) -> torch.Tensor:
    """Float images ``[N, 1, H, W]`` in [0, 1] -> uint8 ``[N, 1, size, size]`` by area averaging."""
    small = F.interpolate(images, size=(size, size), mode="area")
    return (small.clamp_(0, 1) * 255).round_().to(torch.uint8)


def decode_all(items: Iterable[tuple[str, bytes]], size: int = SIZE) -> torch.Tensor:
    """Decode ``(name, png bytes)`` pairs into uint8 ``[N, 1, size, size]``, in the given order."""
    out, batch = [], []
    for name, data in items:
        batch.append(torch.from_numpy(decode_png(data, name)))
        if len(batch) == BATCH:
            out.append(_shrink_batch(batch, size))
            batch = []
    if batch:
        out.append(_shrink_batch(batch, size))
    if not out:
        return torch.zeros(0, 1, size, size, dtype=torch.uint8)
    return torch.cat(out)


def _shrink_batch(batch: list[torch.Tensor], size: int) -> torch.Tensor:
    shapes = {tuple(b.shape) for b in batch}
    if len(shapes) == 1:
        return shrink(torch.stack(batch)[:, None], size)
    return torch.cat([shrink(b[None, None], size) for b in batch])


def as_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 character images -> float32 in [0, 1]."""
    return images.float().div_(255.0)


def random_affine(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random small affine maps of ``[n, 1, H, W]`` float images (rotation +-10 deg, shear
    +-0.15, scale 0.85-1.05, shift +-1.5 px): the glyphs' drawers and Omniglot's distortions."""
    n = images.shape[0]

    def u(lo: float, hi: float) -> torch.Tensor:
        return lo + (hi - lo) * torch.rand(n, generator=generator)

    angle, shear = u(-10, 10) * math.pi / 180, u(-0.15, 0.15)
    sx, sy = u(0.85, 1.05), u(0.85, 1.05)
    tx, ty = u(-1.5, 1.5) * 2 / images.shape[-1], u(-1.5, 1.5) * 2 / images.shape[-1]
    cos, sin = torch.cos(angle), torch.sin(angle)
    # inverse map used by grid_sample: output pixel -> input location
    theta = torch.stack([torch.stack([cos / sx, (-sin + shear) / sx, tx], -1),
                         torch.stack([sin / sy, cos / sy, ty], -1)], 1).to(images.device)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


class CharacterDataset(TensorDataset):
    """Character images kept as uint8 (a quarter of the memory), handed out as float in [0, 1].

    With ``rotations=True`` every character also appears rotated by 90, 180 and 270 degrees as
    three further classes (the usual Omniglot protocol): class ``4 c + r`` is character ``c``
    rotated by ``r`` quarter turns counter-clockwise, and the ``splits`` given name characters,
    each of which brings its four classes into the split (``rotated_splits``: only those splits;
    the others keep each character upright, as Lake's protocol tests on). Rotation happens on
    gathering, so the stored set does not grow. ``distorted_splits``: the episodes of these splits
    see every image through a fresh :func:`random_affine` map, drawn from the episode's own
    generator (:meth:`augment`; a training episode is still a pure function of its seed).
    """

    def __init__(self, name: str, images: Tensor, labels: Tensor, class_names: Sequence[str],
                 splits: Mapping[str, Sequence[int]], rotations: bool = False,
                 rotated_splits: Collection[str] | None = None,
                 distorted_splits: Collection[str] = ()):
        super().__init__(name, images, labels, class_names, splits)
        self.distorted_splits = frozenset(distorted_splits)
        self.rotations = rotations
        if rotations:
            self.class_names = [f"{n}/rot{90 * r:03d}" for n in self.class_names for r in range(4)]
            self.class_sizes = self.class_sizes.repeat_interleave(4)
            turns = {k: range(4) if rotated_splits is None or k in rotated_splits else (0,)
                     for k in splits}
            self.splits = {k: [4 * c + r for c in v for r in turns[k]] for k, v in splits.items()}

    def augment(self, x: Tensor, split: str, generator: torch.Generator) -> Tensor:
        if split not in self.distorted_splits:
            return x
        return random_affine(x.flatten(0, 1), generator).unflatten(0, x.shape[:2])

    def gather(self, classes: Tensor, examples: Tensor) -> Tensor:
        if not self.rotations:
            return as_float(super().gather(classes, examples))
        turns = classes % 4
        x = super().gather(torch.div(classes, 4, rounding_mode="floor"), examples)
        for r in (1, 2, 3):
            pick = (turns == r).to(x.device)
            if pick.any():
                x[pick] = torch.rot90(x[pick], r, dims=(-2, -1))
        return as_float(x)
