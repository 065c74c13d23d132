"""``zoo train --out DIR`` into a folder trained with another configuration is refused, key by
key, rather than reusing the old model under the new configuration; ``--force`` starts over."""

from __future__ import annotations

import json

import pytest

from zoo.cli import main
from zoo.errors import ZooError

ARGS = ["train", "protonet", "--dataset", "glyphs", "--way", "3", "--episodes", "2",
        "--query", "2", "--val-episodes", "1", "--val-every", "2", "--device", "cpu",
        "--no-progress"]


def test_train_refuses_a_folder_trained_with_another_configuration(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*ARGS, "--shot", "1", "--out", str(out)]) == 0
    first = json.loads((out / "config.json").read_text())
    assert main([*ARGS, "--shot", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out} holds a model trained with another configuration" in err
    assert "train_shot: 1 there, 2 here" in err and "--force" in err
    assert json.loads((out / "config.json").read_text()) == first  # nothing was changed
    assert main([*ARGS, "--shot", "2", "--out", str(out), "--force"]) == 0
    assert json.loads((out / "config.json").read_text())["train_shot"] == 2
    assert main([*ARGS, "--shot", "2", "--out", str(out)]) == 0  # same configuration: reused


def test_force_does_not_delete_a_folder_that_is_not_a_run(tmp_path):
    from zoo.runner.train import start_over

    (tmp_path / "mine.txt").write_text("precious")
    with pytest.raises(ZooError, match="not a zoo training folder"):
        start_over(tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "precious"
