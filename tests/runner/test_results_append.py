"""Issue 16 (the runner at scale): results.jsonl grows by appending one line per finished cell,
read once per writer rather than once per cell, and a line cut short by a kill is dropped when read
and rebuilt from its cell folder by the next writer."""

from __future__ import annotations

import json

from zoo.runner.storage import Results

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


def test_a_line_cut_short_by_a_kill_is_rebuilt_from_its_cell(tmp_path):
    root = tmp_path / "out"
    Results.open(root)
    cell = root / "cells" / B
    cell.mkdir(parents=True)
    (cell / "result.json").write_text(json.dumps(_line(B)))
    (cell / "done").write_text("")
    (root / "results.jsonl").write_text(json.dumps(_line(A)) + "\n" + '{"config_hash": "bb')
    results = Results.open(root)  # the unfinished line is no corruption
    assert [r["config_hash"] for r in results.results()] == [A]
    with results.writer():
        results.sync_results()
    assert (root / "results.jsonl").read_text().endswith("}\n")
    assert [r["config_hash"] for r in results.results()] == [A, B]
