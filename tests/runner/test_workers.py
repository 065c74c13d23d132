"""The workers of ``zoo bench --workers 2`` exit within about a second of their parent's death,
rather than training on for minutes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import TINY

RUN = ("import json, sys; from pathlib import Path; from zoo.runner.bench import run_suite; "
       "from zoo.plugins import registry; from zoo.runner.suite import suite_from_dict; "
       "run_suite(suite_from_dict('tiny', json.loads(sys.argv[1]), registry=registry()), "
       "out=Path(sys.argv[2]), "
       "device='cpu', workers=2, progress=False)")


def children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_workers_exit_when_their_parent_is_killed(tmp_path):
    raw = json.dumps({"suite": {**TINY["suite"], "shots": [1, 2], "train_episodes": 100000}})
    parent = subprocess.Popen([sys.executable, "-c", RUN, raw, str(tmp_path / "out")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not list((tmp_path / "out").glob("train/*/checkpoint.pt")):  # workers are training
            assert parent.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        workers += [p for p in children(parent.pid)
                    if b"resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(workers) == 2
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while any(alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in workers if alive(p)], "workers outlived their parent"
    finally:
        parent.kill()
        for p in workers:
            if alive(p):
                os.kill(p, signal.SIGKILL)


ORPHAN = ("import os, sys, time; from pathlib import Path; "
          "from zoo.runner.executors import exit_with_parent; from zoo.io import atomic_write_text; "
          "parent = int(sys.argv[1]); exit_with_parent(parent, every=3600); "
          "print('ready', flush=True); "
          "[time.sleep(0.01) for _ in iter(lambda: os.getppid() == parent, False)]; "
          "atomic_write_text(Path(sys.argv[2]), 'late'); "
          "Path(sys.argv[2] + '.after').write_text('still running')")
PARENT = ("import os, subprocess, sys, time; "
          "w = subprocess.Popen([sys.executable, '-c', sys.argv[1], str(os.getpid()), sys.argv[2]], "
          "stdout=subprocess.PIPE, text=True); "
          "print(w.pid, w.stdout.readline().strip(), flush=True); time.sleep(300)")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_worker_writes_nothing_once_its_parent_is_gone(tmp_path):
    """The worker's watcher polls rarely here (an hour), so only the check before each write
    stands between the worker and a write after its parent, the lock's holder, was killed: the
    worker tries to write as soon as it sees its parent gone."""
    target = tmp_path / "result.json"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, ORPHAN, str(target)],
                              stdout=subprocess.PIPE, text=True)
    worker, ready = parent.stdout.readline().split()
    assert ready == "ready"
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30
    while alive(int(worker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(int(worker))
    assert not target.exists() and not Path(f"{target}.after").exists()
    assert not list(tmp_path.glob(".*.tmp"))
