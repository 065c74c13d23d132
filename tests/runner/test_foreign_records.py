"""A cell's records are checked against the cell they are in: episode records copied from another
cell, a result copied from another cell, a missing or shortened record file are each named (exit
2, nothing changed), never reported as the cell's numbers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from zoo.cli import main
from zoo.runner.bench import run_suite
from zoo.runner.storage import Results, ResultsFolderError

from .conftest import tiny_suite


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("foreign") / "out"
    assert len(run_suite(tiny_suite(), out=out, device="cpu", progress=False).finished) == 2
    return out


def _cells(folder: Path) -> tuple[Path, Path]:
    """The two cells (glyphs, digits) of the tiny suite, glyphs first."""
    by_data = {json.loads((c / "config.json").read_text())["dataset"]: c
               for c in (folder / "cells").iterdir()}
    return by_data["glyphs"], by_data["digits"]


def _refused(folder: Path, capsys, *expected: str) -> None:
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert main(["report", str(folder), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert all(e in err for e in expected), err
    assert "Traceback" not in err
    with pytest.raises(ResultsFolderError):
        run_suite(tiny_suite(), out=folder, device="cpu", progress=False)
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before


def test_every_record_names_its_cell_and_the_result_its_records(finished):
    for cell in _cells(finished):
        records = Results.open(finished, create=False).episodes(cell.name)
        assert records and {r["cell"] for r in records} == {cell.name}
        assert [r["index"] for r in records] == list(range(len(records)))


def test_episode_records_of_another_cell_are_named(finished, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    glyphs, digits = _cells(out)
    shutil.copyfile(glyphs / "episodes.jsonl", digits / "episodes.jsonl")
    _refused(out, capsys, f"{digits}/episodes.jsonl: line 1 is a record of cell {glyphs.name}")


def test_a_missing_records_file_is_named(finished, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    _, digits = _cells(out)
    (digits / "episodes.jsonl").unlink()
    _refused(out, capsys, f"{digits}/episodes.jsonl: is missing, though the cell is marked done")


def test_a_result_of_another_cell_is_named(finished, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    glyphs, digits = _cells(out)
    shutil.copyfile(glyphs / "result.json", digits / "result.json")
    _refused(out, capsys, f"{digits}/result.json: is the result of cell {glyphs.name}")


def test_records_other_than_the_result_s_are_named(finished, tmp_path, capsys):
    """A record file shortened (its last episode dropped), or with an episode left out."""
    for drop in (-1, 0):
        out = tmp_path / f"out{drop}"
        shutil.copytree(finished, out)
        _, digits = _cells(out)
        lines = (digits / "episodes.jsonl").read_text().splitlines(keepends=True)
        del lines[drop]
        (digits / "episodes.jsonl").write_text("".join(lines))
        _refused(out, capsys, f"{digits}/episodes.jsonl: ",
                 "not the records the cell's result.json" if drop == -1 else
                 "line 1 is the record of episode 1, not of episode 0")


def test_an_unfinished_cell_does_not_resume_from_another_cell_s_records(finished, tmp_path,
                                                                        capsys):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    glyphs, digits = _cells(out)
    for name in ("done", "result.json"):
        (digits / name).unlink()
    shutil.copyfile(glyphs / "episodes.jsonl", digits / "episodes.jsonl")
    _refused(out, capsys, f"line 1 is a record of cell {glyphs.name}")
