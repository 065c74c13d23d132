"""``zoo report`` parses each cell's episode records once (the folder's validation and the tables
share them) and its output is the same as when the tables read the records afresh; a corrupt
record is still named by file and line, and the first problem of a folder by the folders' order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zoo.runner import storage
from zoo.runner.bench import run_suite
from zoo.runner.report import FORMATS, render, write_report
from zoo.runner.storage import Results, ResultsFolderError, layout
from zoo.runner.storage import results as results_module

from .conftest import tiny_suite

# the formats render() gives as text; the HTML page is a file, compared with the others below
TEXT_FORMATS = tuple(f for f in FORMATS if f != "html")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report-records")
    run_suite(tiny_suite(seeds=[0, 1]), out=out, device="cpu", progress=False)
    return out


def test_each_records_file_is_parsed_once(folder, monkeypatch):
    parsed: list[Path] = []
    read = storage.read_jsonl

    def counting(path: Path):
        parsed.append(Path(path))
        return read(path)

    appended = results_module.read_appended

    def counting_appended(path: Path):
        parsed.append(Path(path))
        return appended(path)

    for module in (layout, results_module):
        monkeypatch.setattr(module, "read_jsonl", counting)
    monkeypatch.setattr(results_module, "read_appended", counting_appended)
    write_report(folder, plots=False)
    episodes = [p for p in parsed if p.name == "episodes.jsonl"]
    assert len(episodes) == len(set(episodes)) == len(list(folder.glob("cells/*/episodes.jsonl")))
    assert [p.name for p in parsed].count("results.jsonl") == 1


def test_the_report_is_the_same_with_records_read_afresh(folder, monkeypatch):
    kept = {fmt: render(write_report(folder, plots=False), fmt) for fmt in TEXT_FORMATS}
    files = {p.name: p.read_bytes() for p in (folder / "report").iterdir()}
    opened = Results.open

    def fresh(root, create=True, keep_records=False):
        return opened(root, create, keep_records=False)

    monkeypatch.setattr(Results, "open", fresh)
    assert {fmt: render(write_report(folder, plots=False), fmt) for fmt in TEXT_FORMATS} == kept
    assert {p.name: p.read_bytes() for p in (folder / "report").iterdir()} == files


def test_a_corrupt_record_is_still_named(folder, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    path = sorted(copy.glob("cells/*/episodes.jsonl"))[0]
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    with pytest.raises(ResultsFolderError, match=r"episodes.jsonl: line 2 is not JSON"):
        write_report(copy, plots=False)
    path.write_text("\n".join([lines[0], json.dumps([1, 2])]) + "\n")
    with pytest.raises(ResultsFolderError, match=r"line 2 is not a JSON object"):
        write_report(copy, plots=False)


def test_the_records_kept_are_those_read_afresh_each_parsed_once(folder, monkeypatch):
    serial = Results.open(folder, create=False, keep_records=False)
    parsed: list[str] = []
    read = storage.read_jsonl
    monkeypatch.setattr(layout, "read_jsonl", lambda path: parsed.append(str(path)) or read(path))
    results = Results.open(folder, create=False, keep_records=True)
    cells = sorted(results.run_files("cells"))
    assert cells == sorted(serial.run_files("cells")) and len(cells) == 4
    assert results.run_files("train") == serial.run_files("train")
    assert sorted(p for p in parsed if p.endswith("episodes.jsonl")) == sorted(
        str(folder / "cells" / c / "episodes.jsonl") for c in cells)
    fresh = {c: (serial.episodes(c), serial.training(c)) for c in cells}
    monkeypatch.setattr(results_module, "read_jsonl", None)  # kept: nothing is read again
    for c in cells:
        assert results.episodes(c) == fresh[c][0] and results.episodes(c)
        assert results.training(c) == fresh[c][1] is not None


# -- the first problem of a folder, in the folders' order --------------------------------------

def _copy(folder: Path, tmp_path: Path) -> tuple[Path, list[Path]]:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    return copy, sorted((copy / "cells").iterdir())


@pytest.mark.parametrize("file", ["result.json", "env.json", "config.json", "training.json",
                                  "episodes.jsonl"])
def test_a_corrupt_file_is_named(folder, tmp_path, file):
    copy, cells = _copy(folder, tmp_path)
    (cells[1] / file).write_text("{not json\n")
    with pytest.raises(ResultsFolderError, match=f"{cells[1].name}/{file}: .*not (readable )?JSON"):
        write_report(copy, plots=False)


def test_the_first_problem_in_folder_order_is_named(folder, tmp_path):
    copy, cells = _copy(folder, tmp_path)
    (cells[1] / "result.json").write_text("{not json")
    (cells[2] / "episodes.jsonl").write_text("{not json\n")
    with pytest.raises(ResultsFolderError, match=f"{cells[1].name}/result.json"):
        Results.open(copy, create=False, keep_records=True)
    (cells[0] / "episodes.jsonl").write_text("{not json\n")
    with pytest.raises(ResultsFolderError, match=f"{cells[0].name}/episodes.jsonl"):
        Results.open(copy, create=False, keep_records=True)
    config = json.loads((cells[0] / "config.json").read_text())  # before its folder's records
    (cells[0] / "config.json").write_text(json.dumps({**config, "seed": 42}))
    with pytest.raises(ResultsFolderError, match=f"{cells[0].name}/config.json: does not match"):
        Results.open(copy, create=False, keep_records=True)
    (cells[3] / "mine.bin").write_text("")  # a foreign file after them: still theirs first
    with pytest.raises(ResultsFolderError, match=f"{cells[0].name}/config.json"):
        Results.open(copy, create=False, keep_records=True)
    (cells[0] / "mine.bin").write_text("")  # before its folder's files: the foreign file
    with pytest.raises(ResultsFolderError, match=f"{cells[0].name}/mine.bin: is not a file"):
        Results.open(copy, create=False, keep_records=True)
    train = sorted((copy / "train").iterdir())[-1]  # trainings come before cells
    (train / "training.json").write_text("{not json")
    with pytest.raises(ResultsFolderError, match=f"{train.name}/training.json"):
        Results.open(copy, create=False, keep_records=True)


def test_files_are_read_as_utf8_text(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes('{"a": "\u00e9"}\r\n'.encode())
    assert storage.read_json(path) == {"a": "\u00e9"}
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ResultsFolderError, match="a.json: is not readable JSON .*utf-8"):
        storage.read_json(path)


# -- reading a records file: each line as json_record reads it ---------------------------------

RECORDS = [{"index": 0, "confidence": [0.1, 1 / 3], "classes": ["a\u2028b", "c\x85d", "\u00e9"]},
           {"index": 1, "nll": float("nan"), "brier": float("inf")},  # json's NaN, Infinity
           {"index": 2, "big": 2 ** 70, "seed": 7372075668801838486}]


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_a_records_file_reads_as_json_record_reads_each_line(tmp_path, ending):
    from zoo.io import json_line, json_record

    path = tmp_path / "episodes.jsonl"
    for records in (RECORDS[:1], RECORDS):  # compact lines only (orjson), and json's lines too
        lines = [json_line(r).decode().rstrip("\n") for r in records]
        path.write_bytes(ending.join(lines).encode() + ending.encode())
        read = list(storage.read_jsonl(path))
        assert len(read) == len(records)  # a line break inside a string is not a line's end
        assert json.dumps(read) == json.dumps([json_record(line) for line in lines]) == \
            json.dumps(records)
    path.write_bytes(b"".join(json_line(r) for r in RECORDS[:1] * 3)[:-1])  # no final newline
    assert storage.read_jsonl(path) == RECORDS[:1] * 3
    path.write_bytes(b"")
    assert storage.read_jsonl(path) == []
    path.write_bytes(json_line(RECORDS[0]) + b"\n" + json_line(RECORDS[0]))  # an empty line
    with pytest.raises(ResultsFolderError, match="line 2 is not JSON"):
        storage.read_jsonl(path)


def test_numbers_and_pooled_numbers_are_the_arrays_of_the_lists():
    import numpy as np

    from zoo.tasks.base import numbers, pooled

    records = [{"a": 0.1, "q": [1, 0.5]}, {"a": 2, "q": []}, {"a": float("nan"), "q": [True, 3]}]
    for got, expected in ((numbers(records, "a"), [r["a"] for r in records]),
                          (pooled(records, "q"), [x for r in records for x in r["q"]])):
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, np.asarray(expected, dtype=np.float64))
    assert numbers([], "a").shape == pooled([], "q").shape == (0,)
