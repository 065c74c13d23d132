"""Where the zoo keeps files outside a results folder: data, and derived caches (no torch here, so
that commands which only list or read results can find them)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """Where data files live: ``data_dir``, else ``$ZOO_DATA``, else the user's cache directory."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    if os.environ.get("ZOO_DATA"):
        return Path(os.environ["ZOO_DATA"]).expanduser()
    return Path(platformdirs.user_cache_dir("zoo")) / "data"


def cache_root() -> Path:
    """Where derived files (rendered glyphs, decoded tensors) are cached; ``$ZOO_CACHE`` overrides."""
    if os.environ.get("ZOO_CACHE"):
        return Path(os.environ["ZOO_CACHE"]).expanduser()
    return Path(platformdirs.user_cache_dir("zoo")) / "cache"
