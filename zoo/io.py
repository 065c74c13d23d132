"""Atomic file writes (a temporary file in the same directory, then a rename), and the one way
the zoo reads a tensor file back (weights only: a file is data, never code).

A write is atomic, not durable: a killed process leaves the old file or the new one, never a
part. Durability against a crash of the machine is one explicit step, :func:`sync_to_disk`, taken
before a file that declares others complete (a ``done`` marker) is written: one flush of the file
system per finished cell or training instead of an ``fsync`` per file, which cost more than the
work of a small cell (``benchmarks/runner_many_cells.py``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import orjson

from zoo.errors import ZooError


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
    """Flush every write to the file system holding ``path`` to the disk (``syncfs`` on Linux,
    ``sync`` elsewhere), so that the files written so far survive a crash of the machine."""
    libc = c_library()
    if hasattr(os, "O_DIRECTORY") and hasattr(libc, "syncfs"):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if libc.syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    os.sync()


@functools.cache
def c_library() -> Any:
    """This process's C library (loaded once; ``syncfs`` here, glibc's ``mallopt`` in
    :mod:`zoo.runner.allocator`), or None where it cannot be loaded."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


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


def json_line(obj: Any) -> bytes:
    """``obj`` as one line of JSON (UTF-8, ending in a newline), as the standard library's
    ``json.dumps`` would give its values: encoded by ``orjson`` (25x faster on a record of a few
    hundred floats, which a test episode's per-query numbers are), and by ``json`` wherever
    ``orjson`` would write something else (it writes ``null`` for a NaN or an infinity, which
    ``json`` keeps as ``NaN`` / ``Infinity``) or refuses (a subclass of a number, a key that is
    not a string). ``json.loads`` reads either back as the same values."""
    try:
        line = orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # orjson.JSONEncodeError
        line = b"null"
    if b"null" in line:  # rare: a None, a non-finite float, or a fallback from above
        line = (json.dumps(obj) + "\n").encode()
    return line


def json_record(line: str) -> Any:
    """The value of one line of a JSON-lines file the zoo wrote, as ``json.loads`` reads it: a
    line :func:`json_line` encoded with ``orjson`` (compact: no ``": "`` in it) is read by
    ``orjson`` (~10x faster), and which it refuses (``NaN``, trailing text) by ``json``, which
    reads it or raises the error it always raises; a line ``json.dumps`` wrote (``": "``, the
    separator it writes; older files, and ``json_line``'s fallback, the only place a
    record's integer beyond 64 bits can be) is read by ``json``. ``orjson`` reads an integer
    beyond 64 bits as a float, which no line it wrote holds; a compact line from another
    writer with one would be read so."""
    if '": ' not in line:
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            pass
    return json.loads(line)


def atomic_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` made atomic."""
    import torch

    return _atomic(path, lambda f: torch.save(obj, f), mode="wb")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return _atomic(path, lambda f: f.write(data), mode="wb")


def load_checkpoint(path: str | os.PathLike, device: str = "cpu") -> Any:
    """``torch.load`` of a file the zoo wrote, with ``weights_only=True``: tensors, numbers,
    strings and containers of them. Anything else in the file is refused before it runs (a
    pickle can name any callable, so a crafted ``model.pt`` would otherwise run code on load).
    Errors name the file."""
    import pickle

    import torch

    path = Path(path)
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as exc:
        if "Weights only load failed" in str(exc) or "Unsupported" in str(exc):
            raise ZooError(f"{path}: refused, it holds Python objects that no zoo file holds "
                           "(nothing in it was run); load only files the zoo wrote") from None
        raise ZooError(f"{path}: cannot be read ({exc}); it is truncated or corrupt: delete it "
                       "(a checkpoint is rewritten by training again)") from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise ZooError(f"{path}: cannot be read ({type(exc).__name__}: {exc}); it is truncated "
                       "or corrupt: delete it (a checkpoint is rewritten by training again)"
                       ) from None
