"""The multi-method figures give each method its own colour (sixteen methods, not ten colours
reused) and keep their legend off the curves."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from zoo.runner.plots import legend_outside, method_styles  # noqa: E402


def test_every_method_gets_its_own_style_for_any_number_of_methods():
    for n in (3, 16, 40):
        styles = method_styles([f"m{i}" for i in range(n)])
        pairs = {(s["color"], s["linestyle"]) for s in styles.values()}
        assert len(pairs) == n
    assert method_styles(["a", "b"])["a"] == method_styles(["a", "b", "c"])["a"]


def test_the_legend_sits_outside_the_axes():
    fig, ax = plt.subplots(figsize=(6, 3.8), layout="constrained")
    for name, style in method_styles([f"method-{i}" for i in range(16)]).items():
        ax.plot([0, 1], [0, 1], label=name, **style)
    legend_outside(fig, ax)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (legend,) = fig.legends
    assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
    plt.close(fig)
