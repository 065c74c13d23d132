"""Task kinds: what an episode is, what a method returns, how it is scored and reported.

One module per kind: :mod:`~zoo.tasks.classification` (few-shot way/shot episodes),
:mod:`~zoo.tasks.regression` (context/target sets of functions from a family),
:mod:`~zoo.tasks.sequential` (streams seen once), :mod:`~zoo.tasks.integration` (integrands with
known truth). Kinds register through the ``zoo_register_tasks`` hook (``zoo tasks`` lists them);
the built-in ones are :data:`BUILTIN`. The kinds' modules import no torch (reading results needs
none); the bases of their methods are in :mod:`~zoo.tasks.methods`.
"""

from zoo.tasks.base import PredictionError, Task, TaskView
from zoo.tasks.classification import Classification
from zoo.tasks.integration import Integration
from zoo.tasks.regression import Regression
from zoo.tasks.sequential import Sequential

BUILTIN: dict[str, type[Task]] = {k.name: k for k in (Classification, Regression, Sequential,
                                                      Integration)}

__all__ = ["BUILTIN", "PredictionError", "Task", "TaskView"]
