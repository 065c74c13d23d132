"""Learning-rate schedules: the factor's values at known episodes, the trainer applying it (and
resuming with it), and the default leaving every existing cell's identity unchanged."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from zoo.plugins import load_dataset, registry
from zoo.runner.cells import expand_cells
from zoo.runner.schedule import LR_SCHEDULES, lr_factor
from zoo.runner.train import train_model
from zoo.runner.validate import SettingError

from .conftest import tiny_suite


def test_constant_is_one_everywhere():
    assert [lr_factor("constant", t, 10) for t in (0, 3, 10)] == [1.0, 1.0, 1.0]


def test_cosine_at_known_episodes():
    # (1 + cos(pi t / T)) / 2: 1 at the start, 1/2 half way, 0 at the end
    assert lr_factor("cosine", 0, 100) == 1.0
    assert lr_factor("cosine", 50, 100) == pytest.approx(0.5, abs=1e-15)
    assert lr_factor("cosine", 25, 100) == pytest.approx((2 + math.sqrt(2)) / 4)
    assert lr_factor("cosine", 75, 100) == pytest.approx((2 - math.sqrt(2)) / 4)
    assert lr_factor("cosine", 100, 100) == pytest.approx(0.0, abs=1e-15)
    values = [lr_factor("cosine", t, 100) for t in range(101)]
    assert all(a > b for a, b in zip(values, values[1:], strict=False))
    # symmetric about the middle: f(t) + f(T - t) = 1
    assert all(math.isclose(values[t] + values[100 - t], 1.0) for t in range(101))


def test_an_unknown_schedule_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="constant, cosine"):
        lr_factor("linear", 0, 10)
    with pytest.raises(SettingError, match="'constant', 'cosine'"):
        tiny_suite(lr_schedule="linear")
    assert set(LR_SCHEDULES) == {"constant", "cosine"}


def test_the_schedule_is_part_of_every_identity_default_or_not():
    (default, _) = expand_cells(tiny_suite(), ["protonet"], registry=registry())
    (explicit, _) = expand_cells(tiny_suite(lr_schedule="constant"), ["protonet"], registry=registry())
    (cosine, _) = expand_cells(tiny_suite(lr_schedule="cosine"), ["protonet"], registry=registry())
    assert default.config()["lr_schedule"] == default.train_config()["lr_schedule"] == "constant"
    assert explicit.hash == default.hash and explicit.train_hash == default.train_hash
    assert cosine.config()["lr_schedule"] == "cosine"
    assert cosine.train_config()["lr_schedule"] == "cosine"
    assert cosine.train_hash != default.train_hash
    assert dataclasses.replace(default, lr_schedule="cosine").hash == cosine.hash


def _cell(schedule: str, episodes: int = 6):
    (cell,) = expand_cells(tiny_suite(lr_schedule=schedule, train_episodes=episodes,
                                      test_datasets=["glyphs"]), ["protonet"], registry=registry())
    return cell


def test_the_trainer_steps_at_the_scheduled_rates(tmp_path, monkeypatch):
    seen: list[float] = []
    step = torch.optim.Adam.step

    def recording(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", recording)
    cell = _cell("cosine")
    train_model(cell, tmp_path / "cos", load_dataset("glyphs"), "cpu", registry())
    lr = cell.hparams["lr"]
    assert seen == pytest.approx([lr * (1 + math.cos(math.pi * t / 6)) / 2 for t in range(6)])
    seen.clear()
    train_model(_cell("constant"), tmp_path / "const", load_dataset("glyphs"), "cpu", registry())
    assert seen == [lr] * 6


def test_a_resumed_cosine_training_ends_with_the_same_weights(tmp_path, monkeypatch):
    data = load_dataset("glyphs")
    whole = train_model(_cell("cosine"), tmp_path / "whole", data, "cpu", registry())

    import zoo.runner.train as train

    def stop_at_4(schedule: str, episode: int, total: int) -> float:
        if episode == 4:  # after the checkpoint of episode 4 (checkpoint_every = 2)
            raise KeyboardInterrupt
        return lr_factor(schedule, episode, total)

    monkeypatch.setattr(train, "lr_factor", stop_at_4)
    monkeypatch.setattr(train, "CHECKPOINT_SECONDS", 0)  # checkpoint every 2 episodes, however fast
    with pytest.raises(KeyboardInterrupt):
        train_model(_cell("cosine"), tmp_path / "killed", data, "cpu", registry())
    assert torch.load(tmp_path / "killed" / "checkpoint.pt",
                      weights_only=True)["state"]["episode"] == 4
    monkeypatch.setattr(train, "lr_factor", lr_factor)
    resumed = train_model(_cell("cosine"), tmp_path / "killed", data, "cpu", registry())
    for key, value in whole.method.state_dict().items():
        assert torch.equal(value, resumed.method.state_dict()[key]), key
