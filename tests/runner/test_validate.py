"""Impossible settings are refused before any cell starts, with the setting named."""

from __future__ import annotations

import pytest

from zoo.cli import main
from zoo.runner.bench import run_suite
from zoo.runner.validate import SettingError, check_settings

from .conftest import tiny_suite

BAD = [("ways", [0]), ("shots", [1, 0]), ("query", 0), ("train_query", -1),
       ("train_episodes", -3), ("train_episodes", {"1": 5, "5": -1}), ("test_episodes", 0),
       ("val_episodes", -1), ("workers", 0)]


@pytest.mark.parametrize(("key", "value"), BAD)
def test_each_impossible_setting_is_named(key, value):
    with pytest.raises(SettingError, match=f"where: {key}"):
        check_settings({key: value}, "where")


def test_possible_settings_pass():
    check_settings({"ways": [5], "shots": [1, 5], "train_shot": 0, "val_every": 0,
                    "val_episodes": 0, "train_episodes": {"1": 10}}, "x")


def test_a_suite_with_an_impossible_setting_starts_no_cell(tmp_path):
    with pytest.raises(SettingError, match="train_episodes = -3: training episodes .* must be "
                                           "at least 0"):
        run_suite(tiny_suite(train_episodes=-3), out=tmp_path / "out", device="cpu",
                  progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [
    ["bench", "--workers", "0"],
    ["bench", "--set", "shots=[0]"],
    ["train", "protonet", "--dataset", "glyphs", "--way", "3", "--shot", "1", "--episodes", "-3"],
    ["train", "protonet", "--dataset", "glyphs", "--way", "0", "--shot", "1"],
    ["train", "protonet", "--dataset", "glyphs", "--way", "3", "--shot", "1", "--set", "lr=-1"],
    ["evaluate", "nowhere", "--dataset", "glyphs", "--episodes", "0"],
])
def test_commands_refuse_impossible_arguments_first(argv, tmp_path, capsys):
    assert main([*argv, "--out", str(tmp_path / "o")] if argv[0] != "evaluate" else argv) == 2
    err = capsys.readouterr().err
    assert "zoo: error:" in err and "must" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
