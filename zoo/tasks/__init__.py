"""Task kinds: what an episode is, what a method returns, how it is scored and reported.

One module per kind: :mod:`~zoo.tasks.classification` (few-shot way/shot episodes),
:mod:`~zoo.tasks.regression` (context/target sets of functions from a family),
:mod:`~zoo.tasks.sequential` (streams seen once), :mod:`~zoo.tasks.integration` (integrands with
known truth). Kinds register through the ``zoo_register_tasks`` hook (``zoo tasks`` lists them);
the built-in ones are :data:`BUILTIN`. The kinds' modules import no torch (reading results needs
none); the bases of their methods (:mod:`~zoo.tasks.methods`) are imported when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zoo._lazy import exports
from zoo.tasks.base import PredictionError, ReportMetric, Task, TaskView
from zoo.tasks.classification import Classification
from zoo.tasks.figures import CurveGrid, MetricLines, ParameterLines, Reliability
from zoo.tasks.integration import IntegralEstimate, Integration, IntegrationEpisode, IntegrationProblem
from zoo.tasks.regression import Regression, RegressionEpisode, RegressionPrediction, sample_task
from zoo.tasks.sequential import Sequential, Stream, StreamPrediction

if TYPE_CHECKING:
    from zoo.tasks.methods import IntegrationMethod, RegressionMethod, StreamMethod

BUILTIN: dict[str, type[Task]] = {k.name: k for k in (Classification, Regression, Sequential,
                                                      Integration)}

__all__ = ["BUILTIN", "Classification", "CurveGrid", "IntegralEstimate", "Integration",
           "IntegrationEpisode", "IntegrationMethod", "IntegrationProblem", "MetricLines",
           "ParameterLines", "PredictionError", "Regression", "RegressionEpisode",
           "RegressionMethod", "RegressionPrediction", "Reliability", "ReportMetric", "Sequential",
           "Stream", "StreamMethod", "StreamPrediction", "Task", "TaskView", "sample_task"]

__getattr__, __dir__ = exports(globals(), {"IntegrationMethod": "zoo.tasks.methods",
                                           "RegressionMethod": "zoo.tasks.methods",
                                           "StreamMethod": "zoo.tasks.methods"})
