"""``miniimagenet``: 100 ImageNet classes, 600 images each (Vinyals et al., 2016; Ravi & Larochelle's
64/16/20 class split).

There is no stable public source that the zoo could download and verify: the images are ImageNet
photographs under ImageNet's terms, and the copies in circulation (Google Drive archives, pickles)
come and go. Bring your own copy into ``<data dir>/miniimagenet/`` in either layout:

- CloserLookFewShot: ``base.json``, ``val.json``, ``novel.json`` (their image paths are resolved
  against ``<data dir>/miniimagenet/``, e.g. ``n01532829/n01532829_721.JPEG`` or
  ``train/n01532829/...``, whichever trailing part of the written path exists); or
- Ravi & Larochelle: ``train.csv``, ``val.csv``, ``test.csv`` (``filename,label`` rows) with the
  images in ``images/<filename>``.

Images: 84x84, ImageNet-normalised (see :mod:`zoo.data.images`).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from zoo.data.download import missing
from zoo.data.images import IMAGE_SIZE, ImageFileDataset
from zoo.data.splitfiles import has_split_files, load_split_files
from zoo.errors import ZooError
from zoo.paths import data_root

CSV_FILES = {"train": "train.csv", "val": "val.csv", "test": "test.csv"}
HOW = ("mini-ImageNet has no stable public download the zoo could verify: put CloserLookFewShot's "
       "base.json/val.json/novel.json and their images, or Ravi & Larochelle's train.csv/val.csv/"
       "test.csv with the images in images/, in that directory.")


def _read_csv(root: Path, filename: str) -> list[tuple[str, str]]:
    path = root / filename
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or [c.strip() for c in rows[0][:2]] != ["filename", "label"]:
        raise ZooError(f"{path} must start with the header 'filename,label' (Ravi & Larochelle's "
                       "split files)")
    return [(r[0], r[1]) for r in rows[1:] if r]


def load_miniimagenet(data_dir: str | os.PathLike | None = None, download: bool = True,
                      augment: bool = False, image_size: int = IMAGE_SIZE) -> ImageFileDataset:
    """mini-ImageNet from local files (no public source), 64/16/20 classes, 84x84 RGB."""
    root = data_root(data_dir) / "miniimagenet"
    if has_split_files(root):
        names, files, splits = load_split_files(root, root)
    elif all((root / f).is_file() for f in CSV_FILES.values()):
        index: dict[str, int] = {}
        files, splits = [], {}
        for split, filename in CSV_FILES.items():
            splits[split] = []
            for image, label in _read_csv(root, filename):
                if label not in index:
                    index[label] = len(files)
                    files.append([])
                    splits[split].append(index[label])
                elif index[label] not in splits[split]:
                    raise ZooError(f"class {label} of {filename} is also in another split file")
                path = root / "images" / image
                if not path.is_file():
                    raise missing(f"images/{image} (listed in {filename})", root, "miniimagenet",
                                  HOW)
                files[index[label]].append(path)
        names = list(index)
    else:
        raise missing("base.json/val.json/novel.json or train.csv/val.csv/test.csv", root,
                      "miniimagenet", HOW)
    return ImageFileDataset("miniimagenet", files, names, splits, image_size=image_size,
                            augment=augment)
