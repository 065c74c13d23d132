"""Few-shot data sets. Each is a factory ``(data_dir=None, download=True, **options)``."""

from __future__ import annotations

from zoo.data.base import FewShotDataset, FileDataset, TensorDataset, cache_root, data_root
from zoo.data.digits import load_digits
from zoo.data.glyphs import load_glyphs

DATASETS = {
    "glyphs": load_glyphs,
    "digits": load_digits,
}

__all__ = ["DATASETS", "FewShotDataset", "FileDataset", "TensorDataset", "cache_root",
           "data_root", "load_dataset"]


def load_dataset(name: str, data_dir=None, download: bool = True, **options) -> FewShotDataset:
    """Build a registered data set by name (built-in or from a plugin)."""
    from zoo.plugins import registry

    return registry().get("datasets", name)(data_dir=data_dir, download=download, **options)
