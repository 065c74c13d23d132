"""Seeds as functions of coordinates, the episode streams, and the global RNG state of a
checkpoint."""

from __future__ import annotations

import hashlib
import json
import random

import numpy as np
import pytest
import torch

from zoo.episode import Episode, EpisodeSampler, episode_seed
from zoo.errors import ZooError
from zoo.io import load_checkpoint
from zoo.seeds import (
    coordinate_seed,
    draw_seed,
    episode_generator,
    episode_own_seed,
    hash_seed,
    refusing_episode_seeds,
    rng_state,
    set_rng_state,
)


def test_a_coordinate_seed_is_the_low_63_bits_of_the_sha256_of_its_json_list():
    coordinates = [3, "glyphs", "train", 5, 1, 4, 7]
    digest = hashlib.sha256(json.dumps(coordinates).encode()).digest()
    assert coordinate_seed(*coordinates) == int.from_bytes(digest[:8], "little") & (2**63 - 1)
    assert coordinate_seed(*coordinates) == episode_seed(*coordinates)
    assert coordinate_seed(3, "glyphs") != coordinate_seed(3.0, "glyphs")
    assert coordinate_seed(1, 2) != coordinate_seed(2, 1)


def test_hash_seed_keeps_the_low_bits_of_the_digest():
    full = int.from_bytes(hashlib.sha256(b"key").digest()[:8], "little")
    assert hash_seed("key", bits=64) == full
    assert hash_seed(b"key", bits=56) == int.from_bytes(hashlib.sha256(b"key").digest()[:7], "little")
    assert hash_seed("key") == full & (2**63 - 1)
    with pytest.raises(ValueError, match="1 to 64 bits"):
        hash_seed("key", bits=65)


def episode(seed: int) -> Episode:
    empty = torch.zeros(0)
    return Episode(empty, empty, empty, empty, way=2, shot=1, info={"seed": seed})


def test_episode_streams_depend_on_the_episode_and_the_salt_only():
    e = episode(2**40 + 12345)
    torch.manual_seed(0)
    a = torch.rand(3, generator=episode_generator(e, 4))
    torch.manual_seed(1)
    assert torch.equal(a, torch.rand(3, generator=episode_generator(e, 4)))
    expected = torch.Generator().manual_seed((2**40 + 12345) ^ (4 * 0x9E3779B97F4A7C15 & (2**63 - 1)))
    assert torch.equal(a, torch.rand(3, generator=expected))
    assert draw_seed(e, 1) != draw_seed(e, 2) and 0 <= draw_seed(e, 1) < 2**62
    assert episode_own_seed(e) == (2**40 + 12345) % 2**31


def test_episode_seeds_are_refused_in_a_block_and_allowed_in_a_block_inside():
    e = episode(7)
    with refusing_episode_seeds("no seeds here"):
        for ask in (lambda x: draw_seed(x, 1), episode_generator, episode_own_seed):
            with pytest.raises(ZooError, match="no seeds here"):
                ask(e)
        with refusing_episode_seeds(None):
            assert draw_seed(e, 1) == draw_seed(episode(7), 1)
        with pytest.raises(ZooError):
            episode_generator(e)
    episode_generator(e)


def test_a_sampled_episode_carries_its_coordinate_seed():
    from zoo.plugins import load_dataset

    sampler = EpisodeSampler(load_dataset("glyphs"), "train", 3, 1, 2, seed=4)
    assert sampler[2].info["seed"] == coordinate_seed(4, "glyphs", "train", 3, 1, 2, 2)


def test_rng_states_survive_a_weights_only_round_trip(tmp_path):
    torch.manual_seed(3), random.seed(3), np.random.seed(3), np.random.randn()
    path = tmp_path / "rng.pt"
    torch.save(rng_state(), path)
    expected = (torch.rand(2).tolist(), random.random(), np.random.randn())
    torch.manual_seed(0), random.seed(0), np.random.seed(0)
    set_rng_state(load_checkpoint(path))
    assert (torch.rand(2).tolist(), random.random(), np.random.randn()) == expected
