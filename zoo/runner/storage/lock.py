"""The lock of the one process writing a results folder, and the record of who holds it.

Two runs appending to one ``results.jsonl`` lose each other's lines, so a folder has one writer at
a time. The lock is an ``flock`` (``filelock``), so the kernel drops it when its holder dies,
however it dies; ``writer.json`` beside it says who holds it, for the message to the next one.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from zoo.errors import ZooError
from zoo.io import atomic_write_json
from zoo.runner.storage.layout import LOCK, SHARED_PREFIX, SHARED_RE, WRITER


class ResultsFolderBusyError(ZooError):
    """Another process is writing the results folder."""


@contextmanager
def writer_lock(root: Path) -> Iterator[None]:
    """Be ``root``'s only writer while the block runs, or raise :class:`ResultsFolderBusyError`
    naming the process that is."""
    from filelock import FileLock, Timeout

    lock = FileLock(root / LOCK)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ResultsFolderBusyError(
            f"{root} is being written by {_holder(root / WRITER)}; wait for it to finish or "
            "choose another --out (two writers lose each other's results)") from None
    for stale in root.glob(f"{SHARED_PREFIX}*"):  # a killed Ray driver's: its lock is gone
        if SHARED_RE.match(stale.name):
            stale.unlink(missing_ok=True)
    try:
        atomic_write_json(root / WRITER, {
            "pid": os.getpid(), "host": socket.gethostname(), "argv": sys.argv,
            "since": time.strftime("%Y-%m-%d %H:%M:%S")})
        yield
    finally:
        (root / WRITER).unlink(missing_ok=True)
        lock.release()


def _holder(path: Path) -> str:
    """Who holds a writer lock, from its ``writer.json``."""
    try:
        who = json.loads(path.read_text())
        return (f"pid {who['pid']} on {who['host']} (`{' '.join(who['argv'])}`, since "
                f"{who['since']})")
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"
