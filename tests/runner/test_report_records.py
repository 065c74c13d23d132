"""Issue 16, the runner at scale: ``zoo report`` parses each cell's episode records once (the
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
