"""``zoo report`` reads a results folder without importing torch (~2 s and ~650 MB before anything
else runs): the task kinds' modules import none, and the built-in kinds are found without loading
the plugins. The tables it prints are those of a report made in a process that has them all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from zoo.plugins import registry
from zoo.runner.bench import run_suite
from zoo.runner.report import render, write_report
from zoo.runner.suite import suite_from_dict

from .conftest import tiny_suite
from .test_report_html import check_results_table, rendered

COMMON = {"seeds": [0], "test_episodes": 3}
OTHER_KINDS = {
    "regression": {"task": "regression", "methods": ["constant"], "train_datasets": ["gp-rbf"],
                   "context_sizes": [0, 4], "targets": 16, "train_targets": 8,
                   "train_max_context": 4, "train_episodes": 4, "val_episodes": 2,
                   "val_every": 2},
    "sequential": {"task": "sequential", "methods": ["running-prototypes"],
                   "stream_length": 20, "eval_steps": [0, 20]},
    "integration": {"task": "integration", "methods": ["mc"], "sample_sizes": [10]},
}

RUN_REPORT = ("import sys; from zoo.cli import main; code = main(sys.argv[1:]); "
              "assert 'torch' not in sys.modules, 'zoo report imported torch'; sys.exit(code)")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Results of every built-in task kind in one folder."""
    out = tmp_path_factory.mktemp("report-imports")
    run_suite(tiny_suite(test_datasets=["glyphs"]), out=out, device="cpu", progress=False)
    for kind, settings in OTHER_KINDS.items():
        suite = suite_from_dict(kind, {"suite": {**COMMON, **settings}}, "tests", registry=registry())
        assert not run_suite(suite, out=out, device="cpu", progress=False).failed
    return out


@pytest.mark.parametrize("flags", [["--no-plots"], []])
def test_zoo_report_imports_no_torch(folder, flags):
    done = subprocess.run([sys.executable, "-c", RUN_REPORT, "report", str(folder), *flags],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = write_report(folder, plots=False)  # here, where torch and the plugins are loaded
    assert report.kinds() == ["classification", "integration", "regression", "sequential"]
    assert done.stdout == render(report, "md") + "\n"


def test_the_html_page_shows_every_kind_s_numbers(folder, tmp_path):
    """One page for four task kinds: each kind's table shows its first report metric, as
    ``table.json`` has it."""
    report = write_report(folder, formats=("json", "html"), plots=False)
    table = json.loads((folder / "report" / "table.json").read_text())
    root = rendered(folder, tmp_path)
    for kind in report.kinds():
        metric = report.tasks[kind].view.report_metrics[0]
        check_results_table(root, table, folder, metric.key, metric.scale, metric.digits,
                            metric.ci, kind)
