"""Keep freed memory inside the process while cells run on the CPU (glibc's malloc only).

Every training step frees and re-allocates the same large buffers (a Conv4 activation of an
80-image episode is 16 MB). With glibc's defaults a buffer above the dynamic mmap threshold is
handed back to the kernel when freed, and the free space at the top of the heap is trimmed, so
the next step gets fresh zero-filled pages: thousands of page faults per step, and how many
depends on the allocation order of the method, not on its arithmetic. Raising both thresholds
keeps those pages in the heap for reuse. ``benchmarks/allocator.py`` measures the effect side by
side (page faults and time per training step, with and without).

The setting is process-wide, so only the runner applies it (``run_unit``), never an import; it is
recorded with each result (``env.json`` -> ``malloc``). ``ZOO_MALLOC=default`` leaves glibc alone.
A benchmark that times calls as cells run them applies it too, and measures a call's peak memory
inside :func:`returning_freed_memory` (the resident set only grows with the call's own buffers
there, not with pages kept from earlier calls).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import platform
from collections.abc import Iterator

from zoo.io import c_library

log = logging.getLogger(__name__)

# mallopt parameters from glibc's <malloc.h>
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# the largest mmap threshold glibc accepts on 64-bit (HEAP_MAX_SIZE / 2): larger buffers are rare
# and still mapped; a trim threshold this large means the heap is never trimmed while cells run
MMAP_THRESHOLD = 32 * 2**20
TRIM_THRESHOLD = 2**31 - 1
GLIBC_DEFAULT_THRESHOLD = 128 * 2**10  # both thresholds' initial values in glibc

_state: str | None = None


def retain_freed_memory() -> str:
    """Apply the setting once per process; returns what is in effect: ``"retain"`` (applied),
    ``"default"`` (``ZOO_MALLOC=default``) or ``"unsupported"`` (not glibc)."""
    global _state
    if _state is not None:
        return _state
    if os.environ.get("ZOO_MALLOC", "retain") == "default":
        _state = "default"
    elif _libc() is None:
        _state = "unsupported"
    else:
        ok = _set_thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD)
        _state = "retain" if ok else "unsupported"
        if not ok:
            log.warning("glibc refused the malloc thresholds; training runs with its defaults")
    return _state


@contextlib.contextmanager
def returning_freed_memory() -> Iterator[None]:
    """Inside the block, glibc's initial thresholds (a freed buffer above 128 KiB goes back to the
    kernel, the heap's free top is trimmed), after handing back what the process holds free; the
    retaining setting again after it. Where :func:`retain_freed_memory` is not in effect this
    only hands back the free memory. What it is for: the growth of the resident set across the
    block is then the block's own peak of live buffers."""
    retaining = _state == "retain"
    if retaining:
        _set_thresholds(GLIBC_DEFAULT_THRESHOLD, GLIBC_DEFAULT_THRESHOLD)
    if _libc() is not None:
        _libc().malloc_trim(0)
    try:
        yield
    finally:
        if retaining:
            _set_thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD)


def _set_thresholds(mmap: int, trim: int) -> bool:
    libc = _libc()
    return libc is not None and (libc.mallopt(M_MMAP_THRESHOLD, ctypes.c_int(mmap)) == 1
                                 and libc.mallopt(M_TRIM_THRESHOLD, ctypes.c_int(trim)) == 1)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """glibc, or None on another C library (``platform.libc_ver`` reads the interpreter's file:
    asked once)."""
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    return c_library() if glibc else None


def malloc_setting() -> str:
    """What :func:`retain_freed_memory` put in effect in this process (``"default"`` if never
    called), for the environment record of a result."""
    return _state or "default"
