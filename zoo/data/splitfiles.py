"""CloserLookFewShot's split files, so that the published GP few-shot splits carry over.

CloserLookFewShot (Chen et al., 2019), and DKT / the Pólya-Gamma GP classifiers after it, describe
each split by a JSON file ``{"label_names": [...], "image_names": [...], "image_labels": [...]}``:
``base.json`` (train), ``val.json`` and ``novel.json`` (test). ``image_labels`` index
``label_names``; the image names are paths on the machine that wrote the files, so they are
resolved here against the local data directory by the shortest trailing part that exists there
(``/home/x/CUB_200_2011/images/001.Black_footed_Albatross/a.jpg`` is found as
``<dir>/CUB_200_2011/images/001.Black_footed_Albatross/a.jpg`` or
``<dir>/001.Black_footed_Albatross/a.jpg``, whichever exists).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath

from zoo.errors import DataMissingError, ZooError

SPLIT_FILES = {"train": "base.json", "val": "val.json", "test": "novel.json"}


@dataclass(frozen=True)
class SplitFile:
    """One CloserLookFewShot split file."""

    label_names: list[str]
    image_names: list[str]
    image_labels: list[int]


def read_split_file(path: Path) -> SplitFile:
    """Parse and check a split file; errors name the file and what is wrong with it."""
    try:
        blob = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ZooError(f"cannot read split file {path}: {exc}") from exc
    keys = ("label_names", "image_names", "image_labels")
    if not isinstance(blob, dict) or any(k not in blob for k in keys):
        raise ZooError(f"split file {path} must be a JSON object with keys {list(keys)}")
    names, labels = blob["image_names"], blob["image_labels"]
    if len(names) != len(labels):
        raise ZooError(f"split file {path} has {len(names)} image_names but {len(labels)} "
                       "image_labels")
    bad = [y for y in labels if not (isinstance(y, int) and 0 <= y < len(blob["label_names"]))]
    if bad:
        raise ZooError(f"split file {path} has image label {bad[0]!r}, which is not an index "
                       f"into its {len(blob['label_names'])} label_names")
    return SplitFile(list(blob["label_names"]), list(names), list(labels))


class PathResolver:
    """Maps image names written on another machine to files under ``root``.

    The number of leading components to drop is found once per source directory (all images of a
    class share one), so resolving tens of thousands of names costs a few stat calls each.
    """

    def __init__(self, root: Path, described_by: str):
        self.root, self.described_by = root, described_by
        self._drop: dict[PurePath, int] = {}

    def __call__(self, name: str) -> Path:
        pure = PurePath(name.replace("\\", "/"))
        parent = pure.parent
        if parent in self._drop:
            return self.root.joinpath(*pure.parts[self._drop[parent]:])
        parts = pure.parts[1:] if pure.is_absolute() else pure.parts
        offset = 1 if pure.is_absolute() else 0
        for k in range(len(parts)):
            candidate = self.root.joinpath(*parts[k:])
            if candidate.is_file():
                self._drop[parent] = k + offset
                return candidate
        raise DataMissingError(
            f"image {name!r}, named in {self.described_by}, is not under {self.root} (looked for "
            f"every trailing part of its path, down to {pure.name!r}). Put the images there in "
            "the layout of the split files, or point --data-dir (or $ZOO_DATA) at the directory "
            "that holds them.")


def load_split_files(directory: Path, image_root: Path,
                     files: Mapping[str, str] = SPLIT_FILES
                     ) -> tuple[list[str], list[list[Path]], dict[str, list[int]]]:
    """Class names, image paths per class and split class lists from CloserLook split files.

    Classes are identified by label name across the files; a class in two splits is an error.
    """
    class_index: dict[str, int] = {}
    per_class: list[list[Path]] = []
    splits: dict[str, list[int]] = {}
    taken: set[int] = set()
    for split, filename in files.items():
        path = directory / filename
        sf = read_split_file(path)
        resolve = PathResolver(image_root, str(path))
        members: dict[int, None] = {}  # ordered set
        for name, label in zip(sf.image_names, sf.image_labels, strict=True):
            cname = sf.label_names[label]
            if cname not in class_index:
                class_index[cname] = len(per_class)
                per_class.append([])
            c = class_index[cname]
            if c not in members:
                if c in taken:
                    raise ZooError(f"class {cname!r} of {path} is also in another split file")
                members[c] = None
            per_class[c].append(resolve(name))
        splits[split] = list(members)
        taken.update(members)
    return list(class_index), per_class, splits


def has_split_files(directory: Path, files: Mapping[str, str] = SPLIT_FILES) -> bool:
    return all((directory / f).is_file() for f in files.values())
