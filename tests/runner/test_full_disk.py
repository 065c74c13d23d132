"""A full disk: every write that fails for space says so, naming the file system and the file,
and a results line that a full disk (or a crash) left part-written is recovered from the cells."""

from __future__ import annotations

import builtins
import errno
import json
import os

import pytest
import torch

from zoo.io import NoSpaceError, atomic_save, atomic_write_text, write_marker
from zoo.io.atomic import mount_point
from zoo.runner.bench import run_suite
from zoo.runner.report import load_report
from zoo.runner.storage import Results
from zoo.runner.storage.jsonl import append_line

from .conftest import tiny_suite


@pytest.fixture
def full_disk(monkeypatch):
    """Files opened for writing by zoo.io go to /dev/full, whose writes fail with ENOSPC."""
    real_open = builtins.open

    def to_full(path, mode="r", *args, **kwargs):
        if "w" in mode:
            real_open(path, mode).close()  # the temporary file exists, as it would
            return real_open("/dev/full", mode, *args, **kwargs)
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr("zoo.io.atomic.open", to_full, raising=False)


@pytest.mark.parametrize("write", [
    lambda p: atomic_save({"w": torch.zeros(1000)}, p),  # inside torch.save: "unexpected pos"
    lambda p: atomic_write_text(p, "x" * 100_000),
])
def test_a_write_that_fails_for_space_says_so(write, tmp_path, full_disk):
    target = tmp_path / "model.pt"
    with pytest.raises(NoSpaceError, match=f"no space left on the file system at "
                       f"{mount_point(tmp_path)} \\(writing {target}\\)"):
        write(target)
    assert os.listdir(tmp_path) == []  # no temporary file left behind, nothing written


def test_an_append_that_fails_for_space_leaves_no_part_of_a_line(tmp_path, monkeypatch):
    path = tmp_path / "results.jsonl"
    append_line(path, b'{"a": 1}\n')
    real_write = os.write

    def half_then_full(fd, data):
        if len(data) > 4:
            return real_write(fd, data[:4])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("zoo.runner.storage.jsonl.os.write", half_then_full)
    with pytest.raises(NoSpaceError, match=f"no space left .*writing {path}"):
        append_line(path, b'{"config_hash": "0123456789abcdef"}\n')
    assert path.read_bytes() == b'{"a": 1}\n'


def test_marker_on_a_full_disk_says_so(tmp_path, monkeypatch):
    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("pathlib.Path.touch", full)
    with pytest.raises(NoSpaceError, match="no space left"):
        write_marker(tmp_path / "done")


def test_a_part_written_last_results_line_is_rebuilt_from_the_cells(tmp_path, caplog):
    out = tmp_path / "results"
    run_suite(tiny_suite(), out=out, device="cpu", progress=False)
    whole = (out / "results.jsonl").read_bytes()
    expected = load_report(out).rows()
    first, second = whole.splitlines(keepends=True)
    (out / "results.jsonl").write_bytes(first + second[: len(second) // 2])  # a torn append
    with caplog.at_level("WARNING"):
        assert load_report(out).rows() == expected  # a reader takes that cell from its folder
    assert "cut short" in caplog.text
    assert (out / "results.jsonl").read_bytes() == first + second[: len(second) // 2]
    caplog.clear()
    with caplog.at_level("WARNING"):
        outcome = run_suite(tiny_suite(), out=out, device="cpu", progress=False)
    assert outcome.skipped == 2 and not outcome.finished  # nothing ran again
    assert "cut off its last line" in caplog.text
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(map(json.dumps, lines)) == sorted(
        json.dumps(json.loads(line)) for line in whole.splitlines())
    Results.open(out, create=False)


def test_a_line_that_is_not_json_in_the_middle_is_still_refused(tmp_path):
    out = tmp_path / "results"
    run_suite(tiny_suite(), out=out, device="cpu", progress=False)
    first, second = (out / "results.jsonl").read_bytes().splitlines(keepends=True)
    (out / "results.jsonl").write_bytes(first[:10] + b"\n" + second)
    with pytest.raises(Exception, match="line 1 is not JSON"):
        Results.open(out, create=False)
