"""MNIST's four idx files in torchvision's layout, ``<data dir>/mnist/MNIST/raw``, read by
torchvision; an error that names the files and the directory when they are not there."""

from __future__ import annotations

import os

from zoo.data.download import missing
from zoo.paths import data_root

LAYOUT = "mnist/MNIST/raw"
FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte")


def load_mnist(data_dir: str | os.PathLike | None, dataset: str, download: bool = True):
    """torchvision's MNIST ``(train, test)`` from the data directory, downloaded by torchvision
    first when files are missing and ``download``; raises :class:`~zoo.errors.DataMissingError`
    naming the four files (uncompressed, or as ``.gz``) and where they go."""
    from torchvision.datasets import MNIST

    root = data_root(data_dir) / "mnist"
    raw = root / "MNIST" / "raw"
    absent = [f for f in FILES if not (raw / f).exists() and not (raw / f"{f}.gz").exists()]
    reason = "Download them (e.g. torchvision.datasets.MNIST(DIR + '/mnist', download=True) on a " \
             "machine with a network) and copy them there."
    if absent and download:
        try:
            MNIST(str(root), train=True, download=True)
            MNIST(str(root), train=False, download=True)
            absent = []
        except (RuntimeError, OSError) as err:
            detail = " ".join(str(err).split())[:160] or type(err).__name__
            reason = f"torchvision's download failed ({detail}). " + reason
    if absent:
        raise missing(f"MNIST's idx files {', '.join(FILES)} (uncompressed or .gz; missing: "
                      f"{', '.join(absent)})", raw, dataset, reason, layout=LAYOUT)
    return MNIST(str(root), train=True, download=False), MNIST(str(root), train=False,
                                                               download=False)
