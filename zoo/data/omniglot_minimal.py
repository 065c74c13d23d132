"""``omniglot-minimal``: Lake et al.'s two minimal Omniglot background sets, small1 and small2.

Files: ``images_background_small1.zip`` and ``images_background_small2.zip`` from the ``python/``
folder of github.com/brendenlake/omniglot (MIT licence), in ``<data dir>/omniglot/``, downloaded
and checked against the sha256 digests below when missing. Both archives are needed: one is
trained on, the other supplies the held-out alphabets.

Protocol (``background="small1"``, the default): train on every character of small1 (Balinese,
Early_Aramaic, Greek, Korean, Latin: 136 characters). Greek and Latin are in both archives, so
validation and test use only the alphabets found in small2 alone: validation Sanskrit (42
characters), test Japanese_(katakana) and Tagalog (64). The mirror protocol
(``background="small2"``) trains on small2 (156 characters) and holds out small1's own alphabets:
validation Korean (40), test Balinese and Early_Aramaic (46). Every held-out split has at least
20 classes, so 20-way episodes work. Images are 28x28, strokes bright on dark; decoded once and
cached (see :mod:`zoo.data.omniglot`).

Training-set augmentation, as options of the data set spec (so every result records it, e.g.
``omniglot-minimal[background=small1,rotations=true,distortions=2]``): ``rotations`` adds each
training character rotated by 90, 180 and 270 degrees as three further classes (validation and
test characters stay upright, as in Lake's runs); ``distortions = k`` adds ``k`` small random
affine copies (:func:`~zoo.data.characters.random_affine`, seeded, the same on every machine) of
every training image as further examples of its class; ``fresh_distortions = true`` shows every
training image of every training episode through a fresh random affine map of the same family,
drawn from the episode's seed (so no two episodes see the same copy, and an episode is still a
pure function of its seed and index).
"""

from __future__ import annotations

import os

import torch

from zoo.data.characters import CharacterDataset, random_affine
from zoo.data.download import Resource
from zoo.data.omniglot import cached_zip, find_archive, merge
from zoo.errors import ZooError
from zoo.paths import data_root

URL = "https://raw.githubusercontent.com/brendenlake/omniglot/master/python/"
RESOURCES = {
    "small1": Resource("images_background_small1.zip", URL + "images_background_small1.zip",
                       sha256="f38eb80f801274ac2b4dff5b24289016bfaba4a7d5bb50deebf27104ad6cb8a4"),
    "small2": Resource("images_background_small2.zip", URL + "images_background_small2.zip",
                       sha256="3ccaa407515a8778e5d0861875af38b17e418f301ad5bb3b5a6b65d901a41c7f"),
}
# background archive -> the other archive's own alphabets, by split
HELD_OUT: dict[str, dict[str, tuple[str, ...]]] = {
    "small1": {"val": ("Sanskrit",), "test": ("Japanese_(katakana)", "Tagalog")},
    "small2": {"val": ("Korean",), "test": ("Balinese", "Early_Aramaic")},
}


DISTORTION_SEED = 0


def load_omniglot_minimal(data_dir: str | os.PathLike | None = None, download: bool = True,
                          background: str = "small1", rotations: bool = False,
                          distortions: int = 0, fresh_distortions: bool = False
                          ) -> CharacterDataset:
    """Lake's minimal Omniglot: train on one small background set, test on the other's alphabets
    (training augmentation: see the module docstring)."""
    if background not in HELD_OUT:
        raise ZooError(f"background must be 'small1' or 'small2', got {background!r}")
    if not isinstance(distortions, int) or distortions < 0:
        raise ZooError(f"distortions must be a whole number of copies >= 0, got {distortions!r}")
    if not isinstance(fresh_distortions, bool):
        raise ZooError(f"fresh_distortions must be true or false, got {fresh_distortions!r}")
    other = "small2" if background == "small1" else "small1"
    root = data_root(data_dir) / "omniglot"
    train, held = (cached_zip(find_archive(root, RESOURCES[k], dataset="omniglot-minimal",
                                           download=download), RESOURCES[k])
                   for k in (background, other))
    clash = set(train.alphabets) & {a for names in HELD_OUT[background].values() for a in names}
    if clash:
        raise ZooError(f"held-out alphabets {sorted(clash)} are also in {background}; "
                       "the archives are not Lake's minimal sets")
    keep = [c for c, a in enumerate(held.alphabets)
            if any(a in names for names in HELD_OUT[background].values())]
    rows = torch.isin(held.labels, torch.tensor(keep))
    remap = torch.full((len(held.characters),), -1, dtype=torch.long)
    remap[torch.tensor(keep)] = torch.arange(len(keep))
    held_kept = type(held)(held.images[rows], remap[held.labels[rows]],
                           [held.alphabets[c] for c in keep], [held.characters[c] for c in keep],
                           [held.ids[c] for c in keep])
    if distortions:
        generator = torch.Generator().manual_seed(DISTORTION_SEED)
        copies = [random_affine(train.images.float(), generator) for _ in range(distortions)]
        train = type(train)(torch.cat([train.images, *(c.round().clamp(0, 255).to(train.images.dtype)
                                                        for c in copies)]),
                            train.labels.repeat(distortions + 1), train.alphabets,
                            train.characters, train.ids)
    both = merge([train, held_kept])
    n_train = len(train.characters)
    splits = {"train": list(range(n_train))}
    for split, names in HELD_OUT[background].items():
        splits[split] = [n_train + c for c, a in enumerate(held_kept.alphabets) if a in names]
    return CharacterDataset("omniglot-minimal", both.images, both.labels, both.characters, splits,
                            rotations=rotations, rotated_splits=("train",),
                            distorted_splits=("train",) if fresh_distortions else ())
