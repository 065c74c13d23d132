"""The benchmark runner: suites expand into cells; each cell trains (resumably) a registered method
on one data set, selects its best checkpoint and calibrates on validation episodes, and is scored
on identical test episodes; results go to a results folder that ``zoo report`` reads. What
episodes are, what a prediction is and how it is scored belong to the cell's task kind
(:mod:`zoo.tasks`); the runner only calls it.

Modules: :mod:`~zoo.runner.suite` (suites, ``--set``), :mod:`~zoo.runner.cells` (cells and their
hashes), :mod:`~zoo.runner.storage` (results folder, atomic files, env.json),
:mod:`~zoo.runner.train`, :mod:`~zoo.runner.evaluate`, :mod:`~zoo.runner.cell` (one unit of work),
:mod:`~zoo.runner.executors` (local, Ray), :mod:`~zoo.runner.bench` (a whole suite),
:mod:`~zoo.runner.collect` (a results folder read back), :mod:`~zoo.runner.report` (tables),
:mod:`~zoo.runner.plots` (figures).

The names below are imported when first used (PEP 562), so that the command line, which imports
:mod:`zoo.runner.cli`, starts without the task kinds and numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zoo.runner.cells import Cell, expand_cells
    from zoo.runner.suite import Suite, load_suite, suite_names

__all__ = ["Cell", "Suite", "expand_cells", "load_suite", "suite_names"]

_HOMES = {"Cell": "zoo.runner.cells", "expand_cells": "zoo.runner.cells",
          "Suite": "zoo.runner.suite", "load_suite": "zoo.runner.suite",
          "suite_names": "zoo.runner.suite"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'zoo.runner' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
