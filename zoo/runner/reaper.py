"""Processes that end with the process that started them, however it ends.

A local Ray started by the Ray executor runs as processes of its own (GCS, raylet, dashboard,
workers) that a ``kill -9`` of the driver leaves running, holding CPUs and memory. Before the
executor uses them it starts a small watcher (``python -m zoo.runner.reaper PARENT PID...``):
once its parent is gone, the watcher ends each process it was given and every descendant of it,
then exits. It needs ``psutil``: installed, or the copy Ray ships (put on the path by
importing Ray).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import time
from collections.abc import Sequence

POLL_SECONDS = 0.5
GRACE_SECONDS = 3.0


def reap_with_parent(pids: Sequence[int]) -> subprocess.Popen:
    """Start the watcher of ``pids`` for this process; ``terminate`` it after a normal end."""
    return subprocess.Popen([sys.executable, "-m", "zoo.runner.reaper", str(os.getpid()),
                             *map(str, pids)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, start_new_session=True)


def _psutil():
    try:
        import psutil
    except ImportError:  # Ray's own copy, on the path once Ray is imported
        importlib.import_module("ray")
        psutil = importlib.import_module("psutil")
    return psutil


def main(argv: Sequence[str]) -> int:
    psutil = _psutil()

    parent, pids = int(argv[0]), [int(p) for p in argv[1:]]
    watched = []
    for pid in pids:  # psutil.Process remembers its start time: a reused pid is not taken
        with contextlib.suppress(psutil.NoSuchProcess):
            watched.append(psutil.Process(pid))
    while os.getppid() == parent:
        time.sleep(POLL_SECONDS)
    doomed = []
    for process in watched:
        try:
            doomed += [process, *process.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    for process in doomed:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
    _, alive = psutil.wait_procs(doomed, timeout=GRACE_SECONDS)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
