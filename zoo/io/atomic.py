"""Atomic file writes: a temporary file in the same directory, then a rename.

A write is atomic, not durable: a killed process leaves the old file or the new one, never a
part. Durability against a crash of the machine is one explicit step, :func:`sync_to_disk`, taken
before a file that declares others complete (a ``done`` marker) is written: one flush per group of
finished cells and trainings instead of an ``fsync`` of each file and folder, which cost 2-20x
more for a group of 1 to 16 small cells, side by side on ext4.
"""

from __future__ import annotations

import errno
import io
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from zoo.errors import ZooError


class NoSpaceError(ZooError):
    """A write that failed because its file system is full (or the user's quota is spent)."""


_write_check: Callable[[], None] | None = None


def set_write_check(check: Callable[[], None] | None) -> None:
    """Run ``check`` before each write of :mod:`zoo.io` in this process (it may end the
    process): a pool worker's check that its parent, the holder of the results folder's lock,
    is alive, so that no write lands once the lock is gone."""
    global _write_check
    _write_check = check


def before_write() -> None:
    """The check of :func:`set_write_check`, if any; every write to a results folder calls it
    just before it becomes visible (a rename, an append, a marker)."""
    if _write_check is not None:
        _write_check()


def mount_point(path: str | os.PathLike) -> Path:
    """The mount point of the file system holding ``path`` (or its nearest existing parent)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    device = path.stat().st_dev
    while path != path.parent and path.parent.stat().st_dev == device:
        path = path.parent
    return path


@contextmanager
def saying_no_space(path: str | os.PathLike) -> Iterator[None]:
    """Turn a write's "no space left" (``ENOSPC``, ``EDQUOT``) into :class:`NoSpaceError`
    naming the file system and ``path``."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, NoSpaceError) or exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        what = "no space left" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        raise NoSpaceError(f"{what} on the file system at {mount_point(path)} "
                           f"(writing {path}); free space there, or write to another folder "
                           "(--out), then run the same command again: finished work is kept"
                           ) from None


def _atomic(path: str | os.PathLike, write: Callable[[IO], None], mode: str = "w") -> Path:
    """Write through ``.NAME.PID_THREAD.tmp`` beside ``path``, then rename it over ``path``. The
    temporary name is this thread's own, so no random name is drawn and checked per file (half
    the cost of a small file); the folder is made when it is missing. A full disk is an error
    that says so (:class:`NoSpaceError`), the temporary file removed."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}_{threading.get_ident()}.tmp")
    before_write()
    try:
        with saying_no_space(path):
            if not path.parent.is_dir():
                path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, mode) as f:
                write(f)
            before_write()
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
    before_write()
    with saying_no_space(path):
        path.touch()
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def atomic_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` made atomic."""
    import torch

    def write(f: IO) -> None:  # into memory first: the file write then fails as an OSError
        buffer = io.BytesIO()  # that names the full disk, not inside torch's zip writer
        torch.save(obj, buffer)
        f.write(buffer.getbuffer())

    return _atomic(path, write, mode="wb")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return _atomic(path, lambda f: f.write(data), mode="wb")
