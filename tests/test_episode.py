"""Episodes are pure functions of their coordinates, in any process, and bad requests say why."""

import hashlib
import subprocess
import sys

import pytest
import torch

from zoo import EpisodeSampler
from zoo.episode import episode_seed
from zoo.errors import EpisodeError

DIGEST = """
import hashlib, sys
from zoo import EpisodeSampler
from zoo.plugins import load_dataset
ep = EpisodeSampler(load_dataset("glyphs"), "test", 5, 2, 3, seed=7)[11]
h = hashlib.sha256()
for t in (ep.support_x, ep.support_y, ep.query_x, ep.query_y):
    h.update(t.contiguous().numpy().tobytes())
print(h.hexdigest())
"""


def digest(ep) -> str:
    h = hashlib.sha256()
    for t in (ep.support_x, ep.support_y, ep.query_x, ep.query_y):
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def test_identical_in_another_process(glyphs):
    here = digest(EpisodeSampler(glyphs, "test", 5, 2, 3, seed=7)[11])
    there = subprocess.run([sys.executable, "-c", DIGEST], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert here == there


def test_pure_function_of_coordinates_and_blind_to_global_rng(glyphs):
    sampler = EpisodeSampler(glyphs, "train", 5, 1, 4, seed=3)
    state = torch.get_rng_state()
    a = sampler[5]
    torch.manual_seed(999)
    b = EpisodeSampler(glyphs, "train", 5, 1, 4, seed=3)[5]
    assert digest(a) == digest(b)
    torch.manual_seed(0)
    assert digest(sampler[6]) != digest(a)
    assert digest(EpisodeSampler(glyphs, "train", 5, 1, 4, seed=4)[5]) != digest(a)
    assert episode_seed(3, "glyphs", "train", 5, 1, 4, 5) == a.info["seed"]
    torch.set_rng_state(state)


def test_layout_labels_and_classes(glyphs):
    ep = EpisodeSampler(glyphs, "test", 4, 3, 2, seed=0)[0]
    assert ep.support_x.shape == (12, 1, 28, 28) and ep.query_x.shape == (8, 1, 28, 28)
    assert ep.support_y.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert ep.query_y.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert len(set(ep.info["classes"])) == 4
    test_names = {glyphs.class_names[c] for c in glyphs.splits["test"]}
    assert set(ep.info["classes"]) <= test_names
    assert ep.query == 2 and ep.id == "glyphs/test#0"


def test_support_and_query_are_distinct_examples(glyphs):
    ep = EpisodeSampler(glyphs, "val", 5, 5, 10, seed=1)[2]
    for c in range(5):
        s, q = ep.support_x[ep.support_y == c], ep.query_x[ep.query_y == c]
        both = torch.cat([s, q]).flatten(1)
        assert torch.unique(both, dim=0).shape[0] == 15


def test_way_larger_than_split_is_explained(glyphs):
    n = len(glyphs.splits["val"])
    with pytest.raises(EpisodeError, match=f"has {n} classes, but way=50: use a way of {n} or "
                       "less \\(zoo bench: --set ways=...; zoo train and zoo evaluate: --way\\)"):
        EpisodeSampler(glyphs, "val", 50, 1, 1)


def test_too_many_examples_per_class_is_explained(glyphs):
    with pytest.raises(EpisodeError, match="has 20 examples, but shot \\+ query = 21: .*"
                       "zoo bench: --set shots=... or --set query=..."):
        EpisodeSampler(glyphs, "test", 5, 5, 16)


def test_unknown_split_lists_the_splits(glyphs):
    with pytest.raises(EpisodeError, match="no split 'novel'.*'test', 'train', 'val'"):
        EpisodeSampler(glyphs, "novel", 5, 1, 1)
