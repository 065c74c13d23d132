"""Per-data-set kernels: the ``paper`` suite runs every GP method with the kernel its card
(its paper) names for each training data set, and a kernel table is validated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from zoo.plugins import registry
from zoo.runner.cells import expand_cells
from zoo.runner.suite import SuiteError, load_suite, select_methods, suite_from_dict
from zoo.spec import parse_spec

CARDS = Path(__file__).resolve().parents[2] / "benchmarks" / "cards"
LINE = re.compile(r"^Paper-suite kernels of `([\w-]+)`: (.+)$", re.M)


def card_kernels() -> dict[tuple[str, str], str]:
    """``(method, training data set) -> kernel`` from the 'Paper-suite kernels' lines of cards."""
    out = {}
    for card in CARDS.glob("*.md"):
        for method, pairs in LINE.findall(card.read_text()):
            for pair in pairs.split(";"):
                dataset, _, kernel = pair.partition("=")
                out[(method, dataset.strip())] = kernel.strip()
    return out


def test_paper_suite_kernels_match_the_cards():
    suite = load_suite("paper", registry=registry())
    expected = card_kernels()
    seen = set()
    for cell in expand_cells(suite, select_methods(suite, registry=registry()), registry=registry()):
        if cell.kernel is None:
            continue
        key = (cell.method, parse_spec(cell.train_dataset)[0])
        assert key in expected, f"no card states the paper-suite kernel of {key}"
        assert cell.kernel == expected[key], (key, cell.kernel, expected[key])
        assert cell.config()["kernel"] == cell.kernel  # recorded in the cell's identity
        seen.add(key)
    assert ("md-bfsc", "cub") in seen and ("md-bfsc", "omniglot") in seen
    assert expected[("md-bfsc", "cub")] == "cosine" and expected[("md-bfsc", "omniglot")] == "rbf"


def _suite(kernels: object, train: list[str] | None = None):
    return suite_from_dict("t", {
        "suite": {"methods": ["md-bfsc"], "train_datasets": train or ["glyphs", "digits"],
                  "test_datasets": ["glyphs"], "shots": [1], "kernel": "linear"},
        "methods": {"md-bfsc": {"kernel": "polynomial", "kernel_per_dataset": kernels}}}, registry=registry())


def test_per_dataset_kernel_wins_over_the_method_and_suite_kernels():
    cells = expand_cells(_suite({"glyphs": "cosine"}), ["md-bfsc"], registry=registry())
    assert {c.train_dataset: c.kernel for c in cells} == {"glyphs": "cosine",
                                                          "digits": "polynomial"}
    base = expand_cells(_suite({"glyphs": "rbf"}, ["glyphs[size=20]"]), ["md-bfsc"], registry=registry())
    assert [c.kernel for c in base] == ["rbf"]  # matched by the base name


@pytest.mark.parametrize("table, message", [
    ({"glyphs": "nosuchkernel"}, "nosuchkernel"),
    ({"glyphs": 3}, "kernel specs"),
])
def test_kernel_tables_are_validated(table, message):
    with pytest.raises(SuiteError, match=message):
        _suite(table)


def test_a_kernel_table_key_must_be_a_training_data_set():
    with pytest.raises(SuiteError, match="does not train on"):
        expand_cells(_suite({"glyhps": "rbf"}), ["md-bfsc"], registry=registry())


def test_a_kernel_table_needs_a_kernel_method():
    with pytest.raises(SuiteError, match="uses no kernel"):
        suite_from_dict("t", {"methods": {"protonet": {"kernel_per_dataset": {"glyphs": "rbf"}}}},
                        registry=registry())
