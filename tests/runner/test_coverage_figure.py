"""The accuracy-coverage figure: one panel per setting, the curve whose mean the table's AURC is."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from .test_plots import _report  # noqa: E402


def test_coverage_panels_show_the_curve_the_table_integrates():
    from zoo.runner.plots import coverage_figure
    from zoo.tasks.classification import accuracy_coverage

    report = _report({"m": {}}, settings=2)
    fig = coverage_figure(report, "m")
    entry = report.entries[("m", report.settings[0])]
    summary = entry.summary()
    ax = fig.axes[0]
    assert f"AURC {100 * summary['aurc']:.1f}%" in ax.get_title()
    coverage, accuracy, oracle = accuracy_coverage(list(entry.episodes.values()))
    # AURC is the mean risk over coverages: one minus the curve's mean
    assert abs(1 - accuracy.mean() - summary["aurc"]) < 1e-12
    assert (oracle >= accuracy - 1e-12).all() and oracle[-1] == pytest.approx(accuracy[-1])
    line = ax.get_lines()[0]
    assert np.array_equal(line.get_xdata(), coverage)
    plt.close(fig)
