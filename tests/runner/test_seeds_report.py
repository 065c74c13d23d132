"""The report's numbers over seeds: each seed's mean, mean +- CI over seeds, paired differences
that take the seed as the unit, episodes named with their query count, skipped steps shown."""

from __future__ import annotations

import numpy as np
import pytest

from zoo.metrics import seed_mean_ci, seed_paired_difference
from zoo.runner.bench import run_suite
from zoo.runner.report import load_report, markdown, paired_markdown

from .conftest import tiny_suite


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory):
    out = tmp_path_factory.mktemp("seeds")
    suite = tiny_suite(methods=["protonet", "matchingnet"], seeds=[0, 1], test_datasets=["glyphs"])
    run_suite(suite, out=out, device="cpu", progress=False)
    return out


@pytest.mark.slow
def test_report_gives_per_seed_means_and_the_ci_over_seeds(two_seeds):
    report = load_report(two_seeds)
    entry = next(e for (m, _), e in report.entries.items() if m == "protonet")
    row = entry.summary()
    by_seed = {s: np.mean([r["accuracy"] for (seed, *_), r in entry.episodes.items() if seed == s])
               for s in (0, 1)}
    assert row["seed_means"] == pytest.approx(by_seed)
    assert (row["seed_mean"], row["seed_ci95"]) == pytest.approx(seed_mean_ci(list(by_seed.values())))
    assert "[2 seeds: " in markdown(report)


@pytest.mark.slow
def test_paired_differences_respect_seeds(two_seeds):
    report = load_report(two_seeds)
    (pair,) = report.paired()
    a = report.entries[(pair["a"], next(s for m, s in report.entries if m == pair["a"]))]
    b = report.entries[(pair["b"], a.setting)]
    per = {s: ([r["accuracy"] for k, r in sorted(a.episodes.items()) if k[0] == s],
               [r["accuracy"] for k, r in sorted(b.episodes.items()) if k[0] == s]) for s in (0, 1)}
    expected = seed_paired_difference({s: v[0] for s, v in per.items()},
                                      {s: v[1] for s, v in per.items()})
    assert (pair["difference"], pair["ci95"]) == pytest.approx(expected)
    assert pair["seeds"] == 2 and pair["unit"] == "seeds"
    assert "| 2 |" in paired_markdown(report, [pair])


def test_episodes_with_other_query_counts_are_other_episodes(tmp_path):
    for query in (3, 2):
        run_suite(tiny_suite(query=query, test_datasets=["glyphs"]), out=tmp_path, device="cpu",
                  progress=False)
    report = load_report(tmp_path)
    (entry,) = report.entries.values()
    assert len(entry.episodes) == 2 * 4  # 4 test episodes at each query count, none overwritten
    assert {k[1] for k in entry.episodes} == {2, 3}
    assert entry.summary()["seeds"] == 1  # two cells of one seed: no interval over seeds
    # its training's numbers are counted once, not once per cell
    (first, second) = entry.results
    assert first["train_seconds"] == second["train_seconds"]
    first["skipped_steps"] = second["skipped_steps"] = 3
    entry._summary = None
    summary = entry.summary()
    assert summary["skipped_steps"] == 3
    assert summary["train_seconds"] == first["train_seconds"]
    assert summary["temperature"] == first["temperature"]
    assert " seeds: " not in markdown(report)


def test_a_later_run_of_the_same_cells_with_another_configuration_replaces_the_earlier(
        tmp_path, caplog):
    """Two runs of the same method, setting and seed into one folder that differ in a setting
    outside the report's columns (``train_episodes``): the report shows the later run alone (its
    episodes, its training's numbers), says so, and mixes nothing of the earlier one in."""
    for episodes in (3, 5):
        run_suite(tiny_suite(train_episodes=episodes, test_datasets=["glyphs"]), out=tmp_path,
                  device="cpu", progress=False)
    with caplog.at_level("WARNING", logger="zoo.runner.collect"):
        report = load_report(tmp_path)
    (entry,) = report.entries.values()
    (result,) = entry.results
    assert result["config"]["train_episodes"] == 5
    later = {rec["index"]: rec for rec in report_records(tmp_path, result["config_hash"])}
    assert {k[2]: v for k, v in entry.episodes.items()} == later
    assert "1 result(s) replaced by later results" in caplog.text


def report_records(root, config_hash):
    from zoo.runner.storage import Results

    return Results.open(root, create=False, keep_records=True).episodes(config_hash)
