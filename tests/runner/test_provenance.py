"""A result names the code that made it, and other code under the same name is another cell (so
an impostor's result does not survive its removal)."""

from __future__ import annotations

import dataclasses
import importlib.metadata as md

from zoo.plugins import registry
from zoo.runner.cells import expand_cells

from .conftest import tiny_suite

# the distribution that provides the protonet plugin where the tests run (the installed name, so
# that an environment installed before a rename still passes; test_packaging.py checks the names)
PROTONET = next(e.dist.name for e in md.entry_points(group="zoo.plugins") if e.name == "protonet")


def test_cells_carry_the_provenance_of_their_method():
    cell = expand_cells(tiny_suite(), ["protonet"], registry=registry())[0]
    assert cell.provenance["distribution"] == PROTONET
    assert cell.config()["provenance"] == cell.provenance
    assert cell.train_config()["provenance"] == cell.provenance
    other = dataclasses.replace(cell, provenance={**cell.provenance, "digest": "0" * 64})
    assert other.hash != cell.hash and other.train_hash != cell.train_hash


def test_results_of_other_code_are_not_reused_silently(tmp_path, monkeypatch, caplog):
    """A finished cell made by another version of the method is named, run again and left out of
    the report; ``--force`` deletes it."""
    from zoo.runner.bench import run_suite
    from zoo.runner.report import load_report
    from zoo.runner.storage import Results

    suite = tiny_suite(test_datasets=["glyphs"])
    out = tmp_path / "out"
    reg = registry()
    real = reg.provenance
    old = {"distribution": "zoo-protonet", "version": "0.0.1", "digest": "0" * 64, "plugin": "x"}
    monkeypatch.setattr(reg, "provenance", lambda kind, name: old)
    (first,) = run_suite(suite, out=out, device="cpu", progress=False).finished
    monkeypatch.setattr(reg, "provenance", real)

    with caplog.at_level("WARNING"):
        rerun = run_suite(suite, out=out, device="cpu", progress=False)
    assert "made by other code" in caplog.text and "0.0.1" in caplog.text
    assert len(rerun.finished) == 1 and rerun.skipped == 0
    (row,) = load_report(out).rows()
    assert row["seeds"] == 1  # the old result is kept on disk but not pooled with the new one
    assert len(Results.open(out).finished()) == 2

    run_suite(suite, out=out, device="cpu", progress=False, force=True)
    hashes = {r["config_hash"] for r in Results.open(out).finished()}
    assert first.cell_hash not in hashes and len(hashes) == 1
