"""A tiny suite end to end: results schema, skipping finished cells, failed cells, reports in
every format, and a results folder with a corrupt or foreign file (named, nothing touched)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from zoo_protonet import ProtoNet

from zoo.cli import main
from zoo.plugins import registry
from zoo.runner.bench import MissingRequirementsError, run_suite
from zoo.runner.storage import Results, ResultsFolderError

from .conftest import tiny_suite

SCHEMA = {"method", "dataset", "backbone", "kernel", "way", "shot", "query", "seed",
          "train_episodes", "test_episodes", "accuracy", "ci95", "ece", "mce", "nll", "brier",
          "temperature", "ece_calibrated", "train_seconds", "eval_seconds_per_episode", "device",
          "versions", "config_hash", "config"}


class Flaky(ProtoNet):
    """ProtoNet that fails at test time while ``fail`` is set."""

    name = "flaky"
    fail = True

    def predict(self, episode):
        if Flaky.fail:
            raise RuntimeError("flaky failed on purpose")
        return super().predict(episode)


@pytest.fixture
def flaky(monkeypatch):
    reg = registry()
    reg.register("methods", "flaky", Flaky, owner="tests")
    monkeypatch.setattr(Flaky, "fail", True)
    yield Flaky
    reg.unregister("methods", "flaky")


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench") / "results"
    outcome = run_suite(tiny_suite(), out=out, device="cpu", progress=False)
    assert len(outcome.finished) == 2 and not outcome.failed
    return out


def test_results_schema_and_cell_files(finished):
    lines = [json.loads(line) for line in (finished / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    for r in lines:
        assert set(r) >= SCHEMA, SCHEMA - set(r)
        assert 0 <= r["accuracy"] <= 1 and 0 <= r["ece"] <= 1 and r["temperature"] > 0
        assert r["test_episodes"] == 4 and r["train_episodes"] == 6
        assert {"python", "torch", "pyro", "learn2learn", "zoo", "plugins"} <= set(r["versions"])
        assert "protonet" in r["versions"]["plugins"]
        cell = finished / "cells" / r["config_hash"]
        assert {p.name for p in cell.iterdir()} == {
            "config.json", "env.json", "model.pt", "training.json", "episodes.jsonl",
            "result.json", "done"}
        assert json.loads((cell / "result.json").read_text()) == r
        episodes = [json.loads(x) for x in (cell / "episodes.jsonl").read_text().splitlines()]
        assert [e["index"] for e in episodes] == [0, 1, 2, 3]
        assert {"seed", "classes", "accuracy", "nll", "confidence", "correct", "seconds"} <= set(
            episodes[0])
        env = json.loads((cell / "env.json").read_text())
        assert {"versions", "git_commit", "device"} <= set(env)
    # both test data sets scored by the one training
    assert len(list((finished / "train").iterdir())) == 1


def test_rerun_skips_finished_cells(finished):
    before = snapshot(finished)
    outcome = run_suite(tiny_suite(), out=finished, device="cpu", progress=False)
    assert outcome.skipped == 2 and not outcome.finished
    after = snapshot(finished)
    assert {k: v for k, v in after.items() if not k.startswith("suites/")} == \
        {k: v for k, v in before.items() if not k.startswith("suites/")}


def test_same_test_episodes_for_every_method(finished):
    """Episode seeds and classes depend on the suite seed only, so results pair across methods."""
    from zoo.episode import EpisodeSampler
    from zoo.plugins import load_dataset

    line = json.loads((finished / "results.jsonl").read_text().splitlines()[0])
    cell = finished / "cells" / line["config_hash"]
    recorded = [json.loads(x) for x in (cell / "episodes.jsonl").read_text().splitlines()]
    sampler = EpisodeSampler(load_dataset(line["dataset"]), "test", 3, 1, 3, seed=0)
    assert [r["seed"] for r in recorded] == [sampler[i].info["seed"] for i in range(4)]


def test_failed_cell_is_shown_retried_and_never_stored(tmp_path, flaky):
    out = tmp_path / "r"
    suite = tiny_suite(methods=["protonet", "flaky"], test_datasets=["glyphs"])
    outcome = run_suite(suite, out=out, device="cpu", progress=False)
    assert [o.label.split()[0] for o in outcome.failed] == ["flaky"]
    bad = out / "cells" / outcome.failed[0].cell_hash
    assert "flaky failed on purpose" in (bad / "error.txt").read_text()
    assert not (bad / "done").exists() and not (bad / "result.json").exists()
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [r["method"] for r in lines] == ["protonet"]
    assert main(["report", str(out), "--no-plots"]) == 0
    assert "FAILED" in (out / "report" / "table.md").read_text()

    flaky.fail = False
    outcome = run_suite(suite, out=out, device="cpu", progress=False)
    assert outcome.skipped == 1 and [o.label.split()[0] for o in outcome.finished] == ["flaky"]
    assert not (bad / "error.txt").exists() and (bad / "done").exists()
    assert sorted(json.loads(x)["method"] for x in
                  (out / "results.jsonl").read_text().splitlines()) == ["flaky", "protonet"]


@pytest.mark.parametrize("fmt", ["md", "csv", "json", "latex"])
def test_report_regenerates_every_format(finished, fmt, capsys):
    report = finished / "report"
    for p in report.glob("*") if report.exists() else []:
        p.unlink()
    assert main(["report", str(finished), "--format", fmt]) == 0
    printed = capsys.readouterr().out
    names = {p.name for p in report.iterdir()}
    assert {"table.md", "table.csv", "table.json", "table.tex", "paired.md", "paired.csv"} <= names
    assert "reliability-protonet.png" in names
    assert any(n.startswith("training-") for n in names)
    rows = json.loads((report / "table.json").read_text())["rows"]
    assert {(r["method"], r["dataset"]) for r in rows} == {("protonet", "glyphs"),
                                                          ("protonet", "digits")}
    csv_rows = list(csv.DictReader((report / "table.csv").open()))
    assert {float(r["accuracy"]) for r in csv_rows} == {r["accuracy"] for r in rows}
    expected = {"md": "| protonet |", "csv": "accuracy", "json": '"rows"', "latex": r"\toprule"}
    assert expected[fmt] in printed


@pytest.mark.parametrize("damage", ["foreign-top", "foreign-in-cell", "corrupt-result",
                                    "corrupt-jsonl", "edited-config"])
def test_corrupt_or_foreign_file_is_named_and_nothing_touched(finished, tmp_path, damage):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(finished, out)
    cell = next(p for p in (out / "cells").iterdir())
    target = {"foreign-top": out / "notes.txt", "foreign-in-cell": cell / "mine.bin",
              "corrupt-result": cell / "result.json", "corrupt-jsonl": out / "results.jsonl",
              "edited-config": cell / "config.json"}[damage]
    if damage == "edited-config":
        config = json.loads(target.read_text())
        target.write_text(json.dumps({**config, "seed": 42}))
    else:
        target.write_text("{not json")
    before = snapshot(out)
    with pytest.raises(ResultsFolderError, match=str(target.name)):
        run_suite(tiny_suite(), out=out, device="cpu", progress=False, force=True)
    assert snapshot(out) == before
    assert main(["report", str(out)]) == 2  # the CLI prints the error, exits 2
    assert snapshot(out) == before


def test_not_a_results_folder(tmp_path):
    (tmp_path / "thesis.tex").write_text("precious")
    with pytest.raises(ResultsFolderError, match="thesis.tex"):
        run_suite(tiny_suite(), out=tmp_path, device="cpu", progress=False)
    assert [p.name for p in tmp_path.iterdir()] == ["thesis.tex"]


def test_missing_data_and_device_are_listed(tmp_path):
    suite = tiny_suite(train_datasets=["omniglot-lake-runs", "no-such-data"], requires=["cuda"])
    with pytest.raises(MissingRequirementsError) as info:
        run_suite(suite, out=tmp_path / "r", device="cpu", progress=False)
    text = str(info.value)
    assert "CUDA" in text and "all_runs.zip" in text and "'no-such-data' is not registered" in text
    assert not (tmp_path / "r").exists()


def test_force_recomputes(finished, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(finished, out)
    old = {json.loads(x)["config_hash"]: json.loads(x) for x in
           (out / "results.jsonl").read_text().splitlines()}
    outcome = run_suite(tiny_suite(), out=out, device="cpu", progress=False, force=True)
    assert len(outcome.finished) == 2 and outcome.skipped == 0
    new = {json.loads(x)["config_hash"]: json.loads(x) for x in
           (out / "results.jsonl").read_text().splitlines()}
    assert set(new) == set(old)
    for h in new:  # deterministic: the same numbers again
        assert new[h]["accuracy"] == old[h]["accuracy"] and new[h]["nll"] == old[h]["nll"]


def test_train_and_evaluate_commands(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "protonet", "--dataset", "glyphs", "--way", "3", "--shot", "1",
                 "--episodes", "4", "--query", "2", "--val-episodes", "2", "--val-every", "2",
                 "--out", str(run), "--device", "cpu", "--no-progress"]) == 0
    assert {"config.json", "model.pt", "training.json", "done"} <= {p.name for p in run.iterdir()}
    capsys.readouterr()
    assert main(["evaluate", str(run), "--dataset", "digits", "--episodes", "3", "--query", "2",
                 "--device", "cpu", "--json", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dataset"] == "digits" and summary["test_episodes"] == 3
    assert 0 <= summary["accuracy"] <= 1
    assert main(["evaluate", str(tmp_path), "--dataset", "digits"]) == 2  # no model there


def test_evaluate_on_the_validation_split_never_draws_a_test_episode(tmp_path, capsys,
                                                                       monkeypatch):
    import zoo.episode

    run = tmp_path / "run"
    assert main(["train", "protonet", "--dataset", "glyphs", "--way", "3", "--shot", "1",
                 "--episodes", "2", "--query", "2", "--val-episodes", "1", "--val-every", "2",
                 "--out", str(run), "--device", "cpu", "--no-progress"]) == 0
    splits = []
    sampler = zoo.episode.EpisodeSampler

    def recording(dataset, split, *args, **kwargs):
        splits.append(split)
        return sampler(dataset, split, *args, **kwargs)

    monkeypatch.setattr(zoo.episode, "EpisodeSampler", recording)  # as the kind imports it
    capsys.readouterr()
    assert main(["evaluate", str(run), "--dataset", "glyphs", "--split", "val", "--seed", "7",
                 "--episodes", "2", "--device", "cpu", "--json", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert splits == ["val"] and summary["split"] == "val" and summary["test_episodes"] == 2
    assert main(["evaluate", str(run), "--dataset", "digits", "--split", "val"]) == 2
    assert "has no validation split" in capsys.readouterr().err


def test_entry_suite_calls_the_function(tmp_path, monkeypatch):
    from zoo.runner.suite import suite_from_dict

    (tmp_path / "my_experiment.py").write_text(
        "import json\n"
        "def run(out_dir, data_dir, device, settings):\n"
        "    (out_dir / 'out.json').write_text(json.dumps([device, settings]))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = suite_from_dict("exp", {"suite": {"entry": "my_experiment:run"},
                                    "settings": {"steps": 3}}, registry=registry())
    out = tmp_path / "r"
    run_suite(suite, out=out, device="cpu", sets=["steps=5"], progress=False)
    assert json.loads((out / "experiments" / "exp" / "out.json").read_text()) == ["cpu",
                                                                                 {"steps": 5}]
    with pytest.raises(Exception, match="steps"):
        run_suite(suite, out=out, device="cpu", sets=["stepz=5"], progress=False)


@pytest.mark.parametrize("entry", ["no_such_module:run", "json:no_such_function"])
def test_an_entry_that_cannot_be_loaded_is_named(tmp_path, entry):
    from zoo.runner.suite import SuiteError, suite_from_dict

    suite = suite_from_dict("exp", {"suite": {"entry": entry}}, registry=registry())
    with pytest.raises(SuiteError, match=f"entry '{entry}' cannot be loaded.*plugin"):
        run_suite(suite, out=tmp_path / "r", device="cpu", progress=False)


def test_table_cell_gives_raw_and_calibrated_ece():
    from zoo.tasks.classification import Classification

    row = {"accuracy": 0.8, "ci95": 0.02, "ece": 0.5, "ece_calibrated": 0.03, "status": "done"}
    assert Classification().view.cell_text(row, error=False) == "80.0 ± 2.0 (ECE 50.0 / 3.0%)"
    assert Classification().view.cell_text(row, error=True) == "20.0 ± 2.0% err"


def test_the_line_of_a_finished_cell_gives_its_scores_and_times():
    from zoo.tasks import Classification, Integration, Regression

    times = {"train_seconds": 12.4, "eval_seconds_per_episode": 0.0456}
    row = {"accuracy": 0.8, "ci95": 0.02, "ece": 0.5, "ece_calibrated": 0.03, **times}
    assert Classification().view.done_line(row) == \
        "accuracy 80.0 +- 2.0%, ECE 50.0% (calibrated 3.0%), train 12s, 46 ms/episode"
    row = {"lmlhd_median": 1.234, "lmlhd_mean": 1.5, "lmlhd_ci95": 0.25, "mse_median": 0.0123,
           "crps": 0.1, "coverage90": 0.875, **times}
    assert Regression().view.done_line(row) == ("LMLHD median 1.23 (mean 1.50 +- 0.25), MSE 0.0123, "
                                                "CRPS 0.100, 90% coverage 88%, train 12s, 46 ms/episode")
    row = {"abs_error": 0.5, "ci95": 0.1, "rmse": 0.6, "mc_rmse": 1.2, "vrf": 4.0, "sse": 1.0,
           "status": "done", **times}
    assert Integration().view.done_line(row).endswith("45.60 ms/task")


def test_evaluate_set_changes_a_test_time_hparam_and_records_it(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "md-bfsc", "--dataset", "glyphs", "--way", "3", "--shot", "1",
                 "--episodes", "2", "--query", "2", "--val-episodes", "1", "--val-every", "2",
                 "--set", "steps_test=2", "--out", str(run), "--device", "cpu",
                 "--no-progress"]) == 0
    argv = ["evaluate", str(run), "--dataset", "glyphs", "--split", "val", "--seed", "7",
            "--episodes", "2", "--query", "2", "--device", "cpu", "--json", "--no-progress"]
    capsys.readouterr()
    scores = []
    for steps in (None, 2, 0):
        assert main(argv + ([] if steps is None else ["--set", f"steps_test={steps}"])) == 0
        scores.append(json.loads(capsys.readouterr().out))
    assert "changed_hparams" not in scores[0]
    assert scores[1]["changed_hparams"] == {"steps_test": 2} and scores[1]["nll"] == scores[0]["nll"]
    assert scores[2]["changed_hparams"] == {"steps_test": 0} and scores[2]["nll"] != scores[0]["nll"]
    assert main(argv + ["--set", "steps_test=-1"]) == 2  # checked like any hyper-parameter
    assert "steps_test" in capsys.readouterr().err


def test_a_method_with_extra_state_keeps_its_best_model(tmp_path):
    # the best model is kept in memory between validations; feature-transfer's state dict holds
    # its class table's extra state (a dict), which a tensor-only copy could not take
    run = tmp_path / "run"
    assert main(["train", "feature-transfer", "--dataset", "glyphs", "--way", "3", "--shot", "1",
                 "--episodes", "4", "--query", "2", "--val-episodes", "1", "--val-every", "2",
                 "--out", str(run), "--device", "cpu",
                 "--no-progress"]) == 0
    import torch

    model = torch.load(run / "model.pt", weights_only=True)  # the best model, loaded from memory
    assert any(k.endswith("_extra_state") for k in model["state_dict"])


def test_an_older_results_folder_says_what_it_is_and_what_to_do(finished, tmp_path, capsys):
    import shutil

    from zoo.runner.storage import OldResultsFolderError

    out = tmp_path / "older"
    shutil.copytree(finished, out)
    (out / "zoo-results.json").write_text(json.dumps({"format": "zoo-results", "version": 1}))
    stale = tmp_path / "older" / "cells" / "0123456789abcdef"  # a cell named by the old rule
    stale.mkdir()
    (stale / "config.json").write_text("{}")
    before = snapshot(out)
    for attempt in (lambda: run_suite(tiny_suite(), out=out, device="cpu", progress=False),
                    lambda: Results.open(out, create=False, keep_records=True)):
        with pytest.raises(OldResultsFolderError, match=r"format version 1, written by an older "
                           r"zoo; this zoo writes version 3.*another --out.*--force"):
            attempt()
    assert main(["report", str(out)]) == 2 and "format version 1" in capsys.readouterr().err
    assert snapshot(out) == before  # nothing changed
    outcome = run_suite(tiny_suite(), out=out, device="cpu", progress=False, force=True)
    assert len(outcome.finished) == 2 and outcome.skipped == 0
    assert json.loads((out / "zoo-results.json").read_text())["version"] == 3
    assert not stale.exists() and len((out / "results.jsonl").read_text().splitlines()) == 2
