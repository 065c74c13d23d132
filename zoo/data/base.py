"""What a few-shot data set is: classes with fixed split lists, and a way to gather examples.

Two implementations cover every data set in the zoo: :class:`TensorDataset` keeps all images in
one tensor (small sets; movable to the GPU so episodes are sampled on the device) and
:class:`FileDataset` reads image files on demand (CUB, mini-ImageNet).
"""

from __future__ import annotations

import hashlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from zoo.errors import EpisodeError, ZooError

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")


def cached_blob(path: Path, build: Callable[[], dict]) -> dict:
    """The tensors ``build()`` makes, saved at ``path`` with the SHA-256 of the file beside it
    (``path.sha256``). A cache whose bytes do not match that digest (flipped or truncated) or that
    cannot be read is rebuilt with a warning that names it: a derived file is cheap to remake and
    must never be used when it is not what was written. A cache without a digest (an older zoo's,
    or a write killed in between) is used if it reads, and its digest written."""
    from zoo.io import atomic_save, atomic_write_text, load_checkpoint

    digest_path = path.with_name(path.name + ".sha256")
    if path.exists():
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        stored = digest_path.read_text().strip() if digest_path.exists() else None
        problem = "does not match its stored digest"
        if stored in (None, digest):
            try:
                blob = load_checkpoint(path)
            except ZooError as exc:
                problem = str(exc)
            else:
                if stored is None:
                    atomic_write_text(digest_path, digest + "\n")
                return blob
        log.warning("cache %s %s; rebuilding it", path, problem)
    blob = build()
    atomic_save(blob, path)
    atomic_write_text(digest_path, hashlib.sha256(path.read_bytes()).hexdigest() + "\n")
    return blob


class FewShotDataset(ABC):
    """Classes with examples, and the fixed class lists of each split.

    Subclasses set ``name``, ``in_channels``, ``image_size``, ``class_names`` (every class, in a
    fixed order), ``class_sizes`` (LongTensor, examples per class) and ``splits`` (split name ->
    class indices), and implement :meth:`gather`.
    """

    name: str
    in_channels: int
    image_size: int
    class_names: list[str]
    class_sizes: Tensor
    splits: Mapping[str, Sequence[int]]

    def split_classes(self, split: str) -> Tensor:
        """The split's class indices (a tensor made once per split and list of classes: every
        sampler of a suite of many small cells asks; read only)."""
        if split not in self.splits:
            raise EpisodeError(f"data set {self.name!r} has no split {split!r}; "
                               f"its splits are {sorted(self.splits)}")
        classes = self.splits[split]
        cache = self.__dict__.setdefault("_split_tensors", {})
        made = cache.get(split)
        if made is None or made[0] is not classes or len(made[1]) != len(classes):
            made = cache[split] = (classes, torch.as_tensor(list(classes), dtype=torch.long))
        return made[1]

    @abstractmethod
    def gather(self, classes: Tensor, examples: Tensor) -> Tensor:
        """Images ``[way, k, C, H, W]`` for class indices ``[way]`` and example indices ``[way, k]``."""

    def augment(self, x: Tensor, split: str, generator: torch.Generator) -> Tensor:
        """An episode's images ``[way, k, C, H, W]`` of ``split`` as its training sees them, drawn
        with the episode's own ``generator`` (after its classes and examples, so an episode is
        still a pure function of its seed): unchanged, by default. (Image sets read from files
        augment while decoding instead, before their tensors exist: :mod:`zoo.data.images`.)"""
        return x

    def fixed_episodes(self, split: str) -> list | None:
        """For evaluation protocols made of fixed, published episodes (Lake's one-shot runs):
        the list of :class:`~zoo.Episode`; ``None`` (the default) for sampled episodes."""
        return None

    def to(self, device: torch.device | str) -> FewShotDataset:
        """Move what can be moved to ``device`` (in place); file-backed sets stay on the host."""
        return self

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def describe(self) -> dict:
        return {"name": self.name, "image_size": self.image_size, "in_channels": self.in_channels,
                "classes": {s: len(c) for s, c in self.splits.items()}}


class TensorDataset(FewShotDataset):
    """All examples in one tensor, sorted by class: class ``c`` is rows ``offsets[c]:offsets[c+1]``."""

    def __init__(self, name: str, images: Tensor, labels: Tensor, class_names: Sequence[str],
                 splits: Mapping[str, Sequence[int]]):
        if images.ndim != 4:
            raise ValueError(f"images must be [N, C, H, W], got shape {tuple(images.shape)}")
        order = torch.argsort(labels, stable=True)
        self.images, labels = images[order].contiguous(), labels[order]
        self.name, self.class_names = name, list(class_names)
        self.in_channels, self.image_size = images.shape[1], images.shape[-1]
        self.class_sizes = torch.bincount(labels, minlength=len(self.class_names))
        self.offsets = torch.cat([torch.zeros(1, dtype=torch.long), self.class_sizes.cumsum(0)])
        self.splits = {k: list(v) for k, v in splits.items()}

    def gather(self, classes: Tensor, examples: Tensor) -> Tensor:
        rows = self.offsets.to(examples.device)[classes][:, None] + examples
        return self.images[rows.to(self.images.device)]

    def to(self, device: torch.device | str) -> TensorDataset:
        self.images = self.images.to(device)
        return self

    @property
    def device(self) -> torch.device:
        return self.images.device


def read_image(path: Path, mode: str) -> Image.Image:
    """Open an image file, or say which file is broken and what to do."""
    try:
        with Image.open(path) as im:
            return im.convert(mode)
    except (UnidentifiedImageError, OSError) as exc:
        raise ZooError(f"cannot read image {path}: {exc}; delete it and download the data set "
                       "again, or point --data-dir at an intact copy") from exc


class FileDataset(FewShotDataset):
    """Examples read from image files on demand, through a per-protocol transform."""

    def __init__(self, name: str, files: Sequence[Sequence[Path]], class_names: Sequence[str],
                 splits: Mapping[str, Sequence[int]], transform: Callable[[Image.Image], Tensor],
                 image_size: int, in_channels: int = 3):
        self.name, self.files, self.class_names = name, [list(f) for f in files], list(class_names)
        self.class_sizes = torch.tensor([len(f) for f in self.files], dtype=torch.long)
        self.splits = {k: list(v) for k, v in splits.items()}
        self.transform, self.image_size, self.in_channels = transform, image_size, in_channels

    def gather(self, classes: Tensor, examples: Tensor) -> Tensor:
        mode = "L" if self.in_channels == 1 else "RGB"
        rows = [torch.stack([self.transform(read_image(self.files[int(c)][int(i)], mode))
                             for i in ex]) for c, ex in zip(classes, examples)]
        return torch.stack(rows)
