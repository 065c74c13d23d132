"""Figures of a report: reliability diagrams per method, training curves and inner-loop
convergence curves per setting (PNG, matplotlib's Agg backend: no display needed).

A method has one style (colour, line style, marker) in every figure, distinct from every other
method's for any number of methods, and legends sit outside the axes so they hide no curve."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from zoo.io import atomic_write_bytes

if TYPE_CHECKING:
    from zoo.runner.report import Report


COLOURS = [f"tab:{c}" for c in ("blue", "orange", "green", "red", "purple", "brown", "pink",
                                 "gray", "olive", "cyan")]
LINES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P", "X"]


def method_styles(methods: list[str]) -> dict[str, dict[str, str]]:
    """A distinct (colour, line style, marker) for each method, in order: the colour cycles
    fastest, the line style changes after every ten methods (40 distinct pairs), and the
    marker's period of seven, prime to ten, tells apart what is left."""
    return {m: {"color": COLOURS[i % len(COLOURS)],
                "linestyle": LINES[i // len(COLOURS) % len(LINES)],
                "marker": MARKERS[i % len(MARKERS)]} for i, m in enumerate(methods)}


def _legend_outside(fig, ax) -> None:
    """One legend for the figure, right of the axes, in as many columns as fit the figure."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=7, markerscale=0.8,
                   ncols=1 + len(labels) // 18)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def _save(fig, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())


def draw_all(report: Report, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from zoo.runner.report import inner_curves, reliability, setting_label

    styles = method_styles(report.methods)
    written = []
    for method in report.methods:
        done = [s for s in report.settings
                if (method, s) in report.entries and report.entries[(method, s)].episodes]
        if not done:
            continue
        fig, axes = plt.subplots(1, len(done), figsize=(3.2 * len(done), 3.5), squeeze=False,
                                 layout="constrained")
        for ax, s in zip(axes[0], done):
            entry = report.entries[(method, s)]
            for calibrated, color, name in ((False, "tab:blue", "raw"),
                                            (True, "tab:orange", "temperature-scaled")):
                bins = reliability(entry, calibrated)
                centers = (bins.edges[:-1] + bins.edges[1:]) / 2
                width = np.diff(bins.edges)
                full = bins.count > 0
                ax.bar(centers[full], bins.accuracy[full], width=width[full] * 0.9,
                       alpha=0.5, color=color, label=name, edgecolor=color)
            ax.plot([0, 1], [0, 1], "k--", lw=1)
            ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", title=setting_label(s))
        axes[0][0].set_ylabel("accuracy")
        axes[0][0].legend(fontsize=7, loc="upper left")
        fig.suptitle(f"{method}: reliability")
        path = out / f"reliability-{_slug(method)}.png"
        _save(fig, path)
        plt.close(fig)
        written.append(path)

    for s in report.settings:
        entries = [report.entries[(m, s)] for m in report.methods
                   if (m, s) in report.entries and report.entries[(m, s)].curves]
        if entries:
            fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(10.5, 3.8), layout="constrained")
            for e in entries:
                curve = e.curves[0]
                x = [p["episode"] for p in curve]
                style = {**styles[e.method], "markersize": 4, "lw": 1.2}
                ax_loss.plot(x, [p["loss"] for p in curve], label=e.method, **style)
                if any("val_accuracy" in p for p in curve):
                    ax_val.plot(x, [p.get("val_accuracy", np.nan) for p in curve], **style)
            ax_loss.set(xlabel="training episode", ylabel="meta-loss", yscale="log")
            ax_val.set(xlabel="training episode", ylabel="validation accuracy")
            _legend_outside(fig, ax_loss)
            fig.suptitle(f"training: {setting_label(s)} (seed {entries[0].results[0]['seed']})"
                         if entries[0].results else f"training: {setting_label(s)}")
            path = out / f"training-{_slug(setting_label(s))}.png"
            _save(fig, path)
            plt.close(fig)
            written.append(path)
        inner = [(m, inner_curves(report.entries[(m, s)])) for m in report.methods
                 if (m, s) in report.entries]
        inner = [(m, c) for m, c in inner if c is not None]
        if inner:
            fig, ax = plt.subplots(figsize=(6, 3.8), layout="constrained")
            for m, c in inner:
                ax.plot(np.arange(1, len(c) + 1), c, label=m, markersize=4, lw=1.2,
                        markevery=max(1, len(c) // 12), **styles[m])
            ax.set(xlabel="inner step", ylabel="inner objective (mean over test episodes)",
                   title=f"convergence: {setting_label(s)}")
            _legend_outside(fig, ax)
            path = out / f"convergence-{_slug(setting_label(s))}.png"
            _save(fig, path)
            plt.close(fig)
            written.append(path)
    return written
