"""Task kinds end to end through a real plugin: a distribution installed into a temporary folder
(a ``*.dist-info`` with an entry point) registers a toy method of each kind beyond classification,
its own task kind, and suites; each suite runs through ``run_suite`` (and once through the CLI),
writes results, a report and its figures, and resumes after an interruption with the same numbers
as a run that never stopped. Bad input for each kind is an error that says what to do."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from zoo import plugins
from zoo.cli import main
from zoo.runner import evaluate as evaluate_module
from zoo.runner import train as train_module
from zoo.runner.bench import prepare_suite, run_suite
from zoo.runner.cells import expand_cells
from zoo.runner.report import write_report
from zoo.runner.suite import SuiteError, suite_from_dict

from .conftest import tiny_suite

PLUGIN = '''
import zoo
from zoo.baselines.integration import MonteCarlo
from zoo.baselines.regression import ConstantGaussian
from zoo.baselines.sequential import RunningPrototypes
from zoo.tasks.integration import Integration

INTERRUPT = {"left": None}


def tick():
    """Raise KeyboardInterrupt (as Ctrl-C would) once ``left`` calls have passed."""
    if INTERRUPT["left"] is not None:
        INTERRUPT["left"] -= 1
        if INTERRUPT["left"] < 0:
            INTERRUPT["left"] = None
            raise KeyboardInterrupt


class ToyRegressor(ConstantGaussian):
    name = "toy-regressor"

    def meta_loss(self, episode):
        tick()
        return super().meta_loss(episode)


class ToyStream(RunningPrototypes):
    name = "toy-stream"

    def update(self, state, x, y):
        tick()
        return super().update(state, x, y)


class ToyIntegrator(MonteCarlo):
    name = "toy-integrator"

    def estimate(self, problem):
        tick()
        return super().estimate(problem)


class ToyKind(Integration):
    """A third-party task kind (here: integration under another name)."""

    name = "toy-kind"


class ToyKindMethod(MonteCarlo):
    name = "toy-kind-mc"
    task = "toy-kind"


COMMON = {"seeds": [0], "checkpoint_every": 2}
SUITES = {
    "toy-regression": {"suite": {**COMMON, "task": "regression", "methods": ["toy-regressor"],
                                 "train_datasets": ["gp-rbf"], "context_sizes": [0, 4],
                                 "targets": 16, "train_targets": 8, "train_max_context": 4,
                                 "train_episodes": 12, "val_episodes": 3, "val_every": 6,
                                 "test_episodes": 6}},
    "toy-stream": {"suite": {**COMMON, "task": "sequential", "methods": ["toy-stream"],
                             "stream_length": 50, "eval_steps": [0, 10, 50],
                             "test_episodes": 3}},
    "toy-integration": {"suite": {**COMMON, "task": "integration", "methods": ["toy-integrator"],
                                  "sample_sizes": [10, 100], "test_episodes": 20}},
    "toy-kind": {"suite": {**COMMON, "task": "toy-kind", "train_datasets": ["genz-oscillatory"],
                           "sample_sizes": [10], "test_episodes": 5}},
}


@zoo.hookimpl
def zoo_register_methods(register):
    for cls in (ToyRegressor, ToyStream, ToyIntegrator, ToyKindMethod):
        register(cls)


@zoo.hookimpl
def zoo_register_tasks(register):
    register("toy-kind", ToyKind())


@zoo.hookimpl
def zoo_register_suites(register):
    for name, suite in SUITES.items():
        register(name, suite)
'''

TIMING = {"seconds", "update_seconds", "train_seconds", "val_seconds", "eval_seconds_per_episode",
          "update_ms", "versions", "git_commit", "device",
          "records_sha256"}  # the digest of records that hold their times


@pytest.fixture
def toy_plugin(tmp_path, monkeypatch):
    """Install the plugin distribution into a folder on sys.path, as pip --target would."""
    site = tmp_path / "site"
    info = site / "zoo_toy_kinds-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zoo-toy-kinds\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[zoo.plugins]\ntoy-kinds = zt_toy_kinds\n")
    (site / "zt_toy_kinds.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(site))
    plugins.reset()
    import zt_toy_kinds

    yield zt_toy_kinds
    monkeypatch.undo()
    plugins.reset()


def lines(out: Path) -> dict[str, dict]:
    return {r["config_hash"]: r for r in map(json.loads, (out / "results.jsonl").read_text()
                                              .splitlines())}


def without_timing(obj):
    if isinstance(obj, dict):
        return {k: without_timing(v) for k, v in obj.items() if k not in TIMING}
    if isinstance(obj, list):
        return [without_timing(v) for v in obj]
    return obj


def episodes(out: Path, cell_hash: str) -> list[dict]:
    text = (out / "cells" / cell_hash / "episodes.jsonl").read_text()
    return [without_timing(json.loads(x)) for x in text.splitlines()]


@pytest.mark.parametrize("suite, interrupt_after, figure", [
    ("toy-regression", 7, "regression-gp-rbf.png"),
    ("toy-stream", 120, "sequential-digits-stream-t-50.png"),
    ("toy-integration", 30, "integration-gaussian-cosine.png"),
])
def test_kind_runs_reports_and_resumes_after_an_interruption(toy_plugin, tmp_path, monkeypatch,
                                                             suite, interrupt_after, figure):
    reference = tmp_path / "reference"
    outcome = run_suite(suite, out=reference, device="cpu", progress=False)
    assert outcome.finished and not outcome.failed

    monkeypatch.setattr(evaluate_module, "FLUSH_SECONDS", 0.0)  # every record written at once
    monkeypatch.setattr(train_module, "CHECKPOINT_SECONDS", 0.0)  # every checkpoint_every episodes
    out = tmp_path / "interrupted"
    toy_plugin.INTERRUPT["left"] = interrupt_after
    with pytest.raises(KeyboardInterrupt):
        run_suite(suite, out=out, device="cpu", progress=False)
    partial = sorted(out.glob("cells/*/episodes.jsonl")) + sorted(out.glob("train/*/checkpoint.pt"))
    assert partial, "interrupted before anything was saved: nothing to resume"
    resumed = run_suite(suite, out=out, device="cpu", progress=False)
    assert not resumed.failed and len(resumed.finished) + resumed.skipped == len(outcome.finished)

    ref, got = lines(reference), lines(out)
    assert set(ref) == set(got)
    for h in ref:
        assert without_timing(got[h]) == without_timing(ref[h])
        assert episodes(out, h) == episodes(reference, h)

    report = write_report(out)
    names = {p.name for p in (out / "report").iterdir()}
    assert {"table.md", "table.csv", "table.json", "table.tex", "paired.md"} <= names
    assert figure in names, names
    rows = json.loads((out / "report" / "table.json").read_text())["rows"]
    assert len(rows) == len(ref) and all(r["status"] == "done" for r in rows)
    assert report.kinds() == [next(iter(got.values()))["task"]]


def test_regression_results_pool_one_training_across_context_sizes(toy_plugin, tmp_path):
    out = tmp_path / "r"
    run_suite("toy-regression", out=out, device="cpu", progress=False)
    results = list(lines(out).values())
    assert sorted(r["context"] for r in results) == [0, 4]
    assert len({r["config"]["train_targets"] for r in results}) == 1
    assert len(list((out / "train").iterdir())) == 1
    for r in results:
        assert r["task"] == "regression" and r["lmlhd_p05"] <= r["lmlhd_median"] <= r["lmlhd_p95"]
        assert 0 <= r["coverage90"] <= 1 and r["val_lmlhd"] is not None


def test_a_plugin_task_kind_runs_through_the_cli(toy_plugin, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["bench", "toy-kind", "--out", str(out), "--device", "cpu", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "| toy-kind-mc |" in printed and "VRF 1" in printed
    (line,) = lines(out).values()
    assert line["task"] == "toy-kind" and line["config"]["task"] == "toy-kind"
    assert main(["tasks", "--json"]) == 0
    kinds = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert kinds["toy-kind"]["plugin"] == "toy-kinds" and kinds["toy-kind"]["methods"] == [
        "toy-kind-mc"]
    assert {"classification", "regression", "sequential", "integration"} <= set(kinds)
    assert main(["report", str(out), "--format", "csv", "--no-plots"]) == 0
    assert "abs_error" in capsys.readouterr().out


def test_a_method_of_another_kind_in_a_suite_is_an_error_that_says_what_to_do():
    with pytest.raises(SuiteError, match="'gp' solves 'regression' tasks.*classification suite"):
        prepare_suite(tiny_suite(methods=["gp"]), registry=plugins.registry())
    with pytest.raises(SuiteError, match="'protonet' solves 'classification'.*zoo suites"):
        prepare_suite("regression-quick", only=["protonet"], registry=plugins.registry())


def test_a_regression_suite_without_context_sizes_says_what_to_set():
    with pytest.raises(SuiteError, match="context_sizes = \\[\\]: give at least one value"):
        suite_from_dict("r", {"suite": {"task": "regression", "context_sizes": []}},
                        registry=plugins.registry())
    suite = suite_from_dict("r", {"suite": {"task": "regression", "context_sizes": [80]}},
                            registry=plugins.registry())
    with pytest.raises(SuiteError, match="raise targets or lower context_sizes"):
        expand_cells(suite, ["gp"], registry=plugins.registry())
    with pytest.raises(SuiteError, match="unknown setting 'ways'; settings of a regression"):
        suite_from_dict("r", {"suite": {"task": "regression", "ways": [5]}}, registry=plugins.registry())
    with pytest.raises(SuiteError, match="unknown task kind 'regresion'"):
        suite_from_dict("r", {"suite": {"task": "regresion"}}, registry=plugins.registry())


def test_a_stream_method_without_update_is_an_error_that_says_what_to_implement():
    from zoo.tasks.methods import StreamMethod

    class NoUpdate(StreamMethod):
        name = "no-update"

        def init(self):
            return None

        def predict(self, state, x):
            raise AssertionError

    reg = plugins.registry()
    reg.register("methods", "no-update", NoUpdate, owner="tests")
    try:
        with pytest.raises(Exception, match="does not implement update.*update\\(state, x, y\\)"):
            prepare_suite("stream-quick", only=["no-update"], registry=plugins.registry())
    finally:
        reg.unregister("methods", "no-update")
