"""A symbolic link inside a results folder is refused with a message before anything is written:
no write goes through it to a place outside the folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from zoo.cli import main
from zoo.runner.bench import run_suite
from zoo.runner.report import write_report
from zoo.runner.storage import Results, ResultsFolderError
from zoo.runner.storage.jsonl import append_line

from .conftest import TINY, tiny_suite


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("finished") / "results"
    run_suite(tiny_suite(), out=out, device="cpu", progress=False)
    write_report(out, plots=False)
    return out


def _folder(finished: Path, tmp_path: Path) -> tuple[Path, Path]:
    out, outside = tmp_path / "results", tmp_path / "outside"
    shutil.copytree(finished, out, symlinks=True)
    outside.mkdir()
    return out, outside


def _link_results_jsonl(out: Path, outside: Path) -> Path:
    target = outside / "results.jsonl"
    shutil.move(out / "results.jsonl", target)
    (out / "results.jsonl").symlink_to(target)
    return target


def _link_report(out: Path, outside: Path) -> Path:
    target = outside / "report"
    shutil.move(out / "report", target)
    (out / "report").symlink_to(target)
    return target


def _link_cell(out: Path, outside: Path) -> Path:
    cell = sorted((out / "cells").iterdir())[0]
    target = outside / cell.name
    shutil.move(cell, target)
    cell.symlink_to(target)
    return target


def _link_cell_file(out: Path, outside: Path) -> Path:
    cell = sorted((out / "cells").iterdir())[0]
    target = outside / "result.json"
    shutil.move(cell / "result.json", target)
    (cell / "result.json").symlink_to(target)
    return target


def _link_lock(out: Path, outside: Path) -> Path:
    target = outside / "writer.lock"
    target.write_text("")
    (out / "writer.lock").unlink(missing_ok=True)
    (out / "writer.lock").symlink_to(target)
    return target


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("link", [_link_results_jsonl, _link_report, _link_cell,
                                  _link_cell_file, _link_lock])
def test_a_link_is_refused_and_nothing_outside_is_written(link, finished, tmp_path):
    out, outside = _folder(finished, tmp_path)
    target = link(out, outside)
    before = _snapshot(outside)
    with pytest.raises(ResultsFolderError, match="is a symbolic link .*never writes through"):
        Results.open(out, create=False)
    with pytest.raises(ResultsFolderError, match=f"{target.name}.*is a symbolic link"):
        run_suite(tiny_suite(test_episodes=TINY["suite"]["test_episodes"] + 1), out=out,
                  device="cpu", progress=False)
    with pytest.raises(ResultsFolderError, match="is a symbolic link"):
        write_report(out, plots=False)
    assert _snapshot(outside) == before


@pytest.mark.parametrize("link", [_link_cell, _link_lock])
def test_force_and_report_say_so_without_a_traceback(link, finished, tmp_path, capsys):
    out, outside = _folder(finished, tmp_path)
    link(out, outside)
    before = _snapshot(outside)
    suite = Path(tmp_path / "tiny.toml")
    suite.write_text("[suite]\n" + "".join(f"{k} = {json.dumps(v)}\n"
                                            for k, v in TINY["suite"].items()))
    for argv in (["bench", str(suite), "--out", str(out), "--force", "--no-progress"],
                 ["report", str(out)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "is a symbolic link" in err and "Traceback" not in err
    assert _snapshot(outside) == before


def test_an_append_never_follows_a_link(tmp_path):
    target = tmp_path / "elsewhere.jsonl"
    target.write_bytes(b"")
    (tmp_path / "results.jsonl").symlink_to(target)
    with pytest.raises(OSError):
        append_line(tmp_path / "results.jsonl", b"{}\n")
    assert target.read_bytes() == b""
