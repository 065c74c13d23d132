"""``cub``: Caltech-UCSD Birds-200-2011 (Wah et al., 2011), 200 bird species, 11,788 photographs.

Files: ``<data dir>/cub/CUB_200_2011/images/<NNN.Species>/*.jpg``, extracted from the official
``CUB_200_2011.tgz`` (downloaded and md5-checked when missing). Split: CloserLookFewShot's, used
by DKT and the GP few-shot papers: with the 200 class folders in sorted order, classes 0, 2, 4, ...
(100) train, 1, 5, 9, ... (50) validation, 3, 7, 11, ... (50) test. If CloserLookFewShot's
``base.json``/``val.json``/``novel.json`` are in ``<data dir>/cub/`` they are used instead (the
same classes; their image order). Images: 84x84, ImageNet-normalised (see :mod:`zoo.data.images`).
"""

from __future__ import annotations

import os

from zoo.data.download import Resource, ensure_file, extract, missing
from zoo.data.images import IMAGE_SIZE, ImageFileDataset
from zoo.data.splitfiles import has_split_files, load_split_files
from zoo.paths import data_root

RESOURCE = Resource("CUB_200_2011.tgz",
                    "https://data.caltech.edu/records/65de6-vp158/files/CUB_200_2011.tgz",
                    md5="97eceeb196236b17998738112f37df78")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


def closer_look_split(n_classes: int) -> dict[str, list[int]]:
    """CloserLookFewShot's CUB class split over the sorted class folders."""
    return {"train": [i for i in range(n_classes) if i % 2 == 0],
            "val": [i for i in range(n_classes) if i % 4 == 1],
            "test": [i for i in range(n_classes) if i % 4 == 3]}


def load_cub(data_dir: str | os.PathLike | None = None, download: bool = True,
             augment: bool = False, image_size: int = IMAGE_SIZE) -> ImageFileDataset:
    """CUB-200-2011 with CloserLookFewShot's 100/50/50 class split, 84x84 RGB."""
    root = data_root(data_dir) / "cub"
    images = root / "CUB_200_2011" / "images"
    if not images.is_dir():
        if not download and not (root / RESOURCE.filename).exists():
            raise missing("CUB_200_2011/images/", root, "cub",
                          f"Download {RESOURCE.url} and extract it there, or allow downloads.")
        extract(ensure_file(RESOURCE, root, dataset="cub", download=download), root)
    if has_split_files(root):
        names, files, splits = load_split_files(root, root)
    else:
        folders = sorted(p for p in images.iterdir() if p.is_dir())
        names = [p.name for p in folders]
        files = [sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
                 for p in folders]
        splits = closer_look_split(len(folders))
    return ImageFileDataset("cub", files, names, splits, image_size=image_size, augment=augment)
