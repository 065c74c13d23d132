"""Impossible settings, refused before any cell starts.

A way, shot or query of zero, a negative episode count or learning rate, or no workers cannot give
a result; without these checks some failed inside every cell (a traceback in each error.txt) and
some gave misleading messages (``train_episodes = -3`` reported "no validated checkpoint").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.errors import ZooError
from zoo.runner.schedule import LR_SCHEDULES


class SettingError(ZooError, ValueError):
    """A setting or hyper-parameter whose value no run can use."""


# setting -> (smallest allowed value, what it is)
MINIMUM: dict[str, tuple[int, str]] = {
    "ways": (1, "classes per episode"),
    "shots": (1, "support examples per class"),
    "train_way": (0, "the training way (0: one model per test way)"),
    "train_shot": (0, "the training shot (0: one model per test shot)"),
    "query": (1, "queries per class"),
    "train_query": (1, "training queries per class"),
    "train_episodes": (0, "training episodes (0: no meta-training)"),
    "val_episodes": (0, "validation episodes"),
    "val_every": (0, "training episodes between validations (0: at the end)"),
    "test_episodes": (1, "test episodes"),
    "checkpoint_every": (1, "training episodes between checkpoints"),
    "max_bad_steps": (1, "non-finite steps in a row before training stops"),
    "seeds": (0, "seeds"),
    "workers": (1, "cells run at once"),
}


MAXIMUM: dict[str, int] = {
    "train_episodes": 10**8, "val_episodes": 10**8, "test_episodes": 10**8,
    "seeds": 2**64 - 1,
}
"""The largest values allowed: a hundred million episodes is over a day at a millisecond an
episode (the smallest cells take several), and the per-episode records of a test alone would be
about 10 GB; a seed has at most 64 bits, the most ``torch.manual_seed`` takes."""

FRACTIONS: dict[str, str] = {
    "max_skipped_fraction": "the fraction of training steps that may be skipped as non-finite",
}


CHOICES: dict[str, tuple[str, ...]] = {
    "lr_schedule": LR_SCHEDULES,
}


def check_settings(settings: Mapping[str, Any], where: str) -> None:
    """Raise :class:`SettingError` for the first value in ``settings`` (suite settings, a
    ``[[part]]``, or a command's arguments under the same names) that no run can use."""
    for key, value in settings.items():
        if key in CHOICES and value not in CHOICES[key]:
            raise SettingError(f"{where}: {key} = {value!r}: choose one of "
                               f"{', '.join(map(repr, CHOICES[key]))}")
        if key in FRACTIONS and not 0 <= value <= 1:
            raise SettingError(f"{where}: {key} = {value!r}: {FRACTIONS[key]} must be in [0, 1]")
        if key not in MINIMUM:
            continue
        smallest, what = MINIMUM[key]
        values = list(value.values()) if isinstance(value, Mapping) else \
            value if isinstance(value, list) else [value]
        counts = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        if any(v < smallest for v in counts):
            raise SettingError(f"{where}: {key} = {value!r}: {what} must be at least {smallest}")
        largest = MAXIMUM.get(key)
        if largest is not None and any(v > largest for v in counts):
            raise SettingError(f"{where}: {key} = {value!r}: {what} must be at most {largest:,} "
                               "(no machine finishes more)" if key != "seeds" else
                               f"{where}: {key} = {value!r}: a seed must be at most 2**64 - 1 "
                               "(64 bits)")
