"""The runner at scale: ``zoo report`` parses each cell's episode records once (the
folder's validation and the tables share them) and its output is the same as when the tables read
the records afresh; a corrupt record is still named by file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zoo.runner import storage
from zoo.runner.bench import run_suite
from zoo.runner.report import FORMATS, render, write_report
from zoo.runner.storage import Results, ResultsFolderError

from .conftest import tiny_suite


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

    monkeypatch.setattr(storage, "read_jsonl", counting)
    write_report(folder, plots=False)
    episodes = [p for p in parsed if p.name == "episodes.jsonl"]
    assert len(episodes) == len(set(episodes)) == len(list(folder.glob("cells/*/episodes.jsonl")))
    assert [p.name for p in parsed].count("results.jsonl") == 1


def test_the_report_is_the_same_with_records_read_afresh(folder, monkeypatch):
    kept = {fmt: render(write_report(folder, plots=False), fmt) for fmt in FORMATS}
    files = {p.name: p.read_bytes() for p in (folder / "report").iterdir()}
    opened = Results.open

    def fresh(root, create=True, keep_records=False):
        return opened(root, create, keep_records=False)

    monkeypatch.setattr(Results, "open", fresh)
    assert {fmt: render(write_report(folder, plots=False), fmt) for fmt in FORMATS} == kept
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


@pytest.mark.parametrize("text", ['{"a": [1, 2.5]}', '{"a": 1}\n', ' {"a": 1}', '{"a": 1} x',
                                  '{not json', "", "1 2", '{"a": 1}\x0b', '{"a": 1}\r\n\t '])
def test_json_values_parse_as_json_loads_parses_them(text):
    # the fast path skips json.loads' wrapping only where the text is one value and whitespace
    try:
        expected = json.loads(text)
    except json.JSONDecodeError as exc:
        with pytest.raises(json.JSONDecodeError, match=exc.msg):
            storage._loads(text)
    else:
        assert storage._loads(text) == expected


# -- the validation split between this process and a forked child (large folders) --------------

@pytest.fixture
def split(monkeypatch) -> list[int]:
    """Check any folder in two processes (as ``zoo report`` does from ``PARALLEL_RUNS`` run folders
    on, in a process without other threads: here the runner's tqdm monitor sleeps beside); the
    list records each fork."""
    forks: list[int] = []
    forked = storage._forked

    def counting(fn):
        forks.append(1)
        return forked(fn)

    monkeypatch.setattr(storage, "PARALLEL_RUNS", 0)
    monkeypatch.setattr(storage, "_can_fork", lambda: True)
    monkeypatch.setattr(storage, "_forked", counting)
    return forks


def test_the_split_check_keeps_the_same_records_once(folder, split, monkeypatch):
    serial = Results.open(folder, create=False, keep_records=False)
    parsed: list[str] = []
    read = storage.read_jsonl
    monkeypatch.setattr(storage, "read_jsonl", lambda path: parsed.append(str(path)) or read(path))
    results = Results.open(folder, create=False, keep_records=True)
    assert split == [1]
    cells = sorted(results.run_files("cells"))
    assert cells == sorted(serial.run_files("cells")) and len(cells) == 4
    assert results.run_files("train") == serial.run_files("train")
    # the records are kept by this process (each episodes file parsed once, here) and equal to
    # those read afresh
    assert sorted(p for p in parsed if p.endswith("episodes.jsonl")) == sorted(
        str(folder / "cells" / c / "episodes.jsonl") for c in cells)
    for c in cells:
        assert results.episodes(c) == serial.episodes(c) and results.episodes(c)
        assert results.training(c) == serial.training(c) is not None


def _copy(folder: Path, tmp_path: Path) -> tuple[Path, list[Path]]:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    return copy, sorted((copy / "cells").iterdir())


@pytest.mark.parametrize("file", ["result.json", "env.json", "config.json",  # the child's
                                  "training.json", "episodes.jsonl"])  # this process's
def test_a_corrupt_file_is_named_by_either_process(folder, tmp_path, split, file):
    copy, cells = _copy(folder, tmp_path)
    (cells[1] / file).write_text("{not json\n")
    with pytest.raises(ResultsFolderError, match=f"{cells[1].name}/{file}: .*not (readable )?JSON"):
        write_report(copy, plots=False)
    assert split == [1]


def test_the_first_problem_in_folder_order_is_named(folder, tmp_path, split):
    copy, cells = _copy(folder, tmp_path)
    (cells[1] / "result.json").write_text("{not json")  # the child finds this one
    (cells[2] / "episodes.jsonl").write_text("{not json\n")  # this process this one
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
    assert len(split) == 6  # each check was split


def test_a_failed_child_leaves_its_share_to_this_process(folder, tmp_path, split, monkeypatch):
    def fail(paths):
        raise RuntimeError("the child fails")

    monkeypatch.setattr(storage, "_read_ahead", fail)  # in the child, before it checks anything
    copy, cells = _copy(folder, tmp_path)
    report, fresh = write_report(copy, plots=False), write_report(folder, plots=False)
    assert {fmt: render(report, fmt) for fmt in FORMATS} == {fmt: render(fresh, fmt)
                                                             for fmt in FORMATS}
    (cells[2] / "result.json").write_text("{not json")
    with pytest.raises(ResultsFolderError, match=f"{cells[2].name}/result.json"):
        write_report(copy, plots=False)
    assert len(split) == 3


def test_files_are_read_as_utf8_text(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes('{"a": "\u00e9"}\r\n'.encode())
    assert storage._read_json(path) == {"a": "\u00e9"}
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ResultsFolderError, match="a.json: is not readable JSON .*utf-8"):
        storage._read_json(path)


def test_without_a_fork_everything_is_checked_here(folder, tmp_path, split, monkeypatch):
    def no_fork():
        raise OSError("no more processes")

    monkeypatch.setattr(storage.os, "fork", no_fork)
    copy, cells = _copy(folder, tmp_path)
    (cells[2] / "env.json").write_text("{not json")
    with pytest.raises(ResultsFolderError, match=f"{cells[2].name}/env.json"):
        Results.open(copy, create=False, keep_records=True)
    assert split == [1]


def test_zoo_bench_reports_without_the_progress_bars_thread(tmp_path, monkeypatch):
    """`zoo bench` ends tqdm's monitor thread before its report, so a report of many cells may
    split its checks into a forked child (which it does only without other threads)."""
    import threading

    import zoo.runner.report as report
    from zoo.cli import main

    threads = []
    write = report.write_report

    def spy(*args, **kwargs):
        threads.append(threading.active_count())
        return write(*args, **kwargs)

    monkeypatch.setattr(report, "write_report", spy)
    sets = ["ways=[3]", "shots=[1]", "query=2", "train_query=2", "train_episodes=4",
            "val_episodes=2", "val_every=2", "test_episodes=2", "test_datasets=[\"glyphs\"]"]
    assert main(["bench", "quick", "--methods", "protonet", "--out", str(tmp_path), "--device",
                 "cpu", *(a for s in sets for a in ("--set", s))]) == 0
    assert threads == [1]


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


# -- reading ahead only what is not in the page cache ------------------------------------------

def test_files_in_the_page_cache_are_not_read_ahead(tmp_path, monkeypatch):
    """A read of each sampled file's first byte that may not wait for the disk (``RWF_NOWAIT``)
    says whether the folder is cached; any file it cannot say it of (on the disk, a file system
    without the flag such as tmpfs, a system without it) has everything read ahead."""
    import errno

    paths = []
    for i in range(3 * storage.READ_AHEAD_SAMPLE):
        (tmp_path / f"{i}.json").write_text("{}")
        paths.append(str(tmp_path / f"{i}.json"))
    asked: list[int] = []
    probed: list[int] = []
    monkeypatch.setattr(storage.os, "posix_fadvise", lambda fd, *a: asked.append(fd))

    def answer(error):
        def preadv(fd, buffers, offset, flags):
            assert flags == storage.os.RWF_NOWAIT
            probed.append(fd)
            if error is not None:
                raise OSError(error, errno.errorcode[error])
            return 1
        return preadv

    monkeypatch.setattr(storage.os, "preadv", answer(None))  # what a cached file answers
    storage._read_ahead(paths)
    assert asked == [] and len(probed) == storage.READ_AHEAD_SAMPLE
    for error in (errno.EAGAIN, errno.EOPNOTSUPP):  # on the disk; a file system without it
        monkeypatch.setattr(storage.os, "preadv", answer(error))
        assert not storage._in_cache(paths)
        asked.clear()
        storage._read_ahead(paths)
        assert len(asked) == len(paths)
    monkeypatch.delattr(storage.os, "RWF_NOWAIT")  # a system that cannot be asked
    assert not storage._in_cache(paths)
    assert not storage._in_cache([])


def test_numbers_and_pooled_numbers_are_the_arrays_of_the_lists():
    import numpy as np

    from zoo.tasks.base import numbers, pooled

    records = [{"a": 0.1, "q": [1, 0.5]}, {"a": 2, "q": []}, {"a": float("nan"), "q": [True, 3]}]
    for got, expected in ((numbers(records, "a"), [r["a"] for r in records]),
                          (pooled(records, "q"), [x for r in records for x in r["q"]])):
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, np.asarray(expected, dtype=np.float64))
    assert numbers([], "a").shape == pooled([], "q").shape == (0,)
