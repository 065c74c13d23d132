"""The embedded data sets: glyphs (rendered from matplotlib's fonts) and scikit-learn's digits."""

import torch

from zoo.data.glyphs import SPLIT_OF_ALPHABET
from zoo.plugins import load_dataset


def test_glyphs_is_omniglot_like(glyphs):
    assert glyphs.image_size == 28 and glyphs.in_channels == 1
    assert int(glyphs.class_sizes.min()) == 20
    assert float(glyphs.images.min()) >= 0.0 and float(glyphs.images.max()) <= 1.0
    splits = {s: {glyphs.class_names[c] for c in cs} for s, cs in glyphs.splits.items()}
    assert not (splits["train"] & splits["test"]) and not (splits["val"] & splits["test"])
    alphabets = {s: {n.split("/")[0] for n in names} for s, names in splits.items()}
    assert not (alphabets["train"] & alphabets["test"])  # held-out alphabets, not just classes
    assert alphabets["test"] == {a for a, s in SPLIT_OF_ALPHABET.items() if s == "test"}
    assert len(splits["test"]) >= 20 and len(splits["val"]) >= 20


def test_glyph_examples_of_a_class_differ(glyphs):
    c = glyphs.splits["test"][0]
    x = glyphs.gather(torch.tensor([c]), torch.arange(20)[None])[0].flatten(1)
    assert torch.unique(x, dim=0).shape[0] == 20


def test_digits():
    d = load_dataset("digits")
    assert d.describe()["classes"] == {"test": 10}
    assert int(d.class_sizes.sum()) == 1797 and d.image_size == 28
