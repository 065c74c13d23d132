"""Two ``zoo bench`` processes never write one results folder at once (they would lose lines of
results.jsonl): the folder has one writer at a time; a second is refused and told who holds it. ``zoo report``
on a folder whose results.jsonl is gone rebuilds the table from the cells."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from zoo.runner.bench import run_suite
from zoo.runner.report import load_report
from zoo.runner.storage import Results, ResultsFolderBusyError

from .conftest import tiny_suite

HOLD = ("import sys; from zoo.runner.storage import Results\n"
        "with Results.open(sys.argv[1]).writer():\n"
        "    print('holding', flush=True); sys.stdin.readline()\n")


def test_a_second_writer_is_refused_and_told_who_holds_the_folder(tmp_path):
    out = tmp_path / "results"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "holding\n"
        with pytest.raises(ResultsFolderBusyError) as info:
            run_suite(tiny_suite(), out=out, device="cpu", progress=False)
        message = str(info.value)
        assert f"pid {holder.pid} on {socket.gethostname()}" in message
        assert "wait for it to finish or choose another --out" in message
        assert not (out / "cells").exists()  # refused before anything was written
    finally:
        holder.communicate("\n", timeout=60)
    assert holder.returncode == 0
    outcome = run_suite(tiny_suite(), out=out, device="cpu", progress=False)  # released: runs
    assert len(outcome.finished) == 2
    assert os.listdir(out)  # and the folder still validates with the lock files in it
    Results.open(out, create=False)


def test_report_rebuilds_from_the_cells_when_results_jsonl_is_missing(tmp_path):
    out = tmp_path / "results"
    run_suite(tiny_suite(), out=out, device="cpu", progress=False)
    expected = load_report(out).rows()
    (out / "results.jsonl").unlink()
    assert load_report(out).rows() == expected
    assert not (out / "results.jsonl").exists()  # reading does not write
