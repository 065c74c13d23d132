"""The benchmark runner: suites expand into cells; each cell trains (resumably) a registered method
on one data set, selects its best checkpoint and fits a temperature on validation episodes, and is
scored on identical test episodes; results go to a results folder that ``zoo report`` reads.

Modules: :mod:`~zoo.runner.config` (suites, cells, ``--set``), :mod:`~zoo.runner.storage`
(results folder, atomic files, env.json), :mod:`~zoo.runner.train`, :mod:`~zoo.runner.evaluate`,
:mod:`~zoo.runner.cell` (one unit of work), :mod:`~zoo.runner.executors` (local, Ray),
:mod:`~zoo.runner.bench` (a whole suite), :mod:`~zoo.runner.report` (tables and plots).
"""

from zoo.runner.config import Cell, Suite, expand_cells, load_suite, suite_names

__all__ = ["Cell", "Suite", "expand_cells", "load_suite", "suite_names"]
