"""zoo: Bayesian few-shot and meta-learning methods side by side, on identical episodes.

The names below are imported when first used (PEP 562), so that commands which only read results
(``zoo report``) do not import torch: it takes ~2 s and ~650 MB before anything else runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zoo.episode import Episode, EpisodeSampler
    from zoo.hookspecs import hookimpl
    from zoo.hparams import HParam
    from zoo.method import Method, Prediction, build_method

__version__ = "0.1.0"
__all__ = ["Episode", "EpisodeSampler", "HParam", "Method", "Prediction", "build_method", "episodes",
           "hookimpl", "load_results", "run_suite", "train_and_evaluate"]

_HOMES = {"Episode": "zoo.episode", "EpisodeSampler": "zoo.episode", "HParam": "zoo.hparams",
          "Method": "zoo.method", "Prediction": "zoo.method", "build_method": "zoo.method",
          "hookimpl": "zoo.hookspecs",
          # the Python API (zoo.api) sits above the runner: it is named here for users and
          # imported on first use only, so the layers below it (which import zoo) never load it
          "episodes": "zoo.api", "load_results": "zoo.api", "run_suite": "zoo.api",
          "train_and_evaluate": "zoo.api"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'zoo' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # later lookups do not come back here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
