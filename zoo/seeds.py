"""Where every random number of the zoo comes from: seeds that are functions of named coordinates.

* :func:`coordinate_seed` (and :func:`hash_seed` under it): a 63-bit seed that depends on every
  coordinate it is given (run seed, data set, split, shape, index, ...) and on nothing else. An
  episode, a task, a stream and an augmentation are each drawn from one, so every method sees the
  same test episodes and comparisons can be paired.
* :func:`episode_generator` and :func:`draw_seed`: the draws a method makes for one episode
  (Monte Carlo predictives, inner loops, random orders), a function of the episode and a salt per
  use, never of the global generator. :func:`episode_own_seed` is the episode's own seed reduced
  to 31 bits, the seed of the class-probability draws of the latent-Gaussian methods that name no
  salt for them (DKT, logistic-softmax).
* :func:`refusing_episode_seeds`: a block in which asking for an episode's seed is an error (a
  batched meta-loss, whose episodes each have their own seed, :mod:`zoo.batching`).
* :func:`seed_everything`, :func:`rng_state`, :func:`set_rng_state`: the global generators
  (Python's, NumPy's, torch's) seeded at the start of a training and saved in, and restored from,
  its checkpoints, so a resumed training ends with the weights of one that never stopped.

The coordinate seeds import no torch (the task kinds, which reading results needs, use them).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from zoo.errors import ZooError

if TYPE_CHECKING:
    import torch

__all__ = ["coordinate_seed", "draw_seed", "episode_generator", "episode_own_seed", "hash_seed",
           "refusing_episode_seeds", "rng_state", "seed_everything", "set_rng_state"]

SEED_BITS = 63
SALT_MIX = 0x9E3779B97F4A7C15  # 2^64 / golden ratio: salts 1, 2, ... far apart in seed space


class Identified:
    """An episode of any kind names itself by its coordinates in ``info``:
    ``"<dataset>/<split>#<index>"``."""

    info: dict[str, Any]

    @property
    def id(self) -> str:
        i = self.info
        return f"{i.get('dataset', '?')}/{i.get('split', '?')}#{i.get('index', '?')}"


def hash_seed(key: str | bytes, bits: int = SEED_BITS) -> int:
    """The low ``bits`` bits of the little-endian number in the first eight bytes of the SHA-256
    digest of ``key`` (``bits <= 64``)."""
    if not 0 < bits <= 64:
        raise ValueError(f"bits = {bits}: a seed has 1 to 64 bits")
    data = key.encode() if isinstance(key, str) else key
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "little") & (2**bits - 1)


def coordinate_seed(*coordinates: Any) -> int:
    """A 63-bit seed of ``coordinates`` (JSON values: numbers, strings, lists), the hash of their
    JSON list: two calls agree exactly when every coordinate does, type included (``1 != 1.0``)."""
    return hash_seed(json.dumps(list(coordinates)))


_REFUSED: ContextVar[str | None] = ContextVar("zoo_episode_seeds_refused", default=None)


@contextmanager
def refusing_episode_seeds(reason: str | None) -> Iterator[None]:
    """Within the block, :func:`episode_generator` and :func:`draw_seed` raise a
    :class:`~zoo.errors.ZooError` saying ``reason``; ``None`` allows them again (a block inside)."""
    token = _REFUSED.set(reason)
    try:
        yield
    finally:
        _REFUSED.reset(token)


def _check_allowed() -> None:
    reason = _REFUSED.get()
    if reason is not None:
        raise ZooError(reason)


def episode_generator(episode: Any, salt: int = 0) -> torch.Generator:
    """A CPU generator seeded by ``episode.info["seed"]`` mixed with ``salt`` (one salt per use),
    never the global RNG, so that predictions that draw random numbers are a function of the
    episode alone."""
    import torch

    _check_allowed()
    seed = int(episode.info.get("seed", 0)) ^ (salt * SALT_MIX & (2**SEED_BITS - 1))
    return torch.Generator().manual_seed(seed)


def draw_seed(episode: Any, salt: int) -> int:
    """The seed of an estimator's draws for ``episode`` with ``salt`` (one salt per use, e.g.
    inner loop and predictive): a 62-bit number drawn from :func:`episode_generator`, so that a
    prediction is a function of (weights, episode) alone."""
    import torch

    return int(torch.randint(0, 2**62, (1,), generator=episode_generator(episode, salt)))


def episode_own_seed(episode: Any) -> int:
    """The episode's own seed reduced to 31 bits: the seed of the class-probability draws of a
    latent-Gaussian method that names no salt for them (DKT, logistic-softmax; their measured
    numbers are drawn with it). A new use takes a salt of its own (:func:`draw_seed`)."""
    _check_allowed()
    return int(episode.info.get("seed", 0)) % 2**31


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (torch's on every device)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Every global RNG's state as tensors and numbers (loadable with ``weights_only``). Python's
    625 state words are one tensor, not a tuple of 625 numbers that ``torch.save`` pickles one by
    one (most of a small model's checkpoint time)."""
    import numpy as np
    import torch

    name, keys, pos, has_gauss, cached = np.random.get_state()
    version, words, gauss = random.getstate()
    state = {"torch": torch.get_rng_state(),
             "python": (version, torch.tensor(words, dtype=torch.int64), gauss),
             "numpy": (name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached)}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` saved."""
    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    version, words, gauss = state["python"]
    random.setstate((version, tuple(words.tolist()), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
