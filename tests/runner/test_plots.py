"""The multi-method figures give each method its own colour (sixteen methods, not ten colours
reused) and keep their legend off the curves."""

from __future__ import annotations

import inspect
import re

import matplotlib
import numpy as np

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from zoo.runner.plots import legend_outside, method_styles, slug, unique_slugs  # noqa: E402


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


def test_figure_names_keep_labels_apart():
    """Two variants labelled α and β once wrote one reliability file (both slugged to nothing)."""
    assert (slug("protonet α"), slug("protonet β")) == ("protonet-alpha", "protonet-beta")
    assert slug("café glyphs->digits 5w1s") == "cafe-glyphs-digits-5w1s"
    labels = ["α", "alpha", "a b", "a-b", "glyphs 5w1s", "", "中", "中"]
    names = unique_slugs(labels)
    assert len(set(names.values())) == len(set(labels)) == 7
    assert names["glyphs 5w1s"] == "glyphs-5w1s"  # a name no other shares stays readable
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", n) for n in names.values())


def _report(methods: dict[str, dict[str, str]], settings: int = 1, queries: int = 40):
    """A report of synthetic classification entries: per method the names its results record,
    ``settings`` settings, a training curve of three points and, for a method that names one, an
    inner objective of four."""
    from zoo.runner.collect import Entry, Report
    from zoo.tasks.classification import Classification

    task = Classification()
    rng = np.random.default_rng(0)
    all_settings = [("classification", "glyphs", "glyphs", (5, k + 1)) for k in range(settings)]
    entries = {}
    for i, (method, names) in enumerate(methods.items()):
        for s in all_settings:
            records = {}
            for e in range(4):
                conf = rng.uniform(0.2, 1.0, queries)
                correct = (rng.uniform(size=queries) < conf).astype(float)
                records[(0, None, e)] = {
                    "index": e, "accuracy": float(correct.mean()), "nll": 1.0, "brier": 0.5,
                    "seconds": 0.01, "confidence": conf.tolist(),
                    "confidence_calibrated": (0.5 + conf / 2).tolist(), "correct": correct.tolist()}
                if "inner_objective_name" in names:
                    records[(0, None, e)]["inner_objective"] = [2.0 - i, 1.5 - i, 1.2 - i, 1.0 - i]
            result = {"seed": 0, "skipped_steps": 0, "temperature": 1.0, "train_seconds": 1.0,
                      **names}
            curve = [{"episode": 2, "loss": 2.0 + i}, {"episode": 4, "loss": 1.0 + i},
                     {"episode": 6, "loss": 0.5 + i, "val_accuracy": 0.5}]
            entries[(method, s)] = Entry(method, s, task, [result], records, [], [curve])
    return Report(entries, all_settings, list(methods), set(), {}, {"classification": task})


def test_reliability_panels_sit_in_a_grid_with_counts_and_both_eces():
    from zoo.runner.plots import reliability_figure

    report = _report({"m": {}}, settings=6)
    fig = reliability_figure(report, "m")
    fig.canvas.draw()
    diagrams = [ax for ax in fig.axes if ax.get_ylabel() == "accuracy"]
    counts = [ax for ax in fig.axes if ax.get_ylabel() == "queries"]
    assert len(diagrams) == len(counts) == 6
    assert len({round(ax.get_position().y0, 3) for ax in diagrams}) == 2  # two rows of three
    width, height = fig.get_size_inches()
    assert width / height < 2
    entry = report.entries[("m", report.settings[0])]
    summary = entry.summary()
    title = diagrams[0].get_title()
    assert f"ECE {100 * summary['ece']:.1f}% raw" in title
    assert f"{100 * summary['ece_calibrated']:.1f}% scaled" in title
    # raw and temperature-scaled bars side by side: no bar covers another
    spans = sorted((p.get_x(), p.get_x() + p.get_width()) for p in diagrams[0].patches)
    assert all(a[1] <= b[0] + 1e-12 for a, b in zip(spans, spans[1:]))
    assert sum(p.get_height() for p in counts[0].patches) == 2 * 4 * 40  # raw + scaled queries
    plt.close(fig)


def test_losses_and_inner_objectives_of_different_names_get_their_own_axes():
    from zoo.runner.plots import convergence_figure, method_styles, training_curves

    report = _report({
        "maml": {"meta_loss_name": "query cross-entropy", "inner_objective_name":
                 "support cross-entropy", "inner_objective_better": "lower"},
        "md-bfsc": {"meta_loss_name": "negative ELBO per point", "inner_objective_name": "ELBO",
                    "inner_objective_better": "higher"},
        "protonet": {"meta_loss_name": "query cross-entropy"}})
    fig = convergence_figure(report, report.settings[0], method_styles(report.methods))
    titles = sorted(ax.get_title() for ax in fig.axes)
    assert titles == ["ELBO\n(higher is better)", "support cross-entropy\n(lower is better)"]
    assert all(len(ax.get_lines()) == 1 for ax in fig.axes)
    plt.close(fig)
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as out:
        (path, _) = training_curves(report, Path(out))
        assert path.name == "training-glyphs-5w1s.png"
    figs = []
    original = plt.close
    try:  # the training figure, kept open to look at its axes
        plt.close = figs.append
        training_curves(report, Path(tempfile.mkdtemp()))
    finally:
        plt.close = original
    axes = figs[0].axes
    by_title = {ax.get_title(): ax for ax in axes}
    assert len(by_title["query cross-entropy"].get_lines()) == 2  # maml and protonet
    assert len(by_title["negative ELBO per point"].get_lines()) == 1
    assert any("validation accuracy" in t for t in by_title)
    for fig in figs:
        original(fig)


def test_every_meta_trained_method_names_its_meta_loss():
    """The training figures put losses of different names on separate axes: every method that
    is meta-trained names what its meta-loss is, so no two unlike losses share the "unnamed"
    axis. Sequential methods and the integration estimators that refuse training have none."""
    from zoo.plugins import registry

    reg = registry()
    unnamed = []
    for name in reg.names("methods"):
        cls = reg.get("methods", name)
        if cls.task == "sequential" or \
                "not meta-trained" in inspect.getsource(cls.meta_loss):
            continue
        # a property (a name that depends on the hyper-parameters) is a name
        named = next(c.__dict__["meta_loss_name"] for c in cls.__mro__ if "meta_loss_name" in c.__dict__)
        if not named:
            unnamed.append(name)
    assert not unnamed, f"meta-trained methods without a meta_loss_name: {sorted(unnamed)}"


def test_a_curve_grid_draws_only_the_panels_its_points_have(tmp_path):
    """A classification stream's points have no RMSE, a regression stream's no error: the
    sequential grid leaves those panels out instead of drawing them empty."""
    from types import SimpleNamespace

    from zoo.runner.plots import curve_grids
    from zoo.tasks.figures import CurveGrid

    grid = CurveGrid(rows=(("step", "examples seen"), ("seconds", "wall time (s)")),
                     columns=(("nlpd", "NLPD"), ("error", "error"), ("rmse", "RMSE")),
                     name="sequential")
    setting = ("sequential", "T=10")
    curve = [{"step": t, "nlpd": 1.0 / (t + 1), "rmse": 0.5} for t in (0, 5, 10)]
    entry = SimpleNamespace(results=[{}], summary=lambda: {"curve": curve})
    report = SimpleNamespace(methods=["bong", "bog"], settings=[setting],
                             entries={("bong", setting): entry, ("bog", setting): entry},
                             label=lambda s: s[1])
    figs = []
    original = plt.close
    try:
        plt.close = figs.append
        (path,) = curve_grids(report, "sequential", grid, tmp_path)
    finally:
        plt.close = original
    assert path.exists()
    labels = sorted((ax.get_xlabel(), ax.get_ylabel()) for ax in figs[0].axes)
    assert labels == [("examples seen", "NLPD"), ("examples seen", "RMSE")]
    assert all(len(ax.get_lines()) == 2 for ax in figs[0].axes)
    original(figs[0])
