"""``omniglot``: the full Omniglot set (Lake et al., Science 2015), 1623 characters of 50 alphabets.

Files: torchvision's ``images_background.zip`` and ``images_evaluation.zip`` (same URLs and md5
digests as ``torchvision.datasets.Omniglot``), looked up in ``<data dir>/omniglot/`` or in
torchvision's ``<data dir>/omniglot/omniglot-py/``, downloaded (checksummed) when missing. The
zips are read in place, never extracted; the decoded 28x28 images are cached as one uint8 tensor
under :func:`~zoo.paths.cache_root`, keyed by the archives' digests.

Protocols (fixed here, never reshuffled):

- ``"vinyals"`` (default): the split of Vinyals et al. (2016) as distributed with Snell et al.'s
  Prototypical Networks and used by CloserLookFewShot. Omniglot numbers its characters 1..1623
  (the ``NNNN`` of every ``NNNN_DD.png``: background alphabets, then evaluation alphabets, each
  in alphabetical order). Test: characters 1201-1623 (423: the last four of Gurmukhi and 13
  evaluation alphabets). Validation: the background alphabets Armenian, Bengali, Early_Aramaic,
  Hebrew and Mkhedruli_(Georgian) (172 characters). Train: the other 1028 of characters 1-1200.
  With ``rotations=True`` (default) each character and its 90/180/270-degree rotations are four
  classes: 4112 / 688 / 1692 classes, as in those papers.
- ``"no-latin"``: the base set of CloserLookFewShot's Omniglot -> EMNIST cross-domain protocol:
  every character except the Latin alphabet's, all in ``train`` (no rotations by default); the
  ``emnist`` data set supplies validation and test.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from zoo.data.base import cached_blob
from zoo.data.characters import SIZE, CharacterDataset, decode_all
from zoo.data.download import Resource, ensure_file, file_digest
from zoo.errors import ZooError
from zoo.paths import cache_root, data_root

log = logging.getLogger(__name__)

DECODE_VERSION = 1
MEMBER_RE = re.compile(
    r"^(?:.*/)?(?P<alphabet>[^/]+)/(?P<character>character\d+)/(?P<file>[^/]+\.png)$")
VINYALS_TEST_FROM_ID = 1201
VINYALS_VAL_ALPHABETS = ("Armenian", "Bengali", "Early_Aramaic", "Hebrew", "Mkhedruli_(Georgian)")


@functools.cache
def resources() -> dict[str, Resource]:
    """The two archives, with the URL and md5 that torchvision publishes for them."""
    from torchvision.datasets import Omniglot

    return {part: Resource(f"{part}.zip", f"{Omniglot.download_url_prefix}/{part}.zip",
                           md5=Omniglot.zips_md5[part])
            for part in ("images_background", "images_evaluation")}


@dataclass
class DecodedZip:
    """The characters of one Omniglot zip: images uint8 ``[N, 1, S, S]`` sorted by character."""

    images: torch.Tensor
    labels: torch.Tensor
    alphabets: list[str]
    characters: list[str]  # "Alphabet/characterNN"
    ids: list[int]  # Omniglot's character number, from the file names (0 where absent)

    def to_blob(self) -> dict:
        return {"images": self.images, "labels": self.labels, "alphabets": self.alphabets,
                "characters": self.characters, "ids": self.ids}


def read_zip(path: Path, size: int = SIZE) -> DecodedZip:
    """Decode every ``<Alphabet>/characterNN/*.png`` in an Omniglot zip, in sorted order."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ZooError(f"cannot read archive {path}: {exc}; delete it and download it again, or "
                       "point --data-dir at an intact copy") from exc
    with zf:
        members: dict[tuple[str, str], list[str]] = {}
        for name in zf.namelist():
            m = MEMBER_RE.match(name)
            if m:
                members.setdefault((m["alphabet"], m["character"]), []).append(name)
        if not members:
            raise ZooError(f"{path} holds no <Alphabet>/characterNN/*.png images; is it an "
                           "Omniglot archive?")
        keys = sorted(members)
        order = [(k, n) for k in keys for n in sorted(members[k])]
        images = decode_all((f"{path}:{n}", zf.read(n)) for _, n in order)
    index = {k: i for i, k in enumerate(keys)}
    labels = torch.tensor([index[k] for k, _ in order], dtype=torch.long)
    ids = [_character_id(members[k]) for k in keys]
    return DecodedZip(images, labels, [a for a, _ in keys], [f"{a}/{c}" for a, c in keys],
                      ids)


def _character_id(files: Sequence[str]) -> int:
    stem = Path(sorted(files)[0]).stem
    head = stem.split("_", 1)[0]
    return int(head) if head.isdigit() else 0


def cached_zip(path: Path, resource: Resource | None, size: int = SIZE) -> DecodedZip:
    """:func:`read_zip`, cached under ``cache_root()`` by the archive's digest."""
    algorithm, digest = resource.digest if resource and resource.digest else ("sha256", None)
    digest = digest or file_digest(path, algorithm)
    cache = cache_root() / f"omniglot-{path.stem}-{digest[:16]}-{size}px-v{DECODE_VERSION}.pt"

    def decode() -> dict:
        log.info("decoding %s once into %s", path, cache)
        return read_zip(path, size).to_blob()

    return DecodedZip(**cached_blob(cache, decode))


def find_archive(root: Path, resource: Resource, *, dataset: str, download: bool,
                 subdirs: Sequence[str] = ("",)) -> Path:
    """An archive in ``root`` or one of ``subdirs``, verified; else downloaded into ``root``."""
    for sub in subdirs:
        if (root / sub / resource.filename).exists():
            return ensure_file(resource, root / sub, dataset=dataset, download=False)
    return ensure_file(resource, root, dataset=dataset, download=download)


def merge(parts: Sequence[DecodedZip]) -> DecodedZip:
    """Concatenate decoded zips, renumbering labels."""
    offset, labels = 0, []
    for p in parts:
        labels.append(p.labels + offset)
        offset += len(p.characters)
    return DecodedZip(torch.cat([p.images for p in parts]), torch.cat(labels),
                      [a for p in parts for a in p.alphabets],
                      [c for p in parts for c in p.characters], [i for p in parts for i in p.ids])


def vinyals_splits(decoded: DecodedZip) -> dict[str, list[int]]:
    """The Vinyals et al. character split, from Omniglot's own character numbers."""
    if 0 in decoded.ids:
        raise ZooError("the Vinyals split needs Omniglot's character numbers (file names "
                       "NNNN_DD.png); these archives do not have them")
    splits: dict[str, list[int]] = {"train": [], "val": [], "test": []}
    for c, (alphabet, cid) in enumerate(zip(decoded.alphabets, decoded.ids, strict=True)):
        if cid >= VINYALS_TEST_FROM_ID:
            splits["test"].append(c)
        elif alphabet in VINYALS_VAL_ALPHABETS:
            splits["val"].append(c)
        else:
            splits["train"].append(c)
    return splits


def load_omniglot(data_dir: str | os.PathLike | None = None, download: bool = True,
                  protocol: str = "vinyals", rotations: bool | None = None) -> CharacterDataset:
    """Omniglot, 1623 characters, 28x28; Vinyals split with rotations, or CloserLook's no-Latin."""
    if protocol not in ("vinyals", "no-latin"):
        raise ZooError(f"unknown Omniglot protocol {protocol!r}; choose 'vinyals' or 'no-latin'")
    root = data_root(data_dir) / "omniglot"
    parts = []
    for key in ("images_background", "images_evaluation"):
        resource = resources()[key]
        path = find_archive(root, resource, dataset="omniglot", download=download,
                            subdirs=("", "omniglot-py"))
        parts.append(cached_zip(path, resource))
    decoded = merge(parts)
    if protocol == "vinyals":
        splits = vinyals_splits(decoded)
        rotations = True if rotations is None else rotations
    else:
        splits = {"train": [c for c, a in enumerate(decoded.alphabets) if a != "Latin"]}
        rotations = bool(rotations)
    return CharacterDataset("omniglot", decoded.images, decoded.labels, decoded.characters,
                            splits, rotations=rotations)
