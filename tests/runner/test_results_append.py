"""The runner at scale: results.jsonl grows by appending one line per finished cell,
read once per writer rather than once per cell. A ``done`` marker is written only after the
files it declares complete were flushed to the disk (one flush per group of units, not an fsync
per file); groups of units are sized from the units' measured time."""

from __future__ import annotations

from pathlib import Path

import zoo.runner.cell
import zoo.runner.train
from zoo.io import write_marker
from zoo.plugins import registry
from zoo.runner.bench import run_suite
from zoo.runner.cell import run_units
from zoo.runner.cells import expand_cells
from zoo.runner.executors import Pace
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

    def track(path):
        assert Path(path).name == "done"  # everything beside it was flushed before it
        siblings = {p for p in Path(path).parent.iterdir() if not p.name.startswith(".")}
        assert siblings <= flushed, siblings - flushed
        written.append(Path(path))
        return write_marker(path)

    def flush(path):
        flushed.update(p for p in Path(path).rglob("*") if p.is_file())

    for module in (zoo.runner.cell, zoo.runner.train):
        monkeypatch.setattr(module, "write_marker", track)
        monkeypatch.setattr(module, "sync_to_disk", flush)
    outcome = run_suite(tiny_suite(), out=tmp_path / "out", device="cpu", progress=False)
    assert len(outcome.finished) == 2
    assert sum(p.name == "done" for p in written) == 3  # the training and its 2 cells


def test_a_group_of_units_is_flushed_once_before_all_its_done_markers(tmp_path, monkeypatch):
    flushes: list[int] = []  # how many markers had been written at each flush
    markers: list[Path] = []

    def track(path):
        markers.append(Path(path))
        return write_marker(path)

    monkeypatch.setattr(zoo.runner.cell, "write_marker", track)
    monkeypatch.setattr(zoo.runner.cell, "sync_to_disk", lambda _: flushes.append(len(markers)))
    monkeypatch.setattr(zoo.runner.train, "sync_to_disk", lambda _: flushes.append(-1))
    cells = expand_cells(tiny_suite(seeds=[0, 1], test_episodes=2), ["protonet"], registry=registry())
    units: dict[str, list] = {}
    for cell in cells:
        units.setdefault(cell.train_hash, []).append(cell)
    root = tmp_path / "out"
    Results.open(root)
    outcomes = run_units(list(units.values()), root, None, "cpu", registry=registry())
    assert len(units) == 2 and all(o.result is not None for o in outcomes) and len(outcomes) == 4
    assert flushes == [0]  # one flush, before any marker; none per training
    assert sorted(markers) == sorted([*(root / "train").glob("*/done"),
                                      *(root / "cells").glob("*/done")])
    assert len(markers) == 6  # 2 trainings and their 4 cells


def test_groups_of_units_take_about_the_chosen_time():
    pace = Pace([[i] for i in range(100)], workers=2, seconds=1.0, largest=16)
    assert len(pace.take()) == 1  # nothing measured yet
    pace.record(1, 0.1)
    assert len(pace.take()) == 10
    pace.record(10, 0.01)
    assert len(pace.take()) == 16  # at most `largest`
    pace.record(1, 5.0)
    assert len(pace.take()) == 1  # long units go one by one
    tail = Pace([[i] for i in range(10)], workers=2, seconds=1.0)
    tail.record(1, 0.001)
    assert [len(tail.take()) for _ in range(4)] == [5, 3, 1, 1]  # both workers busy to the end
