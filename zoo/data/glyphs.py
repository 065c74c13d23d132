"""``glyphs``: an Omniglot-like character set rendered from the fonts that matplotlib ships.

Scripts are alphabets and characters are classes, as in Omniglot. The "drawers" of a character are
20 renderings (Omniglot has 20 drawers, so 5-shot with 15 queries fits): the font faces that have
the glyph (12 DejaVu and 4 STIX faces), taken in turn, each with its own small seeded affine
distortion (rotation, shear, scale, shift). Images are 28x28
grayscale with bright strokes. Rendering is deterministic and takes a few seconds; the result is
cached under :func:`zoo.paths.cache_root` keyed by the renderer version and matplotlib's.

The alphabet split is fixed here: the test alphabets (Greek, Armenian) and the validation
alphabet (Georgian) share no script with the training alphabets.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from zoo.data.base import TensorDataset, cached_blob
from zoo.data.characters import random_affine
from zoo.paths import cache_root

log = logging.getLogger(__name__)

RENDER_VERSION = 2
EXAMPLES_PER_CLASS = 20
MIN_FACES = 4
SIZE = 28
BOX = 22  # glyphs are scaled to fit a BOX x BOX square before the distortion

# alphabet -> (first code point, last code point); every character that at least MIN_FACES faces
# draw becomes a class.
ALPHABETS: dict[str, tuple[int, int]] = {
    "latin-upper": (0x41, 0x5A), "latin-lower": (0x61, 0x7A),
    "cyrillic-upper": (0x410, 0x42F), "cyrillic-lower": (0x430, 0x44F),
    "hebrew": (0x5D0, 0x5EA), "lao": (0xE81, 0xEAE), "ipa": (0x250, 0x2AF),
    "braille": (0x2801, 0x283F), "canadian-syllabics": (0x1401, 0x1470),
    "arrows": (0x2190, 0x21FF),
    "georgian": (0x10D0, 0x10F0),
    "greek-upper": (0x391, 0x3A9), "greek-lower": (0x3B1, 0x3C9),
    "armenian-upper": (0x531, 0x556), "armenian-lower": (0x561, 0x586),
}
SPLIT_OF_ALPHABET = {a: "train" for a in ALPHABETS} | {
    "georgian": "val",
    "greek-upper": "test", "greek-lower": "test", "armenian-upper": "test", "armenian-lower": "test",
}
FACES = [f"DejaVu{family}{style}.ttf" for family in ("Sans", "SansMono")
         for style in ("", "-Bold", "-Oblique", "-BoldOblique")] + [
    f"DejaVuSerif{style}.ttf" for style in ("", "-Bold", "-Italic", "-BoldItalic")] + [
    f"STIXGeneral{style}.ttf" for style in ("", "Bol", "Italic", "BolIta")]


def _font_dir() -> Path:
    import matplotlib

    return Path(matplotlib.__file__).parent / "mpl-data" / "fonts" / "ttf"


def _render(font, char: str) -> torch.Tensor | None:
    """One glyph, bright on dark, scaled into a centred BOX x BOX square of a SIZE x SIZE image."""
    font.set_size(48, 72)
    font.set_text(char, 0.0)
    font.draw_glyphs_to_bitmap(antialiased=True)
    img = np.asarray(font.get_image(), dtype=np.float32) / 255.0
    rows, cols = np.nonzero(img > 0.05)
    if rows.size == 0:
        return None
    img = torch.from_numpy(img[rows.min(): rows.max() + 1, cols.min(): cols.max() + 1].copy())
    h, w = img.shape
    scale = BOX / max(h, w)
    nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
    img = F.interpolate(img[None, None], size=(nh, nw), mode="area")[0, 0]
    out = torch.zeros(SIZE, SIZE)
    top, left = (SIZE - nh) // 2, (SIZE - nw) // 2
    out[top: top + nh, left: left + nw] = img
    return out


def render_glyphs() -> tuple[torch.Tensor, torch.Tensor, list[str], list[str]]:
    """Render every class: images uint8 [N, 1, 28, 28], labels, class names, alphabet per class."""
    from matplotlib.ft2font import FT2Font

    fonts = [FT2Font(str(_font_dir() / f)) for f in FACES]
    generator = torch.Generator().manual_seed(20240721)
    images, labels, names, alphabets = [], [], [], []
    for alphabet, (first, last) in ALPHABETS.items():
        for code in range(first, last + 1):
            char = chr(code)
            faces = [f for f in fonts if f.get_char_index(code)]
            if len(faces) < MIN_FACES:
                continue
            renders = [r for r in (_render(f, char) for f in faces) if r is not None]
            if len(renders) < MIN_FACES:
                continue
            base = torch.stack([renders[i % len(renders)] for i in range(EXAMPLES_PER_CLASS)])
            images.append(random_affine(base[:, None], generator))
            labels += [len(names)] * EXAMPLES_PER_CLASS
            names.append(f"{alphabet}/U+{code:04X}")
            alphabets.append(alphabet)
    x = (torch.cat(images).clamp(0, 1) * 255).round().to(torch.uint8)
    return x, torch.tensor(labels), names, alphabets


def _cache_path() -> Path:
    import matplotlib

    return cache_root() / f"glyphs-v{RENDER_VERSION}-mpl{matplotlib.__version__}.pt"


def load_glyphs(data_dir: str | os.PathLike | None = None, download: bool = True) -> TensorDataset:
    """Omniglot-like characters rendered from matplotlib's fonts (default data, no download)."""
    path = _cache_path()

    def render() -> dict:
        log.info("rendering the glyphs data set once into %s", path)
        x, y, names, alphabets = render_glyphs()
        return {"images": x, "labels": y, "names": names, "alphabets": alphabets}

    blob = cached_blob(path, render)
    splits: dict[str, list[int]] = {"train": [], "val": [], "test": []}
    for c, alphabet in enumerate(blob["alphabets"]):
        splits[SPLIT_OF_ALPHABET[alphabet]].append(c)
    images = blob["images"].float() / 255.0
    return TensorDataset("glyphs", images, blob["labels"], blob["names"], splits)
