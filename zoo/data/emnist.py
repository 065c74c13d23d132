"""``emnist``: EMNIST ByClass characters (Cohen et al., 2017), the target of the Omniglot -> EMNIST
cross-domain protocol of CloserLookFewShot.

62 classes (digits, upper- and lower-case Latin letters, in torchvision's order). Following
CloserLookFewShot, even class indices are the validation split and odd ones the test split; there
is no train split, because models train on ``omniglot`` with ``protocol="no-latin"``. Images are
the 116,323 of the ByClass test set, 28x28, strokes bright on dark like every character set in the
zoo (EMNIST already is; torchvision stores the images transposed, which is undone here).

Files: torchvision's layout, ``<data dir>/emnist/EMNIST/raw/emnist-byclass-test-*-idx*-ubyte``;
when missing, torchvision's ``gzip.zip`` (URL and md5 as in ``torchvision.datasets.EMNIST``, 562
MB) is downloaded with checksum verification and unpacked by torchvision.
"""

from __future__ import annotations

import os

from zoo.data.characters import CharacterDataset
from zoo.data.download import Resource, ensure_file, missing
from zoo.paths import data_root

SPLIT = "byclass"
LAYOUT = "emnist/EMNIST/raw"  # torchvision's, under the data directory


def load_emnist(data_dir: str | os.PathLike | None = None, download: bool = True
                ) -> CharacterDataset:
    """EMNIST ByClass test images, 62 classes: even ones validation, odd ones test (28x28)."""
    from torchvision.datasets import EMNIST

    root = data_root(data_dir) / "emnist"
    raw = root / "EMNIST" / "raw"
    prefix = f"emnist-{SPLIT}-test"
    needed = [raw / f"{prefix}-images-idx3-ubyte", raw / f"{prefix}-labels-idx1-ubyte"]
    if not all(p.exists() for p in needed):
        resource = Resource("gzip.zip", EMNIST.url, md5=EMNIST.md5)
        if not download and not (raw / resource.filename).exists():
            raise missing(f"{needed[0].name} and {needed[1].name}", raw, "emnist",
                          f"Download {EMNIST.url} into that directory, or allow downloads.",
                          layout=LAYOUT)
        ensure_file(resource, raw, dataset="emnist", download=download, layout=LAYOUT)
        EMNIST(str(root), split=SPLIT, train=False, download=True)  # unpacks the verified zip
    ds = EMNIST(str(root), split=SPLIT, train=False, download=False)
    images = ds.data.transpose(1, 2).contiguous()[:, None]
    n = len(ds.classes)
    splits = {"val": list(range(0, n, 2)), "test": list(range(1, n, 2))}
    return CharacterDataset("emnist", images, ds.targets.long(), list(ds.classes), splits)
