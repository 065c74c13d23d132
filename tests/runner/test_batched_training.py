"""The trainer evaluates a meta-batch as one batched call where the method declares it
(zoo.batching), with the per-episode loop's training losses."""

from __future__ import annotations

import json

import pytest
from zoo_protonet import ProtoNet

from zoo.hparams import HParam
from zoo.plugins import registry
from zoo.runner import train
from zoo.runner.bench import run_suite

from .conftest import tiny_suite


class MetaBatched(ProtoNet):
    name = "protonet-meta-batch"
    hyperparameters = {"meta_batch": HParam(2, ge=1)}


@pytest.fixture
def meta_batched():
    reg = registry()
    reg.register("methods", MetaBatched.name, MetaBatched, owner="tests")
    yield
    reg.unregister("methods", MetaBatched.name)


def curve(folder) -> list[float]:
    (path,) = folder.glob("train/*/training.json")
    return [point["loss"] for point in json.loads(path.read_text())["curve"]]


def test_a_meta_batch_is_one_call_with_the_loops_losses(meta_batched, tmp_path, monkeypatch):
    calls = []
    batched = train.batched_losses

    def spy(method, episodes, loss):
        out = batched(method, episodes, loss)
        calls.append((len(episodes), out is not None))
        return out

    monkeypatch.setattr(train, "batched_losses", spy)
    monkeypatch.setattr(train, "batching_pays", lambda device: True)  # on the CPU too, here
    suite = tiny_suite(methods=[MetaBatched.name], test_datasets=["glyphs"])
    run_suite(suite, out=tmp_path / "batched", device="cpu", progress=False)
    assert calls == [(2, True)] * 3  # 6 training episodes, 2 per step
    monkeypatch.setattr(MetaBatched, "batches_episodes", False)
    run_suite(suite, out=tmp_path / "loop", device="cpu", progress=False)
    assert calls[3:] == []  # not asked when the method does not batch
    # float32: each step's gradient agrees to ~1e-6 of its scale; Adam's normalised steps carry
    # that rounding in the entries whose gradients are near zero, so later losses differ ~1e-5
    assert curve(tmp_path / "batched") == pytest.approx(curve(tmp_path / "loop"), rel=1e-4)
