"""Shared fixtures: a tiny suite (ProtoNet on glyphs, 3-way 1-shot, a handful of episodes)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from filelock import FileLock

from zoo.plugins import registry
from zoo.runner.suite import Suite, suite_from_dict

TINY: dict[str, Any] = {
    "suite": {
        "description": "tiny suite for the runner's tests",
        "methods": ["protonet"],
        "train_datasets": ["glyphs"],
        "test_datasets": ["glyphs", "digits"],
        "ways": [3], "shots": [1], "query": 3, "train_query": 2, "seeds": [0],
        "train_episodes": 6, "val_episodes": 2, "val_every": 3, "test_episodes": 4,
        "checkpoint_every": 2,
    },
}


def tiny_suite(**settings: Any) -> Suite:
    raw = {"suite": {**TINY["suite"], **settings}}
    return suite_from_dict("tiny", raw, "tests", registry=registry())


@pytest.fixture
def ray_alone(tmp_path_factory) -> Iterator[None]:
    """One Ray on this machine at a time among the processes of a parallel run (``pytest -n``):
    each Ray's nodes, agents and workers take ports and CPUs of their own. The lock file lies in
    the folder the run's processes share (each has its own base folder inside it)."""
    with FileLock(tmp_path_factory.getbasetemp().parent / "zoo-ray.lock"):
        yield


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
