"""Shared fixtures: a tiny suite (ProtoNet on glyphs, 3-way 1-shot, a handful of episodes)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

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


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
