"""Atomic file writes: a temporary file in the same directory, then a rename.

A write is atomic, not durable: a killed process leaves the old file or the new one, never a
part. Durability against a crash of the machine is one explicit step, :func:`sync_to_disk`, taken
before a file that declares others complete (a ``done`` marker) is written: one flush per group of
finished cells and trainings instead of an ``fsync`` of each file and folder, which cost 2-20x
more for a group of 1 to 16 small cells, side by side on ext4.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def _atomic(path: str | os.PathLike, write: Callable[[IO], None], mode: str = "w") -> Path:
    """Write through ``.NAME.PID_THREAD.tmp`` beside ``path``, then rename it over ``path``. The
    temporary name is this thread's own, so no random name is drawn and checked per file (half
    the cost of a small file); the folder is made when it is missing."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}_{threading.get_ident()}.tmp")
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(tmp, mode) as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def sync_to_disk(path: str | os.PathLike) -> None:
    """Flush the writes so far to the file system holding ``path`` to the disk, so that the files
    written before it survive a crash of the machine: ``os.sync``, which flushes every file system
    and on Linux returns once the data is written (as fast as Linux's ``syncfs`` of the one file
    system, side by side on a machine with one disk)."""
    del path  # os.sync covers it
    os.sync()


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return _atomic(path, lambda f: f.write(text))


def write_marker(path: str | os.PathLike) -> Path:
    """Create the empty file ``path`` (a ``done`` marker). Its creation is atomic by itself: no
    temporary file and rename, which cost as much again."""
    path = Path(path)
    path.touch()
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def atomic_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` made atomic."""
    import torch

    return _atomic(path, lambda f: torch.save(obj, f), mode="wb")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return _atomic(path, lambda f: f.write(data), mode="wb")
