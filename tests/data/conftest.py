"""Fixtures for the data-set tests: a private cache, and Lake's minimal Omniglot decoded once.

The tests read the real minimal Omniglot archives from the zoo's data folder (``omniglot/`` under
``$ZOO_DATA``, else the user's cache, as :func:`zoo.data.data_root` says) when they are there;
elsewhere they use small archives in the same layout, built here, whose digests replace the
published ones for the test session.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from zoo.data import data_root, omniglot_minimal
from zoo.data.download import Resource, file_digest

REAL = data_root()

# alphabet -> characters, for the stand-in archives (enough for 20-way held-out splits)
STAND_IN = {
    "small1": {"Balinese": 24, "Early_Aramaic": 22, "Greek": 3, "Korean": 20, "Latin": 3},
    "small2": {"Greek": 3, "Japanese_(katakana)": 12, "Latin": 3, "Sanskrit": 20, "Tagalog": 9},
}


def png_bytes(array: np.ndarray) -> bytes:
    """A grayscale PNG of a uint8 array."""
    buf = io.BytesIO()
    Image.fromarray(array.astype(np.uint8), mode="L").save(buf, format="PNG")
    return buf.getvalue()


def scan(seed: int, size: int = 105) -> np.ndarray:
    """An Omniglot-like scan: dark strokes (a random box outline) on white."""
    rng = np.random.default_rng(seed)
    img = np.full((size, size), 255, dtype=np.uint8)
    top, left = rng.integers(5, size // 2, size=2)
    h, w = rng.integers(20, size // 2, size=2)
    img[top: top + h, left: left + 8] = 0
    img[top: top + 8, left: left + w] = 0
    return img


def write_alphabet_zip(path: Path, top: str, alphabets: dict[str, int], drawers: int = 20,
                       first_id: int = 1) -> Path:
    """An archive in Omniglot's layout ``top/<Alphabet>/characterNN/<id>_<drawer>.png``."""
    cid = first_id
    with zipfile.ZipFile(path, "w") as zf:
        for alphabet, n in alphabets.items():
            for c in range(1, n + 1):
                for d in range(1, drawers + 1):
                    name = f"{top}/{alphabet}/character{c:02d}/{cid:04d}_{d:02d}.png"
                    zf.writestr(name, png_bytes(scan(cid * 100 + d)))
                cid += 1
    return path


@pytest.fixture(scope="session")
def draw() -> SimpleNamespace:
    """The fixture builders above, for test modules (conftest is not importable under
    pytest's importlib mode)."""
    return SimpleNamespace(png_bytes=png_bytes, scan=scan, write_alphabet_zip=write_alphabet_zip)


@pytest.fixture(scope="session")
def zoo_cache(tmp_path_factory) -> Path:
    """A cache directory private to this test session."""
    return tmp_path_factory.mktemp("zoo-cache")


@pytest.fixture(scope="session")
def minimal_data_dir(tmp_path_factory) -> Iterator[Path]:
    """A data directory holding Lake's minimal zips: the real ones, or stand-ins."""
    if all((REAL / "omniglot" / r.filename).exists()
           for r in omniglot_minimal.RESOURCES.values()):
        yield REAL
        return
    root = tmp_path_factory.mktemp("minimal-data")
    (root / "omniglot").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        for key, alphabets in STAND_IN.items():
            resource = omniglot_minimal.RESOURCES[key]
            path = write_alphabet_zip(root / "omniglot" / resource.filename,
                                      f"images_background_{key}", alphabets, drawers=6)
            mp.setitem(omniglot_minimal.RESOURCES, key, Resource(
                resource.filename, resource.url, sha256=file_digest(path, "sha256")))
        yield root


@pytest.fixture(scope="session")
def minimal(minimal_data_dir, zoo_cache):
    """``omniglot-minimal`` decoded once per test session (small1 background)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ZOO_CACHE", str(zoo_cache))
        return omniglot_minimal.load_omniglot_minimal(minimal_data_dir, download=False)


@pytest.fixture
def real_minimal(minimal_data_dir) -> bool:
    """Whether the tests run on the real archives (the published class counts apply)."""
    return minimal_data_dir == REAL
