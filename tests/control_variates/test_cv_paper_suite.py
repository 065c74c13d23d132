"""The ``cv-paper`` suite (Sun 2023, Ch. 4-5) expands into every protocol of the thesis it names,
with the thesis's counts; the integration report's figures of error against a family's parameter
(the Genz dimension, South's sigma2); ``train_samples = 0`` meta-trains at each budget."""

from __future__ import annotations

from collections import defaultdict

import pytest

from zoo.errors import ZooError
from zoo.plugins import registry
from zoo.runner.bench import prepare_suite
from zoo.runner.cells import expand_cells
from zoo.runner.plots import varying_parameter
from zoo.tasks.integration import Integration

GENZ = "genz-oscillatory[dim={}]"


@pytest.fixture(scope="module")
def cells():
    suite, methods = prepare_suite("cv-paper", registry=registry())
    by_row = defaultdict(dict)
    for c in expand_cells(suite, methods, registry=registry()):
        row = f"{c.method} {c.variant}".strip()
        by_row[row][(c.train_dataset, c.shape["samples"])] = c
    return by_row


def test_table_4_2_every_m_with_its_four_estimators(cells):
    for row in ("mc", "control-functional", "vv-cv", "vv-cv learned-B", "vv-cv learned-B adam"):
        borehole = {n: c for (d, n), c in cells[row].items() if d == "borehole"}
        assert sorted(borehole) == [10, 20, 50, 100, 150]
        assert {c.test_episodes for c in borehole.values()} == {100}
        assert {c.train_episodes for c in borehole.values()} == {0}
    assert cells["control-functional"][("borehole", 50)].hparams["estimate"] == "intercept"
    assert cells["vv-cv"][("borehole", 50)].hparams["coupling"] == "fixed"
    learned = cells["vv-cv learned-B"][("borehole", 50)].hparams
    assert (learned["coupling"], learned["optimiser"]) == ("learned", "profiled")
    adam = cells["vv-cv learned-B adam"][("borehole", 50)].hparams
    assert (adam["coupling"], adam["optimiser"], adam["steps"]) == ("learned", "adam", 2000)


def test_south_pair_and_step_function_against_the_cvs(cells):
    sigma2 = ["1.0", "1.1", "1.15", "1.2", "1.25"]
    for row in ("mc", "poly-cv", "control-functional", "vv-cv"):
        assert {(f"south[sigma2={s}]", 50) for s in sigma2} <= set(cells[row])
        assert cells[row][("step", 40)].test_episodes == 100
    assert set(cells["vv-cv learned-B"]) >= {("step", 40)}


def test_meta_cv_study_n_t_d_and_l_at_the_thesis_scale(cells):
    for row in ("mc", "control-functional", "neural-cv", "meta-cv"):
        n_t = {n for (d, n) in cells[row] if d == GENZ.format(2)}
        assert n_t == {10, 20, 40, 100}
        dims = {d for (d, n) in cells[row] if d.startswith("genz") and n == 10}
        assert dims == {GENZ.format(k) for k in range(1, 7)}
        for (d, n), c in cells[row].items():
            if d.startswith("genz"):
                assert (c.train_episodes, c.test_episodes) == (20000, 1000)
                assert c.shape["train_samples"] == n  # meta-trained at the test budget
                assert c.hparams.get("estimate", "split") == "split"
    for L in (1, 3, 5, 7, 10):
        (c,) = cells[f"meta-cv L={L}"].values()
        assert (c.train_dataset, c.shape["samples"]) == (GENZ.format(2), 10)
        assert c.hparams["steps"] == L
        assert c.hparams["inner_lr"] * 50 * L == pytest.approx(0.01, rel=1e-5)


def test_reduced_run_overrides_reach_every_part():
    suite, methods = prepare_suite("cv-paper", ["test_episodes=5", "train_episodes=100",
                                                "vv-cv.steps=50"], registry=registry())
    cells = expand_cells(suite, methods, registry=registry())
    assert {c.test_episodes for c in cells} == {5}
    assert {c.train_episodes for c in cells} == {100}
    assert {c.hparams["steps"] for c in cells if c.method == "vv-cv"
            and c.hparams["coupling"] == "learned" and not c.variant.endswith("adam")} == {50}
    assert {c.hparams["steps"] for c in cells if c.variant.startswith("L=")} == {1, 3, 5, 7, 10}


def test_train_samples_zero_trains_at_each_budget():
    task = Integration()
    shapes = task.shapes({"sample_sizes": [4, 8], "train_samples": 0})
    assert [s["train_samples"] for s in shapes] == [4, 8]
    assert task.shapes({"sample_sizes": [4], "train_samples": 20})[0]["train_samples"] == 20
    with pytest.raises(ZooError, match="train_samples"):
        task.shapes({"sample_sizes": [4], "train_samples": 1})


def test_sum_of_squared_errors_is_summarised():
    records = [{"error": e, "mc_error": 2 * e, "seconds": 0.0} for e in (1.0, -2.0)]
    summary = Integration().summarise(records)
    assert summary["sse"] == 5.0 and summary["vrf"] == 4.0


def test_the_one_varying_numeric_parameter_is_found():
    assert varying_parameter([GENZ.format(1), GENZ.format(3)]) == (
        "dim", {GENZ.format(1): 1.0, GENZ.format(3): 3.0})
    assert varying_parameter(["south[sigma2=1.0]", "south[sigma2=1.2]", "south"])[1] == {
        "south[sigma2=1.0]": 1.0, "south[sigma2=1.2]": 1.2}
    assert varying_parameter([GENZ.format(2)]) is None
    assert varying_parameter(["f[a=1,b=1]", "f[a=2,b=2]"]) is None  # two parameters vary
