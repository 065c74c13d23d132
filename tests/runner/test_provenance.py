"""A result names the code that made it, and other code under the same name is another cell (so
an impostor's result does not survive its removal)."""

from __future__ import annotations

import dataclasses
import importlib.metadata as md

import pytest

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


def _run(out, provenance=None, monkeypatch=None):
    """Run the tiny suite into ``out``, its method's provenance replaced by ``provenance``."""
    from zoo.plugins import registry
    from zoo.runner.bench import run_suite

    reg = registry()
    if provenance is not None:
        monkeypatch.setattr(reg, "provenance", lambda kind, name: provenance)
    try:
        return run_suite(tiny_suite(test_datasets=["glyphs"]), out=out, device="cpu",
                         progress=False)
    finally:
        monkeypatch.undo()


def test_the_core_s_code_is_part_of_a_result_s_identity(tmp_path):
    """The digest of the whole ``zoo`` package is in every provenance, and follows every source
    file of a package, however deep (a backbone, the trainer: ``zoo/runner/train.py``)."""
    from zoo.plugins import code_digest, registry

    reg = registry()
    for kind, name in (("methods", "protonet"), ("methods", "constant"), ("kernels", "rbf")):
        core = reg.provenance(kind, name)["core"]
        assert core["digest"] == code_digest(("zoo",)) and len(core["digest"]) == 64
    assert reg.provenance("methods", "protonet")["packages"] == ["zoo_protonet"]
    pkg = tmp_path / "zt_core_like" / "runner"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "train.py").write_text("STEP = 1\n")
    import sys
    sys.path.insert(0, str(tmp_path))
    try:
        first = code_digest(("zt_core_like",))
        code_digest.cache_clear()
        (pkg / "train.py").write_text("STEP = 2\n")
        assert code_digest(("zt_core_like",)) != first
    finally:
        sys.path.remove(str(tmp_path))
        code_digest.cache_clear()


def test_a_changed_core_is_named_and_its_cells_run_again(tmp_path, monkeypatch, caplog):
    """Results made by another core (ConvNet's ReLU changed, say) are not reused: the warning
    names the core, the cell runs again, the report shows only the new result and names the
    old one."""
    from zoo.plugins import registry
    from zoo.runner.report import load_report, markdown

    out = tmp_path / "out"
    real = registry().provenance("methods", "protonet")
    old_core = {**real, "core": {**real["core"], "digest": "c" * 64}}
    (old,) = _run(out, old_core, monkeypatch).finished
    with caplog.at_level("WARNING"):
        (new,) = _run(out, None, monkeypatch).finished
    assert "the zoo core's code changed since (code cccccccccccc" in caplog.text
    assert new.cell_hash != old.cell_hash
    caplog.clear()
    with caplog.at_level("WARNING"):
        report = load_report(out)
    (row,) = report.rows()
    (entry,) = report.entries.values()
    assert [r["config_hash"] for r in entry.results] == [new.cell_hash]
    assert report.other_code == {"protonet (the zoo core's code changed since (code cccccccccccc, "
                                 f"now {real['core']['digest'][:12]}))": 1}
    assert "1 result(s) made by other code than is installed are not shown" in caplog.text
    table = markdown(report)
    assert "1 result(s) made by other code than is installed are not shown: 1 of protonet" in table
    assert "another --out starts a folder without them" in table


def test_a_folder_only_other_code_made_is_refused_by_the_reader_with_why(tmp_path, monkeypatch):
    """zoo.load_results on a folder whose every result another core made raises and names them,
    instead of returning an empty table without columns."""
    import zoo
    from zoo.errors import ZooError
    from zoo.plugins import registry

    out = tmp_path / "out"
    real = registry().provenance("methods", "protonet")
    _run(out, {**real, "core": {**real["core"], "digest": "c" * 64}}, monkeypatch)
    with pytest.raises(ZooError, match="no result to show: 1 result.s. made by other code"):
        zoo.load_results(out, records=True)


def test_the_report_shows_the_installed_code_s_results_whatever_the_order(tmp_path, monkeypatch):
    """Plugin code v1, then v2, then v1 again: the report shows v1's results (installed), not
    the later lines of v2, and names v2's; the same after an impostor's results."""
    from zoo.plugins import registry
    from zoo.runner.report import load_report

    out = tmp_path / "out"
    real = registry().provenance("methods", "protonet")
    (v1,) = _run(out, None, monkeypatch).finished
    v2 = {**real, "version": "0.2.0", "digest": "2" * 64}
    impostor = {**real, "plugin": "protonet", "distribution": "zoo-shadow", "version": "9.9",
                "packages": ["zt_shadow"], "digest": "5" * 64}
    for other in (v2, impostor):
        (made,) = _run(out, other, monkeypatch).finished
        assert made.cell_hash != v1.cell_hash
        again = _run(out, None, monkeypatch)
        assert again.skipped == 1 and not again.finished  # v1's cell is reused
        report = load_report(out)
        (entry,) = report.entries.values()
        assert [r["config_hash"] for r in entry.results] == [v1.cell_hash]
    assert report.other_code == {
        f"protonet (made by {PROTONET} 0.2.0; 0.1.0 is installed)": 1,
        "protonet (made by zoo-shadow 9.9, which is not installed)": 1}
