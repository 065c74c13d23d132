"""A model or checkpoint file is data, never code. A crafted ``model.pt`` whose pickle runs a
command is refused before anything in it runs; a corrupt one is named."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from zoo.errors import ZooError
from zoo.io import load_checkpoint
from zoo.runner.train import load_run


class Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_a_crafted_model_file_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "model.pt"
    torch.save({"state_dict": {}, "config": {}, "temperature": 1.0,
                "info": Payload(str(marker))}, path)
    with pytest.raises(ZooError, match=f"{path}.*refused"):
        load_run(path, "cpu")
    assert not marker.exists()
    with pytest.raises(ZooError, match="refused"):  # the plain pickle format too
        path.write_bytes(pickle.dumps({"info": Payload(str(marker))}))
        load_checkpoint(path)
    assert not marker.exists()


def test_a_truncated_checkpoint_names_its_file(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.save({"model": {"w": torch.ones(1000)}}, path)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ZooError, match=f"{path}: cannot be read"):
        load_checkpoint(path)


def test_random_bytes_are_called_corrupt_not_crafted(tmp_path):
    import random

    rng = random.Random(0)
    for i in range(20):
        path = tmp_path / f"model{i}.pt"
        path.write_bytes(rng.randbytes(rng.choice([16, 2000, 4096])))
        with pytest.raises(ZooError, match=f"{path}: cannot be read .*truncated or corrupt") as e:
            load_checkpoint(path)
        assert "Python objects" not in str(e.value) and "weights_only" not in str(e.value)


def test_weights_of_another_model_are_named_as_such(tmp_path):
    """A model.pt whose configuration says one method and whose weights are another's."""
    from zoo.plugins import registry
    from zoo.runner.cell import DatasetCache
    from zoo.runner.cells import expand_cells
    from zoo.runner.train import build_for_cell, load_weights

    from .conftest import tiny_suite

    reg = registry()
    (proto, _), (md, _) = (expand_cells(tiny_suite(methods=[m]), [m], reg)
                           for m in ("protonet", "md-bfsc"))
    data = DatasetCache(None, "cpu", reg).get("glyphs")
    model = build_for_cell(proto, data, "cpu", reg)
    other = build_for_cell(md, data, "cpu", reg).state_dict()
    with pytest.raises(ZooError, match="model.pt: its weights do not fit the protonet model"):
        load_weights(model, other, tmp_path / "model.pt", "the protonet model")
    load_weights(model, build_for_cell(proto, data, "cpu", reg).state_dict(), tmp_path, "x")
