"""glibc's malloc thresholds for the processes that run cells: keep freed memory in the process.

Every training step frees and re-allocates the same large buffers (a Conv4 activation of an
80-image episode is 16 MB). With glibc's defaults a buffer above the dynamic mmap threshold is
handed back to the kernel when freed, and the free space at the top of the heap is trimmed, so
the next step gets fresh zero-filled pages: thousands of page faults per step, and how many
depends on the allocation order of the method, not on its arithmetic. Raising both thresholds
keeps those pages in the heap for reuse (``benchmarks/allocator.py`` measures it side by side).

glibc reads its thresholds once, when a process starts, from ``GLIBC_TUNABLES``. The runner sets
:data:`RETAIN` for the worker processes it starts (``--workers`` above 1, Ray tasks); the process
that runs ``zoo bench`` itself (``--workers 1``, the default) keeps what it started with, so a
user sets it there::

    GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=2147483647 \\
        zoo bench quick

A ``GLIBC_TUNABLES`` already in the environment is passed on unchanged (``GLIBC_TUNABLES=`` keeps
glibc's defaults in the workers too). What a process started with is recorded with each result
(``env.json`` -> ``malloc``). Another C library ignores the variable.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

VARIABLE = "GLIBC_TUNABLES"
MMAP_THRESHOLD = 32 * 2**20
"""The largest mmap threshold glibc accepts on 64-bit (``HEAP_MAX_SIZE / 2``): larger buffers are
rare and still mapped."""
TRIM_THRESHOLD = 2**31 - 1
"""So large that the heap is never trimmed while cells run."""
RETAIN = (f"glibc.malloc.mmap_threshold={MMAP_THRESHOLD}:"
          f"glibc.malloc.trim_threshold={TRIM_THRESHOLD}")
GLIBC_DEFAULT_THRESHOLD = 128 * 2**10
RETURN = (f"glibc.malloc.mmap_threshold={GLIBC_DEFAULT_THRESHOLD}:"
          f"glibc.malloc.trim_threshold={GLIBC_DEFAULT_THRESHOLD}")
"""glibc's initial thresholds, fixed (a set threshold no longer adapts): a freed buffer above
128 KiB goes back to the kernel, and so does the heap's free top. A process started with it has
a resident set that grows only with its live buffers (a benchmark's peak memory of a call)."""
_STARTED_WITH = os.environ.get(VARIABLE)


def worker_tunables() -> str:
    """The ``GLIBC_TUNABLES`` a worker process gets: this process's own if it has one, else
    :data:`RETAIN`."""
    return os.environ.get(VARIABLE, RETAIN)


@contextmanager
def for_workers() -> Iterator[None]:
    """While the block runs, processes started from this one (a pool's workers) get
    :func:`worker_tunables`; this process's own environment is as before after it."""
    had = VARIABLE in os.environ
    os.environ[VARIABLE] = worker_tunables()
    try:
        yield
    finally:
        if not had:
            del os.environ[VARIABLE]


def malloc_setting() -> str:
    """The ``GLIBC_TUNABLES`` this process started with (``"default"`` if none), as its
    environment held it when this module was imported (glibc rewrites the process's original
    environment block, ``/proc/self/environ``, as it reads the variable)."""
    return _STARTED_WITH or "default"


def exec_with(tunables: str | None) -> None:
    """Make sure this script runs with ``tunables`` (None: without the variable): if it did not
    start so, run it again in its place (``os.execve``, same arguments) with the variable set.
    For benchmarks that time calls as cells run them."""
    if os.environ.get(VARIABLE) == tunables or (not tunables and not os.environ.get(VARIABLE)):
        return
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    if tunables:
        env[VARIABLE] = tunables
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
