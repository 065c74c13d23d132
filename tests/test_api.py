"""The Python API (``zoo.bench``, ``zoo.train_and_evaluate``, ``zoo.episodes``,
``zoo.load_results``): thin layers over the runner that give what the commands give."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pandas
import pytest

import zoo
from zoo.api import as_sets, toml_literal
from zoo.errors import ZooError
from zoo.spec import parse_value

TOY = {"train_episodes": 2, "val_episodes": 2, "val_every": 2, "test_episodes": 3}


@pytest.mark.parametrize("value", [3, 0.001, -2.5, 1e-12, True, False, "sobol[samples=64]",
                                   'say "hi"', [1, 5], ["glyphs", "digits"], {"cub": "cosine"},
                                   {"1": 60, "5": 40}, math.inf])
def test_settings_reach_the_runner_as_given(value):
    assert parse_value(toml_literal(value)) == value


def test_settings_become_set_items_and_bad_values_are_refused():
    assert as_sets({"ways": [5], "maml.inner_steps": 1}) == ["ways=[5]", "maml.inner_steps=1"]
    with pytest.raises(ZooError, match="cannot be given to a suite"):
        toml_literal(object())


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("api") / "protonet"
    table = zoo.train_and_evaluate("protonet", "glyphs", way=3, shot=1, out=out,
                                   test_datasets=["glyphs", "digits"], device="cpu", **TOY)
    return out, table


@pytest.mark.slow
def test_train_and_evaluate_writes_what_zoo_bench_writes(trained):
    out, table = trained
    assert sorted(table["dataset"]) == ["digits", "glyphs"]
    assert set(table["method"]) == {"protonet"} and set(table["way"]) == {3}
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and all(line["hparams"] == lines[0]["hparams"] for line in lines)
    by_dataset = {line["dataset"]: line for line in lines}
    for row in table.to_dict("records"):
        assert row["accuracy"] == pytest.approx(by_dataset[row["dataset"]]["accuracy"])
    assert (out / "report" / "table.md").is_file()
    again = zoo.train_and_evaluate("protonet", "glyphs", way=3, shot=1, out=out,
                                   test_datasets=["glyphs", "digits"], device="cpu", **TOY)
    pandas.testing.assert_frame_equal(again, table)  # resumed: nothing recomputed
    assert len((out / "results.jsonl").read_text().splitlines()) == 2


@pytest.mark.slow
def test_load_results_gives_records_without_torch(trained):
    out, table = trained
    code = ("import json, sys, zoo; rows = zoo.load_results(sys.argv[1], records=True); "
            "print(json.dumps([len(rows), 'torch' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True,
                          check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == [2, False]
    records = zoo.load_results(out, records=True)
    assert isinstance(records, list) and [r["dataset"] for r in records] == list(table["dataset"])


@pytest.mark.slow
def test_bench_takes_a_suite_as_a_dict(tmp_path):
    suite = {"suite": {"methods": ["protonet"], "train_datasets": ["glyphs"], "ways": [2],
                       "shots": [1], **TOY}, "methods": {"protonet": {"lr": 0.002}}}
    table = zoo.bench(suite, tmp_path / "r", device="cpu", settings={"seeds": [0, 1]})
    assert list(table["seeds"]) == [2]
    line = json.loads((tmp_path / "r" / "results.jsonl").read_text().splitlines()[0])
    assert line["hparams"]["lr"] == 0.002


def test_episodes_are_the_samplers_episodes():
    sampler = zoo.episodes("glyphs", way=3, shot=2, query=1, split="val", seed=4)
    a, b = sampler[5], zoo.episodes("glyphs", way=3, shot=2, query=1, split="val", seed=4)[5]
    assert a.id == b.id and bool((a.support_x == b.support_x).all())
    assert tuple(a.support_x.shape[:1]) == (6,) and a.support_y.tolist() == [0, 0, 1, 1, 2, 2]


def test_python_m_zoo_cli_has_every_sub_command():
    done = subprocess.run([sys.executable, "-m", "zoo.cli", "report", "--help"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "--format" in done.stdout, done.stderr


def test_errors_of_train_and_evaluate_name_that_function(tmp_path):
    with pytest.raises(ZooError, match=r"suite 'train_and_evaluate' \(zoo.train_and_evaluate\("
                                       r"'protonet', 'glyphs'\)\).*no hyper-parameter"):
        zoo.train_and_evaluate("protonet", "glyphs", way=3, shot=1, out=tmp_path / "r",
                               hparams={"lrr": 0.1}, device="cpu", **TOY)
    with pytest.raises(ZooError, match=r"zoo.train_and_evaluate\('protonet', 'glyphs'\).*"
                                       r"unknown setting 'trian_episodes'"):
        zoo.train_and_evaluate("protonet", "glyphs", way=3, shot=1, out=tmp_path / "r",
                               trian_episodes=3, device="cpu")
    with pytest.raises(ZooError, match=r"the dict given to zoo.bench"):
        zoo.bench({"suite": {"methods": ["protonet"], "trian_episodes": 3}}, tmp_path / "b",
                  device="cpu")


def test_a_folder_with_nothing_to_show_says_why(tmp_path):
    """An empty table would fail later on its first column without a word: the reader says
    that the folder holds no results."""
    with pytest.raises(ZooError, match="holds no results; run `zoo bench --out"):
        zoo.load_results(tmp_path)
