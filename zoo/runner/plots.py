"""Figures of a report (PNG, matplotlib's Agg backend: no display needed): training curves and
inner-loop convergence curves per setting for every kind, and the figures each task kind asks
for as data (:mod:`zoo.tasks.figures`; classification: reliability diagrams; regression: metrics
against context size; ...), drawn here.

A method has one style (colour, line style, marker) in every figure, distinct from every other
method's for any number of methods, and legends sit outside the axes so they hide no curve."""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from zoo.io import atomic_write_bytes
from zoo.metrics import ReliabilityBins, reliability_bins
from zoo.runner.collect import Entry, Report, inner_curves
from zoo.spec import parse_spec
from zoo.tasks.base import pooled
from zoo.tasks.figures import Coverage, CurveGrid, Figure, MetricLines, ParameterLines, Reliability

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


SLUG_CHARS = 64
"""The longest file-name part :func:`slug` gives: a figure's name joins up to three, within the
255 bytes a file name may have."""


def slug(text: str) -> str:
    """A file-name part for ``text``: lower-case ASCII letters and digits, accents dropped, other
    letters by their Unicode names (``α`` -> ``alpha``), every other run one ``-``; one longer
    than :data:`SLUG_CHARS` is cut, with a digest of the whole text, to that length."""
    parts = []
    for ch in unicodedata.normalize("NFKD", text):
        if ch.isascii():
            parts.append(ch)
        elif ch.isalnum():
            parts.append(f"-{unicodedata.name(ch, 'x').split()[-1]}-")
    out = re.sub(r"[^A-Za-z0-9]+", "-", "".join(parts)).strip("-").lower()
    if len(out) > SLUG_CHARS:
        out = f"{out[:SLUG_CHARS - 9].rstrip('-')}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"
    return out


def unique_slugs(texts: list[str]) -> dict[str, str]:
    """:func:`slug` of each distinct text, made unique: texts whose slugs coincide (``α`` and
    ``alpha``, ``a b`` and ``a-b``) or are empty get a short digest of the text appended."""
    plain = {t: slug(t) for t in dict.fromkeys(texts)}
    count = Counter(plain.values())
    return {t: s if s and count[s] == 1 else
            f"{s}-{hashlib.sha1(t.encode()).hexdigest()[:6]}".lstrip("-")
            for t, s in plain.items()}


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
    """Every figure of the report, in ``out``: each kind's, then the training curves; no two
    figures may share a file."""
    written = []
    for kind in report.kinds():
        for figure in report.tasks[kind].view.figures:
            written += draw(report, kind, figure, out)
    written += training_curves(report, out)
    twice = [p.name for p, n in Counter(written).items() if n > 1]
    if twice:
        raise RuntimeError(f"figures drawn over one another in {out}: {', '.join(twice)}")
    return written


def draw(report: Report, kind: str, figure: Figure, out: Path) -> list[Path]:
    """The files of one figure that task kind ``kind`` asks for."""
    if isinstance(figure, Reliability):
        return reliability_diagrams(report, out, kind)
    if isinstance(figure, Coverage):
        return coverage_figures(report, out, kind)
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


RAW, SCALED = ("tab:blue", "raw"), ("tab:orange", "temperature-scaled")


def reliability_figure(report: Report, method: str, kind: str = "classification") -> Any:
    """One method's reliability diagrams, a panel per setting of ``kind`` in a grid of at
    most three columns: per confidence bin the accuracy of the method's own probabilities and
    of the temperature-scaled ones side by side (neither hides the other), under each panel the
    bins' query counts, in each title both ECEs (the table's). ``None``: no setting scored."""
    plt = pyplot()
    done = [s for s in report.settings if s[0] == kind
            and (method, s) in report.entries and report.entries[(method, s)].episodes]
    if not done:
        return None
    cols = min(3, len(done))
    rows = -(-len(done) // cols)
    fig = plt.figure(figsize=(3.5 * cols, 3.9 * rows), layout="constrained")
    grid = fig.add_gridspec(2 * rows, cols, height_ratios=[3, 1] * rows)
    for i, s in enumerate(done):
        r, c = divmod(i, cols)
        ax = fig.add_subplot(grid[2 * r, c])
        counts = fig.add_subplot(grid[2 * r + 1, c], sharex=ax)
        entry = report.entries[(method, s)]
        summary = entry.summary()
        for k, (bins, (color, name)) in enumerate(zip(reliability(entry), (RAW, SCALED))):
            width = np.diff(bins.edges)
            left = bins.edges[:-1] + width * (0.05 + 0.45 * k)  # raw left half, scaled right half
            full = bins.count > 0
            ax.bar(left[full], bins.accuracy[full], width=0.45 * width[full], align="edge",
                   color=color, alpha=0.85, label=name)
            counts.bar(left, bins.count, width=0.45 * width, align="edge", color=color, alpha=0.85)
        ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
        ax.set(xlim=(0, 1), ylim=(0, 1), title=f"{report.label(s)}\nECE {100 * summary['ece']:.1f}% "
               f"raw, {100 * summary['ece_calibrated']:.1f}% scaled", ylabel="accuracy")
        ax.title.set_fontsize(9)
        ax.tick_params(labelbottom=False)
        counts.set(xlabel="confidence", ylabel="queries")
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=8)
    fig.suptitle(f"{method}: reliability (15 confidence bins, test queries pooled)")
    return fig


def reliability_diagrams(report: Report, out: Path, kind: str = "classification") -> list[Path]:
    """One figure per method of ``kind`` (:func:`reliability_figure`)."""
    return per_method(report, out, kind, reliability_figure, "reliability")


def coverage_figures(report: Report, out: Path, kind: str = "classification") -> list[Path]:
    """One accuracy-coverage figure per method of ``kind`` (:func:`coverage_figure`)."""
    return per_method(report, out, kind, coverage_figure, "coverage")


def per_method(report: Report, out: Path, kind: str, draw, prefix: str) -> list[Path]:
    """``draw(report, method, kind)`` for every method, saved as ``PREFIX-<method>.png`` (a
    method with nothing to draw gives no file)."""
    written = []
    names = unique_slugs(report.methods)
    for method in report.methods:
        fig = draw(report, method, kind)
        if fig is not None:
            written.append(save(fig, out / f"{prefix}-{names[method]}.png"))
    return written


def coverage_figure(report: Report, method: str, kind: str = "classification") -> Any:
    """One method's selective prediction, a panel per classification setting: the accuracy of
    the most confident fraction of each episode's queries against that fraction (mean over
    episodes), beside the oracle's that answers every right query first; the table's AURC and
    E-AURC in the title. ``None``: no setting scored."""
    from zoo.tasks.classification import accuracy_coverage

    done = [s for s in report.settings if s[0] == kind
            and (method, s) in report.entries and report.entries[(method, s)].episodes]
    if not done:
        return None
    plt = pyplot()
    fig, axes = panels(plt, len(done), 3.6, 3.0)
    for ax, s in zip(axes, done, strict=True):
        entry = report.entries[(method, s)]
        curve = accuracy_coverage(list(entry.episodes.values()))
        summary = entry.summary()
        if curve is None:
            continue
        coverage, accuracy, oracle = curve
        ax.plot(coverage, accuracy, color="tab:blue", lw=1.4, label=method)
        ax.plot(coverage, oracle, "k--", lw=1, label="oracle (right queries first)")
        ax.set(xlim=(0, 1), ylim=(0, 1.02), xlabel="coverage (fraction answered)",
               ylabel="accuracy of the answered",
               title=f"{report.label(s)}\nAURC {100 * summary['aurc']:.1f}%, "
                     f"E-AURC {100 * summary['eaurc']:.1f}%")
        ax.title.set_fontsize(9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=8)
    fig.suptitle(f"{method}: accuracy-coverage (most confident first, mean over episodes)")
    return fig


UNNAMED = "meta-loss (not named by the method)"


def named(entry: Entry, key: str, default: str) -> str:
    """What the entry's method calls its meta-loss or inner objective (recorded in its results;
    :attr:`zoo.Method.meta_loss_name`)."""
    return next((r[key] for r in entry.results if r.get(key)), default)


def panels(plt: Any, count: int, width: float = 4.4, height: float = 3.3) -> tuple[Any, list[Any]]:
    """A figure of ``count`` axes in a grid of at most three columns; axes beyond ``count`` off."""
    cols = min(3, count)
    rows = -(-count // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False,
                             layout="constrained")
    flat = list(axes.flat)
    for ax in flat[count:]:
        ax.set_axis_off()
    return fig, flat[:count]


def loss_scale(values: list[float]) -> str:
    """A log axis for positive values spread over more than a factor of 30, else linear."""
    finite = [v for v in values if math.isfinite(v)]
    return "log" if finite and min(finite) > 0 and max(finite) > 30 * min(finite) else "linear"


def one_point_note(ax: Any, curves: list[list[Any]], what: str) -> None:
    if curves and max(len(c) for c in curves) < 2:
        ax.set_xlabel(f"{ax.get_xlabel()}\n(one {what} per training: a point, not a curve)")


def training_curves(report: Report, out: Path) -> list[Path]:
    """Per setting: each method's meta-loss during training, methods with differently named
    losses (query cross-entropy, negative ELBO, ...) on separate axes, and the validation score
    that selects the checkpoint; and the inner-loop convergence (:func:`convergence_figure`)."""
    plt = pyplot()
    styles = method_styles(report.methods)
    written, drawn = [], set()
    names = unique_slugs([report.label(s) for s in report.settings])
    for s in report.settings:
        task = report.tasks[s[0]]
        label = report.label(s)
        entries = [report.entries[(m, s)] for m in report.methods
                   if (m, s) in report.entries and any(report.entries[(m, s)].curves)]
        # settings that share their trainings (regression context sizes) get one figure
        key = json.dumps([(e.method, e.curves) for e in entries], sort_keys=True)
        if entries and key not in drawn:
            drawn.add(key)
            groups: dict[str, list[Entry]] = {}
            for e in entries:
                groups.setdefault(named(e, "meta_loss_name", UNNAMED), []).append(e)
            fig, axes = panels(plt, len(groups) + 1)
            val_key = task.selection_key
            for ax, (loss, group) in zip(axes, groups.items()):
                curves = [next(c for c in e.curves if c) for e in group]
                for e, curve in zip(group, curves):
                    ax.plot([p["episode"] for p in curve], [p["loss"] for p in curve],
                            label=e.method, **{**styles[e.method],
                                               "markevery": max(1, len(curve) // 12)})
                ax.set(xlabel="training episode", ylabel="meta-loss (lower is better)",
                       title=loss, yscale=loss_scale([p["loss"] for c in curves for p in c]))
                ax.title.set_fontsize(9)
                one_point_note(ax, curves, "loss point")
            ax_val = axes[-1]
            points = []
            for e in entries:
                curve = [p for p in next(c for c in e.curves if c) if val_key in p]
                points.append(curve)
                if curve:
                    ax_val.plot([p["episode"] for p in curve], [p[val_key] for p in curve],
                                label=e.method, **styles[e.method])
            ax_val.set(xlabel="training episode", title=val_key.replace("val_", "validation ")
                       + "\n(higher is better; selects the checkpoint)")
            ax_val.title.set_fontsize(9)
            one_point_note(ax_val, [c for c in points if c], "validation")
            legend_entries(fig, axes)
            seed = entries[0].results[0]["seed"] if entries[0].results else None
            fig.suptitle(f"training: {label}" + (f" (seed {seed})" if seed is not None else ""))
            written.append(save(fig, out / f"training-{names[label]}.png"))
        fig = convergence_figure(report, s, styles)
        if fig is not None:
            written.append(save(fig, out / f"convergence-{names[label]}.png"))
    return written


def legend_entries(fig: Any, axes: list[Any]) -> None:
    """One legend right of the figure with every method drawn on any of ``axes``."""
    seen: dict[str, Any] = {}
    for ax in axes:
        for handle, name in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(name, handle)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside right upper", fontsize=7,
                   markerscale=0.8, ncols=1 + len(seen) // 18)


def convergence_figure(report: Report, s: Any, styles: dict[str, dict[str, Any]]) -> Any:
    """The inner-loop objective per step, mean over test episodes: one axes per objective (a
    support cross-entropy, lower is better, apart from an ELBO, higher is better), titled with
    its name and direction. The last point is the objective after the last step. ``None``: no
    method of the setting reports one."""
    plt = pyplot()
    inner = [(m, inner_curves(report.entries[(m, s)])) for m in report.methods
             if (m, s) in report.entries]
    inner = [(m, c) for m, c in inner if c is not None]
    if not inner:
        return None
    groups: dict[tuple[str, Any], list[tuple[str, np.ndarray]]] = {}
    for m, c in inner:
        entry = report.entries[(m, s)]
        name = named(entry, "inner_objective_name", "inner objective (not named by the method)")
        better = next((r.get("inner_objective_better") for r in entry.results
                       if r.get("inner_objective_name")), "unknown")
        groups.setdefault((name, better), []).append((m, c))
    fig, axes = panels(plt, len(groups))
    for ax, ((name, better), curves) in zip(axes, groups.items()):
        for m, c in curves:
            ax.plot(np.arange(len(c)), c, label=m, **{**styles[m], "markevery": max(1, len(c) // 12)})
        direction = {"lower": "lower is better", "higher": "higher is better", None: "a trace, no "
                     "direction"}.get(better, "direction not declared")
        ax.set(xlabel="inner steps taken", ylabel="mean over test episodes",
               title=f"{name}\n({direction})")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.title.set_fontsize(9)
    legend_entries(fig, axes)
    fig.suptitle(f"inner loop at test: {report.label(s)}")
    return fig


def curve_grids(report: Report, kind: str, figure: CurveGrid, out: Path) -> list[Path]:
    """Per setting of ``kind``: the grid of ``figure`` (:class:`zoo.tasks.figures.CurveGrid`)."""
    plt = pyplot()
    styles = method_styles(report.methods)
    written = []
    for s in [s for s in report.settings if s[0] == kind]:
        curves = {}
        for m in report.methods:
            entry = report.entries.get((m, s))
            if entry is not None and entry.results:
                curves[m] = entry.summary()[figure.curve]
        # only the panels some method has points for (a class stream has no RMSE, a regression
        # stream no error)
        present = {k for curve in curves.values() for k in curve[0]}
        rows = [r for r in figure.rows if r[0] in present]
        columns = [c for c in figure.columns if c[0] in present]
        if not rows or not columns:
            continue
        fig, axes = plt.subplots(len(rows), len(columns), figsize=(4 * len(columns),
                                                                   3.15 * len(rows)),
                                 squeeze=False, layout="constrained")
        for m, curve in curves.items():
            for row, (x_key, _) in zip(axes, rows):
                for ax, (key, _) in zip(row, columns):
                    if x_key in curve[0] and key in curve[0]:
                        ax.plot([p[x_key] for p in curve], [p[key] for p in curve], label=m,
                                **styles[m])
        for row, (x_key, x_label) in zip(axes, rows):
            scale: dict[str, Any] = {"value": figure.x_scale}
            if figure.x_scale == "symlog":  # linear up to the smallest positive x, log above
                xs = [p[x_key] for curve in curves.values() for p in curve
                      if x_key in p and p[x_key] > 0]
                scale["linthresh"] = min(xs, default=1.0)
            for ax, (_, y_label) in zip(row, columns):
                ax.set(xlabel=x_label, ylabel=y_label)
                ax.set_xscale(**scale)
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
