"""The held-out Omniglot recipe is made of recorded settings: augmentation options in the data
set name, the backbone's width in its spec, all in each cell's configuration."""

from __future__ import annotations

from zoo.plugins import load_dataset, registry
from zoo.runner.cells import expand_cells
from zoo.runner.suite import load_suite, select_methods
from zoo.runner.train import build_for_cell
from zoo.testing import toy_episode

from .conftest import tiny_suite


def test_lake_recipe_cells_record_the_recipe():
    suite = load_suite("lake-oneshot-recipe", registry=registry())
    cells = expand_cells(suite, select_methods(suite, registry=registry()), registry=registry())
    assert {c.config()["backbone"] for c in cells} == {"conv4s"}
    assert {c.config()["train_episodes"] for c in cells} == {18000}
    assert {c.config()["lr_schedule"] for c in cells} == {"cosine"}
    assert all("rotations=true,distortions=4" in c.config()["train_dataset"] for c in cells)
    assert {c.dataset for c in cells} == {"omniglot-lake-runs"}


def test_a_backbone_spec_sets_its_options():
    (cell,) = expand_cells(tiny_suite(backbone="conv4s[width=8]", test_datasets=["glyphs"]),
                           ["protonet"], registry=registry())
    method = build_for_cell(cell, load_dataset("glyphs"), "cpu", registry())
    assert method.features(toy_episode(3, 1).query_x).shape[-1] == 8  # 8 channels of 1x1 maps


def test_md_vs_protonet_study_varies_one_factor_of_md_bfsc():
    suite = load_suite("md-vs-protonet", registry=registry())
    cells = [c for c in expand_cells(suite, ["protonet", "md-bfsc"], registry=registry()) if c.seed == 0
             and c.shape["shot"] == 1]
    md = {c.variant: c for c in cells if c.method == "md-bfsc"}
    assert md["default"].kernel == "rbf" and md["kernel=COS"].kernel == "cosine"
    assert md["kernel_lr=1e-2"].hparams["kernel_lr"] == 1e-2
    assert md["outputscale_lr=1e-1"].hparams["outputscale_lr"] == 1e-1
    assert md["outputscale_lr=1e-1"].hparams["kernel_lr"] == md["default"].hparams["kernel_lr"]
    assert not md["normalize=false"].hparams["normalize"]
    proto = {c.train_hash for c in cells if c.method == "protonet"}
    assert len(proto) == 1  # the reference is trained once
    # and scored once: one ProtoNet row, not one per md-bfsc factor
    assert [c.variant for c in cells if c.method == "protonet"] == ["default"]
