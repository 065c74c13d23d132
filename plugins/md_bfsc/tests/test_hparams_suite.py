"""The hyper-parameter study (paper Table 3) as runner suites: the grid, the paper's protocol, and a
tiny end-to-end run in which each variant's hyper-parameters and kernel reach the trained method,
the report has one row per variant, and a second run trains nothing."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from zoo_md_bfsc.method import MDBFSC

from zoo import registry
from zoo.kernels import CosineKernel, PolynomialKernel, RBFKernel
from zoo.runner import Results, expand_cells, load_suite, prepare_suite, run_suite

ROWS = {f"rho_train={r}": {"rho_train": float(r)} for r in ("0.01", "0.1", "0.5", "1")} | {
    f"steps_train={s}": {"steps_train": s} for s in (1, 3, 5, 7)} | {
    f"kernel={k}": {} for k in ("COS", "RBF", "POL1", "POL2")}
KERNELS = {"kernel=COS": "cosine", "kernel=RBF": "rbf", "kernel=POL1": "polynomial[order=1]",
           "kernel=POL2": "polynomial[order=2]"}
PAPER_DEFAULTS = {"rho_train": 1.0, "steps_train": 3, "rho_test": 0.5, "steps_test": 50}


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_one_factor_at_a_time_around_the_paper_defaults():
    suite, methods = prepare_suite("md-hparams", registry=registry())
    assert methods == ["md-bfsc"]
    cells = expand_cells(suite, methods, registry=registry())
    assert {c.variant for c in cells} == set(ROWS) and {c.shape["shot"] for c in cells} == {1, 5}
    assert len(cells) == 2 * len(ROWS)
    for c in cells:
        for key, value in {**PAPER_DEFAULTS, **ROWS[c.variant]}.items():
            assert c.hparams[key] == value, (c.variant, key)
        assert c.kernel == KERNELS.get(c.variant, "cosine")
        assert (c.dataset, c.shape["train_shot"], c.shape["way"]) == ("glyphs", c.shape["shot"], 5)
    # the rows that name the defaults (COS, rho 1, 3 steps) are one model per shot
    defaults = {c.train_hash for c in cells if c.variant in
                ("kernel=COS", "rho_train=1", "steps_train=3")}
    assert len(defaults) == 2 and len({c.train_hash for c in cells}) == 2 * (len(ROWS) - 2)


def test_paper_protocol_is_the_same_study_on_cub():
    quick = load_suite("md-hparams", registry=registry())
    paper = load_suite("md-hparams-paper", registry=registry())
    assert paper.parts == quick.parts
    s = paper.settings
    assert (s["train_datasets"], s["backbone"], s["requires"]) == (["cub"], "conv4", ["cuda"])
    assert (s["test_episodes"], s["seeds"], s["train_episodes"]) == (
        600, [0, 1, 2, 3, 4], {"1": 60000, "5": 40000})
    cells = expand_cells(paper, ["md-bfsc"], registry=registry())
    assert len(cells) == 2 * 5 * len(ROWS)
    # any registered data set through --set
    digits, _ = prepare_suite("md-hparams", ["train_datasets=digits", "shots=1"], registry=registry())
    assert {c.dataset for c in expand_cells(digits, ["md-bfsc"], registry=registry())} == {"digits"}


TINY = ["ways=2", "shots=1", "query=2", "train_query=2", "train_episodes=2", "val_episodes=1",
        "val_every=2", "test_episodes=2", "checkpoint_every=2", "md-bfsc.samples_train=16",
        "md-bfsc.samples_test=16", "md-bfsc.steps_test=3"]
KEPT = ("rho_train=0.01", "kernel=POL2", "kernel=RBF", "kernel=COS", "steps_train=1")


def tiny_study():
    suite = load_suite("md-hparams", registry=registry())
    suite = dataclasses.replace(suite, parts=[p for p in suite.parts if p["variant"] in KEPT])
    return prepare_suite(suite, TINY, registry=registry())[0]


def test_tiny_study_end_to_end_and_resume(tmp_path: Path, monkeypatch):
    out = tmp_path / "results"
    outcome = run_suite(tiny_study(), out=out, device="cpu", progress=False)
    assert len(outcome.finished) == len(KEPT) and not outcome.failed
    results = {r["variant"]: r for r in Results(out).results()}
    assert set(results) == set(KEPT)
    # the variant's hyper-parameters as the trained method recorded them
    assert results["rho_train=0.01"]["hparams"]["rho_train"] == 0.01
    assert results["steps_train=1"]["hparams"]["steps_train"] == 1
    assert all(r["hparams"]["steps_test"] == 3 for r in results.values())
    # ... and the kernel with its options, as the saved model holds it
    kinds = {"kernel=POL2": PolynomialKernel, "kernel=RBF": RBFKernel, "kernel=COS": CosineKernel}
    for variant, kind in kinds.items():
        r = results[variant]
        state = torch.load(out / "cells" / r["config_hash"] / "model.pt", weights_only=True)
        assert r["kernel"] == KERNELS[variant]
        assert ("kernel.raw_offset" in state["state_dict"]) == (kind is PolynomialKernel)
        assert ("kernel.raw_lengthscale" in state["state_dict"]) == (kind is RBFKernel)
    assert len(list((out / "train").iterdir())) == len(KEPT)
    # the report: one row per variant in md, csv and json
    from zoo.runner import write_report

    write_report(out, plots=False)
    table = (out / "report" / "table.md").read_text()
    for variant in KEPT:
        assert f"| md-bfsc {variant} |" in table
    rows = json.loads((out / "report" / "table.json").read_text())["rows"]
    assert {r["method"] for r in rows} == {f"md-bfsc {v}" for v in KEPT}
    assert "ece" in (out / "report" / "table.csv").read_text().splitlines()[0]
    # resume: a finished study is skipped; a lost cell is scored again without training
    lost = results["kernel=COS"]["config_hash"]
    trainings = {p: p.stat().st_mtime_ns for p in (out / "train").glob("*/model.pt")}
    shutil.rmtree(out / "cells" / lost)

    def no_training(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(MDBFSC, "meta_loss", no_training)
    again = run_suite(tiny_study(), out=out, device="cpu", progress=False)
    assert again.skipped == len(KEPT) - 1 and not again.failed
    assert [o.cell_hash for o in again.finished] == [lost]
    assert {p: p.stat().st_mtime_ns for p in (out / "train").glob("*/model.pt")} == trainings
