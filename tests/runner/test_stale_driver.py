"""What a killed Ray driver leaves: its shared-folder marker is recognised as stale (the folder
resumes, locally or with Ray, without a hand edit), and the processes of the local Ray it
started end with it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from zoo.runner.bench import run_suite
from zoo.runner.executors import shared_folder_marker
from zoo.runner.storage import Results
from zoo.runner.storage.lock import writer_lock

from .conftest import tiny_suite


def test_a_killed_drivers_marker_is_stale_and_the_next_writer_removes_it(tmp_path):
    out = tmp_path / "results"
    first = run_suite(tiny_suite(), out=out, device="cpu", progress=False)
    left = out / f".zoo-shared-{uuid.uuid4().hex}"  # as `kill -9` of a Ray driver leaves it
    left.write_text("a-host")
    Results.open(out, create=False)  # a reader accepts the folder and leaves the marker
    assert left.exists()
    again = run_suite(tiny_suite(), out=out, device="cpu", progress=False)
    assert again.skipped == len(first.cells) and not left.exists()


def test_a_live_drivers_marker_is_its_own(tmp_path):
    """The marker is made by the folder's writer, so the writer's own marker stays while it
    holds the lock; other names that only look alike are still refused."""
    root = tmp_path / "results"
    Results.open(root)
    with writer_lock(root):
        marker = shared_folder_marker(root)
        Results.open(root, create=False)
        assert marker.exists()
    (root / ".zoo-shared-not-hex").write_text("")
    with pytest.raises(Exception, match="is not part of a zoo results folder"):
        Results.open(root, create=False)


WATCHED = ("import subprocess, sys, time; from zoo.runner.reaper import reap_with_parent; "
           "child = subprocess.Popen(['sleep', '300'], start_new_session=True); "
           "reaper = reap_with_parent([child.pid]); "
           "print(child.pid, reaper.pid, flush=True); time.sleep(300)")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return True
    return state == "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_processes_given_to_the_reaper_end_when_their_parent_is_killed(tmp_path):
    pytest.importorskip("ray")  # the executor starts a reaper for the local Ray it starts
    parent = subprocess.Popen([sys.executable, "-c", WATCHED], stdout=subprocess.PIPE, text=True)
    child, reaper = map(int, parent.stdout.readline().split())
    try:
        time.sleep(1.0)
        assert not _gone(child) and not _gone(reaper)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while not (_gone(child) and _gone(reaper)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(child) and _gone(reaper)
    finally:
        for pid in (child, reaper, parent.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
