"""A model or checkpoint file is data, never code. A crafted ``model.pt`` whose pickle runs a
command is refused before anything in it runs; a corrupt one is named."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from zoo.errors import ZooError
from zoo.io import load_checkpoint
from zoo.runner.train import load_run, rng_state, set_rng_state


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


def test_rng_states_survive_a_weights_only_round_trip(tmp_path):
    import random

    import numpy as np

    torch.manual_seed(3), random.seed(3), np.random.seed(3), np.random.randn()
    path = tmp_path / "rng.pt"
    torch.save(rng_state(), path)
    expected = (torch.rand(2).tolist(), random.random(), np.random.randn())
    torch.manual_seed(0), random.seed(0), np.random.seed(0)
    set_rng_state(load_checkpoint(path))
    assert (torch.rand(2).tolist(), random.random(), np.random.randn()) == expected


def test_rng_states_of_older_checkpoints_still_load():
    """Python's state was saved as a tuple of 625 numbers before it became one tensor."""
    import random

    random.seed(5)
    state = rng_state()
    version, words, gauss = state["python"]
    expected = random.random()
    random.seed(0)
    set_rng_state(state | {"python": (version, tuple(words.tolist()), gauss)})
    assert random.random() == expected
