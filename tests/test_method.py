"""Hyper-parameters: declarations merged along the class hierarchy, values converted and checked
once (type, choices, range) with one wording, unknown keys named; every registered method's
declarations accept its own defaults."""

import json
import re

import pytest
import torch

from zoo import Episode, Method, Prediction
from zoo.errors import HyperParameterError
from zoo.hparams import HParam, resolve_hparams
from zoo.plugins import registry
from zoo.seeds import episode_generator


class Base(Method):
    name = "base-test"
    hyperparameters = {
        "steps": HParam(3, ge=0, doc="inner steps"),
        "rho": HParam(0.5, gt=0, le=1, doc="step size"),
        "loss": HParam("ml", choices=("ml", "pl")),
        "mc": True,  # shorthand: a bare default
        "inner_lr": HParam(None, type=float, ge=0),
    }

    def meta_loss(self, episode):  # pragma: no cover - not exercised
        raise NotImplementedError

    def predict(self, episode):  # pragma: no cover
        return Prediction(torch.ones(1, 1))


class Child(Base):
    name = "child-test"
    hyperparameters = {"steps": HParam(5, ge=1)}


def rejected(given: dict, *fragments: str) -> None:
    """``given`` is refused with the one wording: method, key=value, what is allowed, remedy."""
    with pytest.raises(HyperParameterError) as info:
        resolve_hparams(Child, given)
    message = str(info.value)
    for fragment in ("method 'child-test': hyper-parameter", "--set child-test.", *fragments):
        assert fragment in message, message


def test_declarations_merge_along_the_hierarchy():
    h = Child.all_defaults()
    assert h["steps"] == 5 and h["rho"] == 0.5 and h["lr"] == 1e-3 and h["mc"] is True
    assert Child.all_hparams()["steps"].ge == 1 and Base.all_hparams()["steps"].ge == 0


def test_string_values_take_the_declared_type():  # --set lr=0.01, zoo train --set, the Python API
    h = resolve_hparams(Child, {"steps": "7", "rho": "0.25", "mc": "false", "loss": "pl",
                                "lr": "0.01", "inner_lr": "0.2"})
    assert (h["steps"], h["rho"], h["mc"], h["loss"], h["lr"], h["inner_lr"]) == (
        7, 0.25, False, "pl", 0.01, 0.2)


def test_values_of_the_right_type_are_kept_as_given():
    h = resolve_hparams(Child, {"rho": 1, "inner_lr": None})  # TOML's 1 for a float stays 1
    assert type(h["rho"]) is int and h["inner_lr"] is None


def test_wrong_type_is_refused():
    rejected({"steps": "many"}, "steps='many'", "an int >= 1", "default 5")
    rejected({"steps": 2.5}, "steps=2.5", "an int")
    rejected({"mc": "maybe"}, "mc='maybe'", "a bool")
    rejected({"steps": True}, "steps=True", "an int")
    rejected({"rho": None}, "rho=None", "a float > 0 and <= 1")


def test_value_outside_the_choices_is_refused():
    rejected({"loss": "elbo"}, "loss='elbo'", "one of 'ml', 'pl'", "default 'ml'")


def test_value_outside_the_range_is_refused():
    rejected({"rho": 1.5}, "rho=1.5", "a float > 0 and <= 1")
    rejected({"rho": 0}, "rho=0", "> 0")
    rejected({"steps": 0}, "steps=0", ">= 1")  # the child's bound, not the base's
    rejected({"rho": float("nan")}, "rho=nan")


def test_unknown_key_is_refused_with_the_known_ones():
    with pytest.raises(HyperParameterError,
                       match=r"method 'child-test': no hyper-parameter\(s\) \['step'\].*'steps'"):
        resolve_hparams(Child, {"step": 1})


def test_old_style_defaults_are_an_error_that_says_what_to_declare():
    class Old(Base):
        name = "old-test"
        defaults = {"x": 1}

    with pytest.raises(TypeError, match="hyperparameters"):
        Old.all_defaults()


def test_describe_is_plain_json():
    table = Child.describe_hparams()
    assert json.loads(json.dumps(table)) == table
    assert table["loss"]["choices"] == ["ml", "pl"] and table["steps"]["default"] == 5
    assert table["rho"]["allowed"] == "a float > 0 and <= 1" and table["rho"]["doc"] == "step size"


METHODS = sorted(registry().items("methods"))


@pytest.mark.parametrize("name", METHODS)
def test_every_method_declares_valid_documented_defaults(name):
    cls = registry().get("methods", name)
    for key, spec in cls.all_hparams().items():
        assert spec.doc, f"{name}: hyper-parameter {key!r} has no doc; give HParam(..., doc=...)"
        assert re.fullmatch(r"[a-z][a-z0-9_]*", key), f"{name}: {key!r} is not snake_case"
        assert spec.check(spec.default, method=name, key=key) == spec.default
    assert resolve_hparams(cls, {}) == cls.all_defaults()


def test_zoo_methods_json_prints_the_declarations(capsys):
    from zoo.cli import main

    assert main(["methods", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["protonet"]["hparams"]["lr"] == registry().get("methods", "protonet") \
        .describe_hparams()["lr"]


def test_meta_batch_is_read_from_the_method():
    class Plain(Base):
        name = "plain-test"

    method = Plain(torch.nn.Identity(), way=2)
    assert method.meta_batch == 1


def test_episode_generator_depends_on_the_episode_only():
    ep = Episode(torch.zeros(1), torch.zeros(1, dtype=torch.long), torch.zeros(1),
                 torch.zeros(1, dtype=torch.long), way=1, shot=1, info={"seed": 42})
    a = torch.rand(3, generator=episode_generator(ep))
    torch.manual_seed(5)
    assert torch.equal(a, torch.rand(3, generator=episode_generator(ep)))
    assert not torch.equal(a, torch.rand(3, generator=episode_generator(ep, salt=1)))
