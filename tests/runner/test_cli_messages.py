"""File-system errors and Ctrl-C are messages, not tracebacks; a report can be written elsewhere
or only printed, for results that may not be written."""

from __future__ import annotations

import errno

import pytest

import zoo.cli
from zoo.cli import main
from zoo.runner.bench import run_suite
from zoo.runner.plots import SLUG_CHARS, slug, unique_slugs

from .conftest import tiny_suite


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "results"
    run_suite(tiny_suite(), out=out, device="cpu", progress=False)
    return out


def _files(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_a_name_too_long_is_a_message(tmp_path, capsys):
    assert main(["bench", "--out", str(tmp_path / ("x" * 300)), "--set", "train_episodes=2"]) == 2
    err = capsys.readouterr().err
    assert "zoo: error: File name too long" in err and "at most 255 bytes" in err
    assert "Traceback" not in err


def test_long_names_give_figure_files_of_a_usable_length():
    long = "m" * 300
    assert len(slug(long)) == SLUG_CHARS and slug(long) != slug(long[:-1] + "n")
    assert slug("protonet") == "protonet"  # short names are as before
    names = unique_slugs([long, long + "x"])
    assert len(set(names.values())) == 2 and all(len(n) <= SLUG_CHARS for n in names.values())


def test_a_read_only_results_folder_says_where_else_the_report_can_go(finished, tmp_path,
                                                                        monkeypatch, capsys):
    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    before = _files(finished)
    monkeypatch.setattr("zoo.runner.report.atomic_write_text", read_only)
    assert main(["report", str(finished), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "cannot write the report into" in err and "--out REPORT_DIR" in err
    assert "--print-only" in err and "Traceback" not in err
    monkeypatch.undo()
    assert main(["report", str(finished), "--print-only", "--format", "csv"]) == 0
    assert "protonet" in capsys.readouterr().out
    assert _files(finished) == before  # --print-only wrote nothing
    assert main(["report", str(finished), "--no-plots", "--out", str(tmp_path / "elsewhere")]) == 0
    assert (tmp_path / "elsewhere" / "table.md").exists() and _files(finished) == before
    assert main(["report", str(finished), "--print-only", "--format", "html"]) == 2


def test_ctrl_c_while_the_command_starts_is_a_message(monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(zoo.cli, "build_parser", interrupted)
    assert main(["plugins"]) == 130
    err = capsys.readouterr().err
    assert "zoo: interrupted" in err and "Traceback" not in err
