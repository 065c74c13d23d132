"""The neural-process suites say what their cards claim: np-paper is GMM-NP's protocol (64
training functions x 16 points, 256 test functions x 64 points, its eight context sizes, 1,024
draws for LMLHD and bounds, 8 seeds); np-quick covers every regression method on sinusoids and GP
samples; np-bo names the three optimisation families."""

from zoo.plugins import registry
from zoo.runner.cells import expand_cells
from zoo.runner.suite import load_suite


def test_np_paper_is_the_papers_protocol():
    suite = load_suite("np-paper", registry=registry())
    cells = expand_cells(suite, ["ma-np"], registry=registry())
    shapes = {tuple(sorted(c.shape.items())) for c in cells}
    assert {c.shape["context"] for c in cells} == {0, 1, 2, 4, 6, 8, 12, 16}
    assert {c.seed for c in cells} == set(range(8)) and len(shapes) == 8
    first = cells[0]
    assert first.shape | {"context": 0} == {"context": 0, "targets": 64, "train_targets": 16,
                                            "train_max_context": 15, "train_tasks": 64,
                                            "bound_samples": 1024}
    assert first.test_episodes == 256 and first.hparams["samples"] == 1024
    assert {c.train_dataset for c in cells} == {"sinusoid", "affine-sinusoid"}


def test_np_quick_runs_every_regression_method_and_np_bo_every_function():
    regression = {n for n, c in registry().items("methods").items() if c.task == "regression"}
    cells = expand_cells(load_suite("np-quick", registry=registry()), sorted(regression), registry=registry())
    assert {c.method for c in cells} == regression
    assert {c.train_dataset for c in cells} == {"sinusoid", "gp-rbf"}
    assert load_suite("np-bo", registry=registry()).entry_settings["functions"] == ["forrester", "branin",
                                                                                    "hartmann3"]


def test_np_paper_ablation_parts_are_rows_of_gmm_np_alone():
    cells = expand_cells(load_suite("np-paper", registry=registry()), ["ma-np", "gmm-np"],
                         registry=registry())
    rows = {(c.method, c.variant) for c in cells}
    assert rows == {("ma-np", ""), ("gmm-np", ""), ("gmm-np", "trng-diag-k1"),
                    ("gmm-np", "trng-full-k1"), ("gmm-np", "ibayes-gmm")}
    diag = next(c for c in cells if c.variant == "trng-diag-k1")
    assert (diag.hparams["covariance"], diag.hparams["components"]) == ("diag", 1)


def test_set_reaches_an_entry_suites_own_setting_of_a_runner_settings_name():
    from zoo.runner.bench import prepare_suite

    suite, _ = prepare_suite("np-bo", ["train_episodes=4000", "tasks=2"], registry=registry())
    assert suite.entry_settings["train_episodes"] == 4000 and suite.entry_settings["tasks"] == 2


def test_a_suite_wide_hparam_of_other_methods_does_not_stop_one_method_alone():
    # np-quick sets samples=256 for the methods that declare it; gmm-np does not, and
    # --methods gmm-np must still expand (it failed: "belong to none of the methods")
    cells = expand_cells(load_suite("np-quick", registry=registry()), ["gmm-np"], registry=registry())
    assert cells and "samples" not in cells[0].hparams


def test_a_suite_wide_hparam_no_method_declares_is_still_a_typo():
    import dataclasses

    import pytest

    from zoo.runner.suite import SuiteError

    suite = load_suite("np-quick", registry=registry())
    typo = dataclasses.replace(suite, settings={**suite.settings, "hparams": {"sampels": 256}})
    with pytest.raises(SuiteError, match="sampels"):
        expand_cells(typo, ["gmm-np"], registry=registry())
