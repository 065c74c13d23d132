"""Settings that would be coerced silently, or refused only inside a cell, are refused with a
message before the first cell starts."""

from __future__ import annotations

import pytest

from zoo.backbones import conv4s, mlp
from zoo.cli import main
from zoo.errors import HyperParameterError
from zoo.kernels import PolynomialKernel, RBFKernel
from zoo.plugins import registry
from zoo.runner.bench import run_suite
from zoo.runner.suite import SuiteError, apply_overrides
from zoo.runner.validate import SettingError

from .conftest import tiny_suite


@pytest.mark.parametrize(("assignment", "message"), [
    ("ways=[5.5]", "5.5 is not a whole number"),
    ("shots=[2.7]", "2.7 is not a whole number"),
    ("ways=[true]", "True is not a whole number"),
    ("ways=five", "'five' is not a whole number"),
    ("shots=[1,", "is not a TOML list"),
    ("shots=1]", "brackets"),
    ("seeds=[]", "give at least one value"),
    ("train_datasets=[]", "give at least one value"),
    ("query=true", "must be a whole number"),
    ("train_episodes={1 = 5.5}", "whole number, not 5.5"),
])
def test_values_are_not_coerced(assignment, message):
    with pytest.raises(SuiteError, match=message):
        apply_overrides(tiny_suite(), [assignment], ["protonet"], registry=registry())


def test_values_of_the_right_type_still_pass():
    suite = apply_overrides(tiny_suite(), ["ways=5,20", "shots=[1, 5]", "seeds=3",
                                           "test_datasets=[]", "train_episodes={1 = 5}"], [],
                            registry=registry())
    assert suite.settings["ways"] == [5, 20] and suite.settings["shots"] == [1, 5]
    assert suite.settings["seeds"] == [3] and suite.settings["test_datasets"] == []
    assert suite.settings["train_episodes"] == {"1": 5}


@pytest.mark.parametrize(("assignment", "message"), [
    ("seeds=[18446744073709551616]", "at most 2\\*\\*64 - 1"),
    ("seeds=[-1]", "at least 0"),
    ("test_episodes=1000000000000", "at most 100,000,000"),
    ("train_episodes=1000000000000", "at most 100,000,000"),
    ("val_episodes=1000000000000", "at most 100,000,000"),
])
def test_counts_no_machine_can_finish_are_refused_with_the_limit(assignment, message):
    with pytest.raises(SettingError, match=message):
        apply_overrides(tiny_suite(), [assignment], ["protonet"], registry=registry())
    apply_overrides(tiny_suite(), ["seeds=[18446744073709551615]", "test_episodes=100000000"], [],
                    registry=registry())


def test_the_command_says_what_is_wrong_without_a_traceback(tmp_path, capsys):
    for assignment in ("ways=five", "shots=[1,", "seeds=[]"):
        assert main(["bench", "--set", assignment, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert "zoo: error:" in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("assignment", "message"), [
    ("backbone=nope", "unknown backbone 'nope'"),
    ("backbone=conv4s[width=-3]", "width=-3 must be a whole number >= 1"),
    ("backbone=conv4s[widht=3]", "unexpected keyword argument 'widht'"),
    ("kernel=nope", "unknown kernel 'nope'"),
    ("kernel=rbf[lengthscale=-1]", "lengthscale=-1 must be a number > 0"),
    ("md-bfsc.estimator=nope", "unknown estimator 'nope'"),
    ("md-bfsc.estimator=sobol[samples=-2]", "samples must be a positive integer"),
    ("md-bfsc.estimator=sobol[sample=2]", "has no option"),
])
def test_every_component_of_every_cell_is_built_before_the_first_cell(assignment, message,
                                                                     tmp_path):
    """The bad component is in the last method's cells: no cell of the first ran either."""
    with pytest.raises(SuiteError, match=f"cannot be built .*{message}.*no cell was run"):
        run_suite(tiny_suite(methods=["protonet", "md-bfsc"]), out=tmp_path / "o", device="cpu",
                  progress=False, sets=[assignment])
    assert not (tmp_path / "o").exists()


def test_a_shape_a_test_set_cannot_give_stops_the_suite_before_the_first_cell(tmp_path):
    """digits has 10 classes: a 12-way suite that also tests on glyphs (enough classes) stops
    before any cell trains, naming the digits cell and what to change."""
    with pytest.raises(SuiteError, match=r"(?s)1 cell\(s\) cannot draw their episodes; no cell was "
                                         r"run.*protonet glyphs->digits 12w1s seed0: split 'test' "
                                         r"of data set 'digits' has 10 classes, but way=12"):
        run_suite(tiny_suite(ways=[12]), out=tmp_path / "o", device="cpu", progress=False)
    assert not (tmp_path / "o").exists()


def test_kernels_and_backbones_refuse_impossible_options():
    for options in ({"lengthscale": 0}, {"lengthscale": -1.0}, {"outputscale": 0},
                    {"lengthscale": float("nan")}, {"lengthscale": True}):
        with pytest.raises(HyperParameterError, match="must be a number > 0"):
            RBFKernel(4, **options)
    with pytest.raises(HyperParameterError, match="order=0"):
        PolynomialKernel(4, order=0)
    with pytest.raises(HyperParameterError, match="order=1.5"):
        PolynomialKernel(4, order=1.5)
    for options in ({"width": 0}, {"depth": -1}, {"width": 2.5}):
        with pytest.raises(HyperParameterError, match="must be a whole number >= 1"):
            conv4s(**options)
    with pytest.raises(HyperParameterError, match="hidden=-4"):
        mlp(hidden=(32, -4))
    assert RBFKernel(4, lengthscale=0.5).lengthscale.item() == pytest.approx(0.5)
    assert conv4s(width=8, depth=2).width == 8


def test_uniform_predictions_are_named_as_such(caplog):
    import torch

    from zoo.metrics import fit_temperature

    y = torch.tensor([0, 1, 2, 0])
    with caplog.at_level("WARNING"):
        fit_temperature(torch.full((4, 3), -1.0986), y, what="m glyphs")
    assert "m glyphs: the predictions are uniform" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):  # nearly uniform but informative: no such warning
        fit_temperature(torch.log_softmax(torch.randn(4, 3, generator=torch.Generator()
                                                      .manual_seed(0)) * 1e-3, 1), y)
    assert "uniform" not in caplog.text


def test_a_string_hyperparameter_keeps_the_text_as_written():
    suite = apply_overrides(tiny_suite(methods=["maml"]), ["maml.protocol=nan"], ["maml"],
                            registry=registry())
    assert suite.method_overrides["maml"]["protocol"] == "nan"
    with pytest.raises(SuiteError, match="protocol=.nan. is not allowed"):
        from zoo.runner.cells import expand_cells

        expand_cells(suite, ["maml"], registry())


def test_no_validation_names_its_reason(tmp_path, caplog):
    with caplog.at_level("WARNING"):
        run_suite(tiny_suite(val_episodes=0), out=tmp_path / "o", device="cpu", progress=False)
    assert "val_episodes = 0 asks for no validation" in caplog.text
    assert "has no validation split" not in caplog.text
