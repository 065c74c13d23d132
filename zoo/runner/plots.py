"""Figures of a report (PNG, matplotlib's Agg backend: no display needed): training curves and
inner-loop convergence curves per setting for every kind, and the figures each task kind asks
for as data (:mod:`zoo.tasks.figures`; classification: reliability diagrams; regression: metrics
against context size; ...), drawn here.

A method has one style (colour, line style, marker) in every figure, distinct from every other
method's for any number of methods, and legends sit outside the axes so they hide no curve."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from zoo.io import atomic_write_bytes
from zoo.metrics import ReliabilityBins, reliability_bins
from zoo.runner.collect import Entry, Report, inner_curves
from zoo.spec import parse_spec
from zoo.tasks.base import pooled
from zoo.tasks.figures import CurveGrid, Figure, MetricLines, ParameterLines, Reliability

COLOURS = [f"tab:{c}" for c in ("blue", "orange", "green", "red", "purple", "brown", "pink",
                                 "gray", "olive", "cyan")]
LINES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P", "X"]


def method_styles(methods: list[str]) -> dict[str, dict[str, Any]]:
    """A distinct (colour, line style, marker) for each method, in order: the colour cycles
    fastest, the line style changes after every ten methods (40 distinct pairs), and the
    marker's period of seven, prime to ten, tells apart what is left."""
    return {m: {"color": COLOURS[i % len(COLOURS)],
                "linestyle": LINES[i // len(COLOURS) % len(LINES)],
                "marker": MARKERS[i % len(MARKERS)], "markersize": 4, "lw": 1.2}
            for i, m in enumerate(methods)}


def legend_outside(fig: Any, ax: Any) -> None:
    """One legend for the figure, right of the axes, in as many columns as fit the figure."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=7, markerscale=0.8,
                   ncols=1 + len(labels) // 18)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())
    pyplot().close(fig)
    return path


def draw_all(report: Report, out: Path) -> list[Path]:
    """Every figure of ``report`` into ``out``: each kind's, then the training curves."""
    written = []
    for kind in report.kinds():
        for figure in report.tasks[kind].view.figures:
            written += draw(report, kind, figure, out)
    written += training_curves(report, out)
    return written


def draw(report: Report, kind: str, figure: Figure, out: Path) -> list[Path]:
    """The files of one figure that task kind ``kind`` asks for."""
    if isinstance(figure, Reliability):
        return reliability_diagrams(report, kind, out)
    if isinstance(figure, MetricLines):
        return metric_lines(report, kind, figure.x_key, list(figure.metrics), out, figure.name,
                            figure.log_x, figure.log_y, dict(figure.errors) or None)
    if isinstance(figure, ParameterLines):
        return parameter_lines(report, kind, list(figure.metrics), out, figure.name,
                               figure.log_y, dict(figure.errors) or None)
    if isinstance(figure, CurveGrid):
        return curve_grids(report, kind, figure, out)
    raise TypeError(f"task kind {kind!r} asks for a figure of unknown type "
                    f"{type(figure).__name__}; use one of zoo.tasks.figures")


def reliability(entry: Entry) -> tuple[ReliabilityBins, ReliabilityBins]:
    """The reliability bins of an entry's pooled queries: of the method's own confidences, and of
    the temperature-scaled ones."""
    records = list(entry.episodes.values())
    correct = pooled(records, "correct")
    return tuple(reliability_bins(pooled(records, key), correct)
                 for key in ("confidence", "confidence_calibrated"))


def reliability_diagrams(report: Report, kind: str, out: Path) -> list[Path]:
    """One figure per method of ``kind``: accuracy against confidence per setting."""
    plt = pyplot()
    written = []
    for method in report.methods:
        done = [s for s in report.settings if s[0] == kind
                and (method, s) in report.entries and report.entries[(method, s)].episodes]
        if not done:
            continue
        fig, axes = plt.subplots(1, len(done), figsize=(3.2 * len(done), 3.5), squeeze=False,
                                 layout="constrained")
        for ax, s in zip(axes[0], done):
            for bins, color, name in zip(reliability(report.entries[(method, s)]),
                                         ("tab:blue", "tab:orange"), ("raw", "temperature-scaled")):
                centers = (bins.edges[:-1] + bins.edges[1:]) / 2
                width = np.diff(bins.edges)
                full = bins.count > 0
                ax.bar(centers[full], bins.accuracy[full], width=width[full] * 0.9,
                       alpha=0.5, color=color, label=name, edgecolor=color)
            ax.plot([0, 1], [0, 1], "k--", lw=1)
            ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", title=report.label(s))
        axes[0][0].set_ylabel("accuracy")
        axes[0][0].legend(fontsize=7, loc="upper left")
        fig.suptitle(f"{method}: reliability")
        written.append(save(fig, out / f"reliability-{slug(method)}.png"))
    return written


def training_curves(report: Report, out: Path) -> list[Path]:
    """Meta-loss and validation score during training, and inner-loop convergence, per setting."""
    plt = pyplot()
    styles = method_styles(report.methods)
    written, drawn = [], set()
    for s in report.settings:
        task = report.tasks[s[0]]
        label = report.label(s)
        entries = [report.entries[(m, s)] for m in report.methods
                   if (m, s) in report.entries and any(report.entries[(m, s)].curves)]
        # settings that share their trainings (regression context sizes) get one figure
        key = json.dumps([(e.method, e.curves) for e in entries], sort_keys=True)
        if entries and key not in drawn:
            drawn.add(key)
            fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(10.5, 3.8), layout="constrained")
            key = task.selection_key
            for e in entries:
                curve = next(c for c in e.curves if c)
                x = [p["episode"] for p in curve]
                ax_loss.plot(x, [p["loss"] for p in curve], label=e.method, **styles[e.method])
                if any(key in p for p in curve):
                    ax_val.plot(x, [p.get(key, np.nan) for p in curve], **styles[e.method])
            ax_loss.set(xlabel="training episode", ylabel="meta-loss",
                        yscale="log" if all(p["loss"] > 0 for e in entries
                                            for p in next(c for c in e.curves if c)) else "linear")
            ax_val.set(xlabel="training episode", ylabel=key.replace("val_", "validation "))
            legend_outside(fig, ax_loss)
            fig.suptitle(f"training: {label} (seed {entries[0].results[0]['seed']})"
                         if entries[0].results else f"training: {label}")
            written.append(save(fig, out / f"training-{slug(label)}.png"))
        inner = [(m, inner_curves(report.entries[(m, s)])) for m in report.methods
                 if (m, s) in report.entries]
        inner = [(m, c) for m, c in inner if c is not None]
        if inner:
            fig, ax = plt.subplots(figsize=(6, 3.8), layout="constrained")
            for m, c in inner:
                ax.plot(np.arange(1, len(c) + 1), c, label=m,
                        **{**styles[m], "markevery": max(1, len(c) // 12)})
            ax.set(xlabel="inner step", ylabel="inner objective (mean over test episodes)",
                   title=f"convergence: {label}")
            legend_outside(fig, ax)
            written.append(save(fig, out / f"convergence-{slug(label)}.png"))
    return written


def curve_grids(report: Report, kind: str, figure: CurveGrid, out: Path) -> list[Path]:
    """Per setting of ``kind``: the grid of ``figure`` (:class:`zoo.tasks.figures.CurveGrid`)."""
    plt = pyplot()
    styles = method_styles(report.methods)
    written = []
    rows, columns = len(figure.rows), len(figure.columns)
    for s in [s for s in report.settings if s[0] == kind]:
        fig, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3.15 * rows), squeeze=False,
                                 layout="constrained")
        for m in report.methods:
            entry = report.entries.get((m, s))
            if entry is None or not entry.results:
                continue
            curve = entry.summary()[figure.curve]
            for row, (x_key, _) in zip(axes, figure.rows):
                if x_key not in curve[0]:
                    continue
                for ax, (key, _) in zip(row, figure.columns):
                    ax.plot([p[x_key] for p in curve], [p[key] for p in curve], label=m,
                            **styles[m])
        for row, (_, x_label) in zip(axes, figure.rows):
            for ax, (_, y_label) in zip(row, figure.columns):
                ax.set(xlabel=x_label, ylabel=y_label, xscale=figure.x_scale)
        legend_outside(fig, axes[0, 0])
        fig.suptitle(f"{kind}: {report.label(s)}")
        written.append(save(fig, out / f"{figure.name}-{slug(report.label(s))}.png"))
    return written


def metric_lines(report: Report, kind: str, x_key: str, metrics: list[tuple[str, str]],
                 out: Path, name: str, log_x: bool = False, log_y: bool = False,
                 errors: dict[str, str] | None = None) -> list[Path]:
    """Per (train, test) data set pair: each metric of the summary against the shape key
    ``x_key``, one line per method (regression: against context size; integration: budget);
    ``errors``: the summary key of a metric's error bar (its CI half-width)."""
    plt = pyplot()
    styles = method_styles(report.methods)
    written = []
    pairs = sorted({(s[1], s[2]) for s in report.settings if s[0] == kind})
    task = report.tasks[kind]
    index = task.column_keys.index(x_key)
    for train, test in pairs:
        settings = [s for s in report.settings if s[:3] == (kind, train, test)]
        fig, axes = plt.subplots(1, len(metrics), figsize=(3.6 * len(metrics), 3.3), squeeze=False,
                                 layout="constrained")
        for m in report.methods:
            points = [(s[3][index], report.entries[(m, s)].summary()) for s in settings
                      if (m, s) in report.entries and report.entries[(m, s)].results]
            if not points:
                continue
            points.sort(key=lambda p: p[0])
            _lines(axes[0], metrics, points, m, styles[m], errors)
        budgets = sorted({s[3][index] for s in settings})
        for ax, (_, title) in zip(axes[0], metrics):
            ax.set(xlabel=x_key, title=title, xscale="log" if log_x else "linear",
                   yscale="log" if log_y else "linear")
            if log_x:  # the budgets themselves, not a log axis's crowded minor labels
                ax.set_xticks(budgets, [f"{b:g}" for b in budgets])
                ax.xaxis.set_minor_formatter("")
        legend_outside(fig, axes[0][0])
        where = test if train == test else f"{train}->{test}"
        fig.suptitle(f"{kind}: {where}")
        written.append(save(fig, out / f"{name}-{slug(where)}.png"))
    return written


def _lines(axes: Any, metrics: list[tuple[str, str]], points: list[tuple[Any, dict[str, Any]]],
           label: str, style: dict[str, Any], errors: dict[str, str] | None) -> None:
    """One method's line in each metric's axes, with error bars where ``errors`` names them."""
    x = [p[0] for p in points]
    for ax, (key, _) in zip(axes, metrics):
        y = [p[1][key] for p in points]
        bar = (errors or {}).get(key)
        if bar and all(bar in p[1] for p in points):
            ax.errorbar(x, y, [p[1][bar] for p in points], label=label, capsize=2, **style)
        else:
            ax.plot(x, y, label=label, **style)


def varying_parameter(names: list[str]) -> tuple[str, dict[str, float]] | None:
    """The one numeric spec parameter in which data sets of one base name differ (``dim`` of
    ``genz-oscillatory[dim=1]``, ``genz-oscillatory[dim=3]``) and each name's value of it; ``None``
    unless exactly one parameter varies, numerically, over two or more values."""
    params = {n: parse_spec(n)[1] for n in names}
    keys = {k for p in params.values() for k in p}
    varying = [k for k in keys if len({repr(p.get(k)) for p in params.values()}) > 1]
    if len(varying) != 1:
        return None
    key = varying[0]
    values = {n: p[key] for n, p in params.items()
              if isinstance(p.get(key), (int, float)) and not isinstance(p.get(key), bool)}
    return (key, {n: float(v) for n, v in values.items()}) if len(set(values.values())) > 1 \
        else None


def parameter_lines(report: Report, kind: str, metrics: list[tuple[str, str]], out: Path,
                    name: str, log_y: bool = False,
                    errors: dict[str, str] | None = None) -> list[Path]:
    """Per base data set and report column: each metric against the one numeric parameter in
    which its data sets differ (integration: the Genz dimension d, South's sigma2), one line per
    method; data sets scored on themselves only."""
    plt = pyplot()
    styles = method_styles(report.methods)
    task = report.tasks.get(kind)
    written = []
    settings = [s for s in report.settings if s[0] == kind and s[1] == s[2]]
    groups: dict[tuple[str, tuple], list[str]] = {}
    for s in settings:
        groups.setdefault((parse_spec(s[1])[0], s[3]), []).append(s[1])
    for (base, column), names in sorted(groups.items(), key=lambda g: (g[0][0], str(g[0][1]))):
        found = varying_parameter(sorted(set(names)))
        if found is None:
            continue
        key, values = found
        fig, axes = plt.subplots(1, len(metrics), figsize=(3.6 * len(metrics), 3.3), squeeze=False,
                                 layout="constrained")
        drawn = False
        for m in report.methods:
            points = sorted((values[n], report.entries[(m, (kind, n, n, column))].summary())
                            for n in values if (m, (kind, n, n, column)) in report.entries
                            and report.entries[(m, (kind, n, n, column))].results)
            if len(points) >= 2:
                _lines(axes[0], metrics, points, m, styles[m], errors)
                drawn = True
        if not drawn:
            pyplot().close(fig)
            continue
        for ax, (_, title) in zip(axes[0], metrics):
            ax.set(xlabel=key, title=title, yscale="log" if log_y else "linear")
        legend_outside(fig, axes[0][0])
        where = task.setting_label(column) if task else str(column)
        fig.suptitle(f"{kind}: {base}, {where}")
        written.append(save(fig, out / f"{name}-{slug(base)}-vs-{slug(key)}-{slug(where)}.png"))
    return written
