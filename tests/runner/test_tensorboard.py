"""``zoo bench --tensorboard DIR``: each training's curve, as recorded in its training.json, is in
DIR as TensorBoard scalars (read back with TensorBoard's own reader); without the package, the
error names the extra to install."""

from __future__ import annotations

import json
import sys

import pytest

from zoo.errors import ZooError
from zoo.runner import tensorboard as board

from .conftest import tiny_suite


def test_curves_reach_tensorboard_as_recorded(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from zoo.runner.bench import run_suite

    out, logdir = tmp_path / "out", tmp_path / "tb"
    outcome = run_suite(tiny_suite(), out=out, device="cpu", progress=False, tensorboard=logdir)
    assert len(outcome.finished) == 2  # glyphs and digits: one training, written once
    (run,) = [p for p in logdir.glob("protonet/*") if p.is_dir()]
    cell = outcome.finished[0]
    curve = json.loads((out / "cells" / cell.cell_hash / "training.json").read_text())["curve"]
    events = EventAccumulator(str(run))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {"train/loss", "train/val_accuracy"}
    for key in ("loss", "val_accuracy"):
        got = [(e.step, e.value) for e in events.Scalars(f"train/{key}")]
        assert got == [(p["episode"], pytest.approx(p[key], rel=1e-6)) for p in curve]


def test_without_tensorboard_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ZooError, match=r'pip install "bayes-meta-zoo\[tensorboard\]"'):
        board.check_available()
