"""Atomic file writes: a temporary file in the same directory, then a rename."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def _atomic(path: str | os.PathLike, write: Callable[[IO], None], mode: str = "w") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return _atomic(path, lambda f: f.write(text))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def atomic_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` made atomic."""
    import torch

    return _atomic(path, lambda f: torch.save(obj, f), mode="wb")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return _atomic(path, lambda f: f.write(data), mode="wb")
