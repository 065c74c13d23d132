"""Suites, cells and --set: identity by hash, validation that lists the choices."""

from __future__ import annotations

import dataclasses
import json

import pytest

from zoo.errors import UnknownNameError
from zoo.plugins import registry
from zoo.runner.bench import prepare_suite
from zoo.runner.cells import config_hash, expand_cells
from zoo.runner.suite import (
    SuiteError,
    apply_overrides,
    load_suite,
    suite_from_dict,
    suite_names,
)
from zoo.spec import SpecError, parse_spec, parse_value

from .conftest import tiny_suite


def test_cell_hash_names_the_resolved_config():
    cells = expand_cells(tiny_suite(), ["protonet"], registry=registry())
    assert [c.dataset for c in cells] == ["glyphs", "digits"]
    a, b = cells
    assert a.hash != b.hash and a.train_hash == b.train_hash  # one training, two test sets
    assert a.hash == config_hash(a.config()) and len(a.hash) == 16
    assert expand_cells(tiny_suite(), ["protonet"],
                        registry=registry())[0].hash == a.hash  # stable across calls
    # every field of the identity changes the hash; run-only settings do not
    for name, value in [("way", 4), ("shot", 2), ("query", 5)]:
        assert dataclasses.replace(a, shape={**a.shape, name: value}).hash != a.hash, name
    for name, value in [("seed", 1), ("backbone", "mlp"), ("train_episodes", 7),
                        ("hparams", {**a.hparams, "lr": 0.01})]:
        assert dataclasses.replace(a, **{name: value}).hash != a.hash, name
    assert dataclasses.replace(a, checkpoint_every=99, max_bad_steps=1).hash == a.hash
    assert dataclasses.replace(a, shape={**a.shape, "query": 9}).train_hash == a.train_hash
    assert dataclasses.replace(a, shape={**a.shape, "train_query": 9}).train_hash != a.train_hash


def test_one_rule_names_every_cell_whatever_its_values():
    """Every field but the run-only ones is in the configuration that is hashed, at its default
    value or not, with the shape (classification's ``train_way`` included) and the task kind."""
    from zoo.runner.cells import RUN_ONLY, Cell

    (a, _) = expand_cells(tiny_suite(), ["protonet"], registry())
    names = {f.name for f in dataclasses.fields(Cell)} - {*RUN_ONLY, "shape"}
    assert set(a.config()) == names | set(a.shape)
    assert a.config()["task"] == "classification" and a.shape["train_way"] == a.shape["way"]
    assert {k: a.config()[k] for k in ("variant", "val_dataset", "lr_schedule")} == {
        "variant": "", "val_dataset": "", "lr_schedule": "constant"}
    assert set(a.train_config()) == set(Cell.TRAIN_KEYS) | {"way", "train_shot", "train_query"}
    for name, value in [("variant", "v"), ("val_dataset", "digits"), ("lr_schedule", "cosine"),
                        ("provenance", {"distribution": "x"})]:
        assert dataclasses.replace(a, **{name: value}).hash != a.hash, name
    assert Cell.from_config(a.config(), a.task, checkpoint_every=a.checkpoint_every,
                            max_bad_steps=a.max_bad_steps,
                            max_skipped_fraction=a.max_skipped_fraction) == a


def test_hparams_are_resolved_in_the_cell():
    suite = apply_overrides(tiny_suite(), ["protonet.lr=0.01"], ["protonet"], registry=registry())
    (cell, _) = expand_cells(suite, ["protonet"], registry=registry())
    assert cell.hparams == {"lr": 0.01}


def test_set_overrides_settings_and_hyperparameters():
    suite = apply_overrides(tiny_suite(), ["shots=[1, 5]", "train_episodes=9", "lr=0.5"],
                            ["protonet"], registry=registry())
    assert suite.settings["shots"] == [1, 5] and suite.settings["train_episodes"] == 9
    assert suite.method_overrides["protonet"]["lr"] == 0.5
    assert apply_overrides(tiny_suite(), ["seeds=3"], [], registry=registry()).settings["seeds"] == [3]


def test_an_integer_is_accepted_for_a_float_setting():
    suite = apply_overrides(tiny_suite(), ["max_skipped_fraction=0"], [], registry=registry())
    assert suite.settings["max_skipped_fraction"] == 0.0
    assert isinstance(suite.settings["max_skipped_fraction"], float)


@pytest.mark.parametrize("assignment, listed", [
    ("nonsense=1", "train_episodes"),          # neither a setting nor a hyper-parameter
    ("protonet.nonsense=1", "lr"),
    ("train_episodes=many", "whole number"),
    ("no-equals-sign", "KEY=VALUE"),
])
def test_set_rejects_unknown_keys_listing_choices(assignment, listed):
    with pytest.raises(SuiteError, match=listed):
        apply_overrides(tiny_suite(), [assignment], ["protonet"], registry=registry())


def test_unknown_names_list_the_choices():
    with pytest.raises(UnknownNameError, match="quick"):
        load_suite("no-such-suite", registry=registry())
    with pytest.raises(UnknownNameError, match="unknown method for suite 'tiny': "
                       "'no-such-method'; choose one of: .*protonet"):
        prepare_suite(tiny_suite(), only=["no-such-method"], registry=registry())
    with pytest.raises(UnknownNameError, match="protonet"):
        apply_overrides(tiny_suite(), ["no-such-method.lr=1"], ["protonet"], registry=registry())


def test_suite_files_are_validated():
    with pytest.raises(SuiteError, match="unknown setting 'shotz'"):
        suite_from_dict("x", {"suite": {"shotz": [1]}}, registry=registry())
    with pytest.raises(SuiteError, match="unknown table"):
        suite_from_dict("x", {"suits": {}}, registry=registry())


def test_builtin_suites_load_and_expand():
    assert {"quick", "omniglot-minimal", "lake-oneshot", "paper"} <= set(suite_names(registry()))
    for name in ("quick", "omniglot-minimal", "lake-oneshot", "paper"):
        suite, methods = prepare_suite(name, registry=registry())
        assert methods and "protonet" in methods
        cells = expand_cells(suite, ["protonet"], registry=registry())
        assert len({c.hash for c in cells}) == len(cells)
    paper = expand_cells(load_suite("paper", registry=registry()), ["protonet"], registry=registry())
    assert {(c.train_dataset, c.dataset) for c in paper} == {
        ("cub", "cub"), ("miniimagenet", "miniimagenet"), ("miniimagenet", "cub"),
        ("omniglot[protocol=no-latin]", "emnist")}
    assert {(c.shape["shot"], c.train_episodes) for c in paper} == {(1, 60000), (5, 40000)}
    assert {c.backbone for c in paper if c.dataset == "emnist"} == {"conv4s"}


def test_values_and_dataset_specs():
    assert parse_value("3") == 3 and parse_value("0.5") == 0.5 and parse_value("true") is True
    assert parse_value("[1, 5]") == [1, 5] and parse_value("rbf") == "rbf"
    assert parse_spec("glyphs") == ("glyphs", {})
    assert parse_spec("omniglot-minimal[background=small2]") == (
        "omniglot-minimal", {"background": "small2"})
    with pytest.raises(SpecError):
        parse_spec("Bad Name")
    # a value may hold brackets: a TOML list, or a nested spec kept as text for its own parser
    assert parse_spec("mlp[hidden=[64, 32],dropout=0.1]", "backbone") == (
        "mlp", {"hidden": [64, 32], "dropout": 0.1})
    assert parse_spec("md-bfsc[estimator=sobol[samples=8],lr=0.1]") == (
        "md-bfsc", {"estimator": "sobol[samples=8]", "lr": 0.1})
    for unpaired in ("mlp[hidden=[64]", "mlp[hidden=64]]"):
        with pytest.raises(SpecError, match="brackets"):
            parse_spec(unpaired, "backbone")


def test_train_shot_trains_one_model_for_every_test_shot():
    per_shot = expand_cells(tiny_suite(shots=[1, 5]), ["protonet"], registry=registry())
    assert len({c.train_hash for c in per_shot}) == 2
    assert all(c.shape["train_shot"] == c.shape["shot"] for c in per_shot)
    shared = expand_cells(tiny_suite(shots=[1, 5], train_shot=1), ["protonet"], registry=registry())
    assert len({c.train_hash for c in shared}) == 1
    assert sorted({c.shape["shot"] for c in shared}) == [1, 5]
    assert {c.shape["train_shot"] for c in shared} == {1}
    assert "(trained 1-shot)" in [c for c in shared if c.shape["shot"] == 5][0].label


def test_suites_listing_names_an_entry_suite_for_what_it_is(capsys):
    from zoo.cli import main

    assert main(["suites", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["np-bo"]["task"] == "entry" and rows["np-bo"]["entry"] == "zoo.bayesopt:run"
    assert rows["quick"]["task"] == "classification"
