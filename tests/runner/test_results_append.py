"""Issue 16 (the runner at scale): results.jsonl grows by appending one line per finished cell,
read once per writer rather than once per cell. A ``done`` marker is written only after the
files it declares complete were flushed to the disk (one flush per training and per unit, not an
fsync per file)."""

from __future__ import annotations

from pathlib import Path

import zoo.runner.cell
import zoo.runner.train
from zoo.io import atomic_write_text as write
from zoo.runner.bench import run_suite
from zoo.runner.storage import Results

from .conftest import tiny_suite

A, B = "a" * 16, "b" * 16


def _line(h: str) -> dict:
    return {"config_hash": h, "accuracy": 0.5}


def test_lines_are_appended_once_and_the_file_is_read_once_per_writer(tmp_path, monkeypatch):
    results = Results.open(tmp_path / "out")
    reads = []
    original = Results.results
    monkeypatch.setattr(Results, "results", lambda self: reads.append(1) or original(self))
    with results.writer():
        results.add_result(_line(A))
        first = (results.root / "results.jsonl").read_bytes()
        results.add_result(_line(B))
        results.add_result(_line(A))  # a cell's line is written once
    text = (results.root / "results.jsonl").read_bytes()
    assert text.startswith(first) and len(text.splitlines()) == 2
    assert len(reads) == 1
    assert [r["config_hash"] for r in original(results)] == [A, B]


def test_every_done_marker_follows_a_flush_of_what_it_declares_complete(tmp_path, monkeypatch):
    flushed: set[Path] = set()  # files written before the last flush
    written: list[Path] = []

    def track(path, text):
        if Path(path).name == "done":  # everything beside it was flushed before it
            siblings = {p for p in Path(path).parent.iterdir() if not p.name.startswith(".")}
            assert siblings <= flushed, siblings - flushed
        written.append(Path(path))
        return write(path, text)

    def flush(path):
        flushed.update(p for p in Path(path).rglob("*") if p.is_file())

    for module in (zoo.runner.cell, zoo.runner.train):
        monkeypatch.setattr(module, "atomic_write_text", track)
        monkeypatch.setattr(module, "sync_to_disk", flush)
    outcome = run_suite(tiny_suite(), out=tmp_path / "out", device="cpu", progress=False)
    assert len(outcome.finished) == 2
    assert sum(p.name == "done" for p in written) == 3  # the training and its 2 cells
