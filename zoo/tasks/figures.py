"""The figures a task kind asks for, as data: what to plot against what; the runner draws them
(:mod:`zoo.runner.plots`), as benchopt's plots return traces that its framework draws.

A kind lists them in :attr:`zoo.tasks.TaskView.figures`. Every kind also gets the runner's own
figures (training curves and inner-loop convergence per setting).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Metrics = tuple[tuple[str, str], ...]
"""``(summary key, panel title)`` per panel."""


@dataclass(frozen=True)
class Reliability:
    """Per method, one panel per setting of the kind: accuracy against confidence of the pooled
    queries (records with per-query ``confidence``, ``confidence_calibrated`` and ``correct``),
    raw and temperature-scaled. Written as ``reliability-<method>.png``."""


@dataclass(frozen=True)
class Coverage:
    """Per method, one panel per setting of the kind: the accuracy of the most confident
    fraction of each episode's queries against that fraction, mean over episodes, beside the
    oracle's (records with per-query ``confidence`` and ``correct``; summaries with ``aurc`` and
    ``eaurc``). Written as ``coverage-<method>.png``."""


@dataclass(frozen=True)
class MetricLines:
    """Per (train, test) data set pair: each metric of the summary against the shape key
    ``x_key``, one line per method; ``errors``: the summary key of a metric's error bar (its CI
    half-width). Written as ``<name>-<data set>.png``."""

    x_key: str
    metrics: Metrics
    name: str
    log_x: bool = False
    log_y: bool = False
    errors: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ParameterLines:
    """Per base data set and report column: each metric against the one numeric spec parameter
    in which its data sets differ (``dim`` of ``genz-oscillatory[dim=3]``), one line per method;
    data sets scored on themselves only. Written as
    ``<name>-<base>-vs-<parameter>-<column>.png``."""

    metrics: Metrics
    name: str
    log_y: bool = False
    errors: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CurveGrid:
    """Per setting, a grid of panels from the summary's list ``curve`` of points: one row per
    ``(x key, x label)`` of ``rows`` and one column per ``(y key, y label)`` of ``columns``, each
    left out where no method's points have its key (a class stream has no RMSE panel), one line
    per method.
    Written as ``<name>-<setting>.png``."""

    rows: Metrics
    columns: Metrics
    name: str
    curve: str = "curve"
    x_scale: str = "linear"


Figure = Reliability | Coverage | MetricLines | ParameterLines | CurveGrid
