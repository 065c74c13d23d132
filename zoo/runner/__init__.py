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

from typing import TYPE_CHECKING

from zoo._lazy import exports

if TYPE_CHECKING:
    from zoo.runner.bench import prepare_suite, run_suite
    from zoo.runner.cells import Cell, expand_cells
    from zoo.runner.report import write_report
    from zoo.runner.storage import Results
    from zoo.runner.suite import Suite, load_suite, suite_names

__all__ = ["Cell", "Results", "Suite", "expand_cells", "load_suite", "prepare_suite", "run_suite",
           "suite_names", "write_report"]

# running a suite imports torch and the plugin host; reading a suite or a results folder does not;
# the command line imports none of them before a command runs
__getattr__, __dir__ = exports(globals(), {"Cell": "zoo.runner.cells",
                                           "expand_cells": "zoo.runner.cells",
                                           "Suite": "zoo.runner.suite",
                                           "load_suite": "zoo.runner.suite",
                                           "suite_names": "zoo.runner.suite",
                                           "prepare_suite": "zoo.runner.bench",
                                           "run_suite": "zoo.runner.bench",
                                           "write_report": "zoo.runner.report",
                                           "Results": "zoo.runner.storage"})
