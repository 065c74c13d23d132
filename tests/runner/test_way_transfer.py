"""Way transfer (``train_way``): one model trained at one way, scored at others, for the methods
that can score another way than they were built for (Sun et al. 2021, Table 6.3)."""

from __future__ import annotations

import json

import pytest

from zoo.plugins import registry
from zoo.runner.bench import run_suite
from zoo.runner.cells import expand_cells
from zoo.runner.validate import SettingError

from .conftest import tiny_suite


def test_way_transfer_cells_share_the_model_of_the_training_way():
    plain = expand_cells(tiny_suite(ways=[3]), ["protonet", "maml"], registry=registry())
    cells = expand_cells(tiny_suite(ways=[3, 5], train_way=3), ["protonet", "maml"], registry=registry())
    protonet = [c for c in cells if c.method == "protonet"]
    assert sorted(c.shape["way"] for c in protonet) == [3, 3, 5, 5]
    assert len({c.train_hash for c in protonet}) == 1
    # maml's head has `way` outputs: it runs only at the way it is trained for
    assert {c.shape["way"] for c in cells if c.method == "maml"} == {3}
    # a cell trained and tested at one way is the same cell whether or not its suite names
    # train_way
    assert {c.hash for c in cells if c.shape["way"] == 3} == {c.hash for c in plain}
    five = next(c for c in protonet if c.shape["way"] == 5)
    assert five.shape["train_way"] == 3 and "5w1s (trained 3-way)" in five.label


def test_a_negative_train_way_is_refused():
    with pytest.raises(SettingError, match="train_way = -1"):
        tiny_suite(train_way=-1)


def test_a_model_trained_three_way_is_scored_five_way(tmp_path):
    suite = tiny_suite(ways=[3, 5], train_way=3, test_datasets=["glyphs"])
    outcome = run_suite(suite, out=tmp_path, device="cpu", progress=False)
    assert len(outcome.finished) == 2 and not outcome.failed
    assert len(list((tmp_path / "train").iterdir())) == 1
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert sorted(r["way"] for r in lines) == [3, 5]
    five = next(r for r in lines if r["way"] == 5)
    assert five["config"]["train_way"] == 3 and 0 <= five["accuracy"] <= 1


def test_which_methods_score_any_way():

    reg = registry()
    assert reg.get("methods", "protonet").scores_any_way({})
    assert not reg.get("methods", "maml").scores_any_way({})
    dkt = reg.get("methods", "dkt")
    assert dkt.scores_any_way(dkt.all_defaults())
    assert not dkt.scores_any_way({**dkt.all_defaults(), "per_class_kernel": True})


def test_a_training_way_the_validation_split_cannot_give_fails_before_training(tmp_path,
                                                                                 monkeypatch):
    """Validation episodes are drawn at the training way: a way above the validation split's
    classes (40 > glyphs' 33 validation classes, < its 548 training classes) is an error before
    the first training step (of any cell: the suite stops before its first one), not after the
    first ``val_every`` episodes."""
    import zoo.runner.train as train
    from zoo.runner.suite import SuiteError

    steps = []
    monkeypatch.setattr(train, "lr_factor", lambda *a: steps.append(1) or 1.0)
    suite = tiny_suite(ways=[3], train_way=40, test_datasets=["glyphs"], train_episodes=50,
                       val_every=25)
    with pytest.raises(SuiteError, match=r"(?s)no cell was run.*split 'val' of data set 'glyphs' "
                                         r"has 33 classes, but way=40"):
        run_suite(suite, out=tmp_path / "o", device="cpu", progress=False)
    assert steps == [] and not (tmp_path / "o").exists()
