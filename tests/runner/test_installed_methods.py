"""A suite runs with the methods that are installed: the zoo's methods it names but that are not
installed are skipped and named with their distribution, only the tables of methods that run are
checked, and errors that come from a suite file name the file. Also: list settings from
comma-separated text, and a suite given as a path."""

from __future__ import annotations

import importlib.metadata as md
import json
import logging

import pytest

from zoo import plugins
from zoo.catalogue import FAMILIES, family_distribution, providing_distribution
from zoo.runner.bench import prepare_suite, run_suite
from zoo.runner.cells import expand_cells
from zoo.runner.suite import SuiteError, apply_overrides, load_suite, select_methods
from zoo.spec import parse_list

TINY_SETS = ["ways=[3]", "shots=[1]", "test_datasets=glyphs", "train_episodes=2", "val_episodes=1",
             "val_every=2", "test_episodes=2", "query=2", "train_query=2", "seeds=[0]"]


@pytest.fixture(scope="module")
def only_protonet():
    """A registry of the core and the protonet plugin alone, as after installing just those."""
    eps = [e for e in md.entry_points(group="zoo.plugins") if e.name == "protonet"]
    return plugins.load(entry_points=eps, strict=True, disabled=())


def test_the_catalogue_is_what_the_plugins_register():
    reg = plugins.registry()
    ours = {n: reg.owner("methods", n) for n in reg.names("methods")
            if reg.owner("methods", n) in FAMILIES}
    assert {m: family_distribution(p) for m, p in ours.items()} == {
        m: providing_distribution(m) for ms in FAMILIES.values() for m in ms}
    assert {m: kind for ms in FAMILIES.values() for m, kind in ms.items()} == {
        m: reg.get("methods", m).task for m in ours}
    assert providing_distribution("protonet") == "bayes-meta-zoo-protonet"
    assert providing_distribution("no-such-method") is None


def test_quick_with_protonet_alone_names_what_it_skips(only_protonet, caplog):
    with caplog.at_level(logging.WARNING):
        suite, methods = prepare_suite("quick", registry=only_protonet)
    assert methods == ["protonet"]
    text = caplog.text
    assert "anil, fomaml, maml, metasgd (pip install bayes-meta-zoo-maml)" in text
    assert "bong-head (pip install bayes-meta-zoo-bong)" in text  # classification's only
    assert "ma-np" not in text and "protonet" not in text.split("not installed:", 1)[1]
    cells = expand_cells(suite, methods, only_protonet)
    assert {c.method for c in cells} == {"protonet"}


@pytest.mark.slow
def test_quick_runs_protonet_with_only_protonet_installed(only_protonet, tmp_path):
    outcome = run_suite("quick", out=tmp_path / "out", device="cpu", methods=["protonet"],
                        sets=TINY_SETS, progress=False, registry=only_protonet)
    assert [o.result["method"] for o in outcome.finished] == ["protonet"]


def test_a_missing_method_asked_for_says_what_to_install(only_protonet):
    suite = load_suite("quick", only_protonet)
    with pytest.raises(SuiteError, match="'maml' is not installed: pip install bayes-meta-zoo-maml"):
        select_methods(suite, ["maml"], registry=only_protonet)
    with pytest.raises(SuiteError, match="pip install bayes-meta-zoo-dkt"):
        apply_overrides(suite, ["dkt.kernel=rbf"], ["protonet"], only_protonet)


def write_suite(tmp_path, text: str):
    path = tmp_path / "mine.toml"
    path.write_text(text)
    return path


def test_a_suite_file_runs_by_its_path(tmp_path, only_protonet):
    path = write_suite(tmp_path, '[suite]\nmethods = ["protonet"]\ntrain_datasets = ["glyphs"]\n')
    suite = load_suite(str(path), only_protonet)
    assert suite.name == "mine" and suite.source == str(path)
    outcome = run_suite(str(path), out=tmp_path / "out", device="cpu", sets=TINY_SETS,
                        progress=False, registry=only_protonet)
    assert [o.result["method"] for o in outcome.finished] == ["protonet"]
    with pytest.raises(SuiteError, match="no such file"):
        load_suite(str(tmp_path / "absent.toml"), only_protonet)


def test_errors_from_a_suite_file_name_the_file(tmp_path, only_protonet):
    path = write_suite(tmp_path, '[suite]\nmethods = ["protonet"]\n[methods.protonett]\nlr = 1\n')
    suite, methods = prepare_suite(load_suite(str(path), only_protonet), registry=only_protonet)
    with pytest.raises(SuiteError, match=rf"suite 'mine' \({path}\): \[methods.protonett\]"):
        expand_cells(suite, methods, only_protonet)
    path = write_suite(tmp_path, '[suite]\nmethods = ["protonet", "protonett"]\n')
    with pytest.raises(SuiteError, match=rf"suite 'mine' \({path}\): methods \['protonett'\]"):
        prepare_suite(load_suite(str(path), only_protonet), registry=only_protonet)
    path = write_suite(tmp_path, "[suite]\ntrain_episodes = 'many'\n")
    with pytest.raises(SuiteError, match=rf"suite 'mine' \({path}\): setting train_episodes"):
        load_suite(str(path), only_protonet)


def test_list_settings_from_comma_separated_text(only_protonet):
    assert parse_list("glyphs,digits") == ["glyphs", "digits"]
    assert parse_list("5, 20") == [5, 20]
    assert parse_list('["a", "b"]') == ["a", "b"]
    assert parse_list("omniglot[protocol=no-latin,rotations=true],digits") == [
        "omniglot[protocol=no-latin,rotations=true]", "digits"]
    suite = apply_overrides(load_suite("quick", only_protonet),
                            ["test_datasets=glyphs,digits", "ways=5,3"], [], only_protonet)
    assert suite.settings["test_datasets"] == ["glyphs", "digits"]
    assert suite.settings["ways"] == [5, 3]
    assert json.loads(json.dumps(suite.settings["ways"])) == [5, 3]
