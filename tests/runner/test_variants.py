"""Labelled variants (``[[part]]`` with ``variant`` and ``hparams``) and kernel options in specs:
an ablation table made of ordinary cells."""

from __future__ import annotations

import dataclasses
import json

import pytest
from zoo_protonet import ProtoNet

from zoo.kernels import PolynomialKernel
from zoo.plugins import load_dataset, registry
from zoo.runner.bench import run_suite
from zoo.runner.cells import Cell, expand_cells
from zoo.runner.suite import SuiteError, apply_overrides, suite_from_dict
from zoo.runner.train import build_for_cell
from zoo.spec import SpecError

from .conftest import TINY

PARTS = [{"variant": "lr=0.01", "hparams": {"lr": 0.01}}, {"variant": "default"},
         {"variant": "default again"}]


def variant_suite(parts=PARTS, **settings):
    raw = {"suite": {**TINY["suite"], "test_datasets": [], **settings}, "part": parts}
    return suite_from_dict("tiny-variants", raw, "tests", registry=registry())


class KernelProto(ProtoNet):
    """ProtoNet that declares a kernel, to see what the runner builds for it."""

    name = "kernel-proto"
    uses_kernel = True
    default_kernel = "rbf"


@pytest.fixture
def kernel_proto(monkeypatch):
    reg = registry()
    reg.register("methods", "kernel-proto", KernelProto, owner="tests")
    yield KernelProto
    reg.unregister("methods", "kernel-proto")


def test_variant_parts_expand_to_labelled_cells_with_their_hyperparameters():
    fast, default, again = expand_cells(variant_suite(), ["protonet"], registry=registry())
    assert fast.hparams["lr"] == 0.01 and default.hparams["lr"] == 1e-3
    assert (fast.variant, default.variant) == ("lr=0.01", "default")
    assert fast.label.startswith("protonet lr=0.01 glyphs 3w1s")
    assert fast.config()["variant"] == "lr=0.01"
    # a label alone makes a new cell but not a new training
    assert default.hash != again.hash and default.train_hash == again.train_hash
    assert fast.train_hash != default.train_hash


def test_cells_without_a_variant_are_named_by_the_same_rule():
    (cell,) = expand_cells(variant_suite(parts=[]), ["protonet"], registry=registry())
    assert cell.variant == cell.config()["variant"] == ""
    run = {"checkpoint_every": cell.checkpoint_every, "max_bad_steps": cell.max_bad_steps}
    assert Cell.from_config(cell.config(), cell.task, **run) == cell
    labelled = dataclasses.replace(cell, variant="x")
    assert labelled.hash != cell.hash and labelled.train_hash == cell.train_hash
    assert Cell.from_config(labelled.config(), cell.task, **run) == labelled


def test_part_hyperparameters_win_over_method_tables_and_must_belong_to_a_method():
    suite = apply_overrides(variant_suite(), ["protonet.lr=0.5"], ["protonet"], registry=registry())
    fast, default, _ = expand_cells(suite, ["protonet"], registry=registry())
    assert fast.hparams["lr"] == 0.01 and default.hparams["lr"] == 0.5
    with pytest.raises(SuiteError, match="nonsense"):
        expand_cells(variant_suite(parts=[{"hparams": {"nonsense": 1}}]), ["protonet"], registry=registry())
    with pytest.raises(SuiteError, match="hparams"):
        suite_from_dict("x", {"suite": {"hparams": [1]}}, registry=registry())


def test_kernel_options_in_the_spec_reach_the_kernel(kernel_proto):
    data = load_dataset("glyphs")
    (cell,) = expand_cells(variant_suite(parts=[], kernel="polynomial[order=1,offset=0.5]"),
                           ["kernel-proto"], registry=registry())
    kernel = build_for_cell(cell, data, "cpu", registry()).kernel
    assert isinstance(kernel, PolynomialKernel) and kernel.order == 1
    assert float(kernel._positive(kernel.raw_offset).detach()) == pytest.approx(0.5)
    with pytest.raises(SpecError, match="kernel 'polynomial\\[order\\]'"):
        build_for_cell(dataclasses.replace(cell, kernel="polynomial[order]"), data, "cpu",
                       registry())


def test_variants_are_rows_of_the_report(tmp_path):
    out = tmp_path / "results"
    suite = variant_suite(parts=PARTS[:2])
    outcome = run_suite(suite, out=out, device="cpu", progress=False)
    assert len(outcome.finished) == 2 and not outcome.failed
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert {(r["variant"], r["hparams"]["lr"]) for r in lines} == {("lr=0.01", 0.01),
                                                                   ("default", 1e-3)}
    from zoo.runner.report import write_report

    report = write_report(out, plots=False)
    assert report.methods == ["protonet default", "protonet lr=0.01"]
    table = (out / "report" / "table.md").read_text()
    assert "| protonet lr=0.01 |" in table and "| protonet default |" in table
    (pair,) = report.paired()  # the same test episodes: a paired comparison
    assert {pair["a"], pair["b"]} == set(report.methods) and pair["episodes"] == 4
    again = run_suite(suite, out=out, device="cpu", progress=False)
    assert again.skipped == 2 and not again.finished


def test_a_kernel_per_method_overrides_the_suite_kernel(kernel_proto):
    suite = variant_suite(parts=[], kernel="rbf")
    (cell,) = expand_cells(apply_overrides(suite, ["kernel-proto.kernel=polynomial[order=2]"],
                                           ["kernel-proto"], registry=registry()),
                           ["kernel-proto"], registry=registry())
    assert cell.kernel == "polynomial[order=2]" and "kernel" not in cell.hparams
    raw = {"suite": {**TINY["suite"], "methods": ["kernel-proto"], "kernel": "rbf", "test_datasets": []},
           "methods": {"kernel-proto": {"kernel": "cosine"}}}
    (cell,) = expand_cells(suite_from_dict("k", raw, "test", registry=registry()), ["kernel-proto"],
                           registry=registry())
    assert cell.kernel == "cosine"
    with pytest.raises(SuiteError, match="no hyper-parameter 'kernel'"):
        apply_overrides(suite, ["protonet.kernel=cosine"], ["protonet"], registry=registry())


def test_a_misspelt_hyper_parameter_of_a_kernel_method_names_its_kernel_key(kernel_proto):
    suite = variant_suite(parts=[], kernel="rbf")
    with pytest.raises(SuiteError, match=r"no hyper-parameter 'kernle'; it has: .*lr.*\(and "
                                         r"kernel: a kernel spec"):
        apply_overrides(suite, ["kernel-proto.kernle=cosine"], ["kernel-proto"], registry=registry())
    with pytest.raises(SuiteError, match=r"no hyper-parameter 'kernle'; it has: [^(]*$"):
        apply_overrides(suite, ["protonet.kernle=cosine"], ["protonet"], registry=registry())
