"""Where validation comes from: a suite's ``val_dataset`` (a cross-domain protocol's validation
classes, e.g. EMNIST's for Omniglot -> EMNIST), and no test episode ever reaching model selection
or temperature fitting."""

from __future__ import annotations

import json

import pytest

from zoo.plugins import load_dataset, registry
from zoo.runner import cell as cell_module
from zoo.runner.bench import run_suite
from zoo.runner.suite import load_suite
from zoo.tasks.classification import Classification

from .conftest import tiny_suite


def _no_val(data_dir=None, download=True):
    """glyphs without a validation split, like ``omniglot[protocol=no-latin]``."""
    data = load_dataset("glyphs")
    data.splits = {**data.splits, "val": []}
    return data


@pytest.fixture
def no_val_data():
    reg = registry()
    reg.register("datasets", "glyphs-noval", _no_val, owner="tests")
    yield
    reg.unregister("datasets", "glyphs-noval")


def _result(out):
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()][0]


def test_val_dataset_validates_a_training_set_without_validation(no_val_data, tmp_path):
    suite = dict(train_datasets=["glyphs-noval"], test_datasets=["digits"], train_episodes=6)
    run_suite(tiny_suite(**suite), out=tmp_path / "none", device="cpu", progress=False)
    without = _result(tmp_path / "none")
    assert without["selection"] == "last" and without["temperature"] == 1.0
    run_suite(tiny_suite(**suite, val_dataset="glyphs"), out=tmp_path / "val", device="cpu",
              progress=False)
    with_val = _result(tmp_path / "val")
    assert with_val["selection"] == "best validation accuracy"
    assert with_val["val_accuracy"] is not None and with_val["temperature"] != 1.0
    assert with_val["config"]["val_dataset"] == "glyphs"
    assert without["config"]["val_dataset"] == ""  # unset: named by the same rule


def test_paper_suite_validates_omniglot_to_emnist_on_emnist():
    parts = load_suite("paper", registry=registry()).part_settings()
    cross = [p for p in parts if p["test_datasets"] == ["emnist"]]
    assert cross and all(p["val_dataset"] == "emnist" for p in cross)


def test_no_test_episode_reaches_selection_or_calibration(monkeypatch, tmp_path):
    """Every episode drawn while a model is trained, selected and calibrated is a train or val
    episode; test episodes are drawn only by the scoring that follows."""
    stage = {"training": False}
    drawn: list[tuple[bool, str]] = []
    episodes, train_model = Classification.episodes, cell_module.train_model

    def recording_episodes(self, dataset, split, shape, seed, training):
        get = episodes(self, dataset, split, shape, seed, training)

        def recording_get(i):  # an episode is drawn when the getter is called
            drawn.append((stage["training"], split))
            return get(i)
        return recording_get

    def staged_train_model(*args, **kwargs):
        stage["training"] = True
        try:
            return train_model(*args, **kwargs)
        finally:
            stage["training"] = False

    monkeypatch.setattr(Classification, "episodes", recording_episodes)
    monkeypatch.setattr(cell_module, "train_model", staged_train_model)
    run_suite(tiny_suite(test_datasets=["glyphs"]), out=tmp_path, device="cpu", progress=False)
    in_training = {split for training, split in drawn if training}
    assert in_training == {"train", "val"}
    assert {split for training, split in drawn if not training} == {"test"}
    assert _result(tmp_path)["temperature"] != 1.0  # a temperature was fitted, on val only


def test_zoo_train_takes_a_val_dataset(no_val_data, tmp_path, capsys):
    from zoo.cli import main

    args = ["train", "protonet", "--dataset", "glyphs-noval", "--way", "3", "--shot", "1",
            "--episodes", "4", "--query", "2", "--val-episodes", "2", "--val-every", "2",
            "--device", "cpu", "--no-progress"]
    assert main([*args, "--val-dataset", "glyphs", "--out", str(tmp_path / "val")]) == 0
    info = json.loads((tmp_path / "val" / "config.json").read_text())
    assert info["val_dataset"] == "glyphs"
    assert "validation accuracy -" not in capsys.readouterr().out
    assert main([*args, "--val-dataset", "emnist-nowhere", "--out", str(tmp_path / "bad")]) == 2
