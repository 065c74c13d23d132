"""Hyper-parameters: defaults merged along the class hierarchy, overrides typed, unknown keys named."""

import pytest
import torch

from zoo import Episode, Method, Prediction
from zoo.errors import HyperParameterError
from zoo.method import episode_generator, resolve_hparams


class Base(Method):
    name = "base-test"
    defaults = {"steps": 3, "rho": 0.5, "loss": "ml", "mc": True}

    def meta_loss(self, episode):  # pragma: no cover - not exercised
        raise NotImplementedError

    def predict(self, episode):  # pragma: no cover
        return Prediction(torch.ones(1, 1))


class Child(Base):
    name = "child-test"
    defaults = {"steps": 5}


def test_defaults_merge_along_the_hierarchy():
    h = Child.all_defaults()
    assert h["steps"] == 5 and h["rho"] == 0.5 and h["lr"] == 1e-3


def test_string_overrides_take_the_default_type():
    h = resolve_hparams(Child, {"steps": "7", "rho": "0.25", "mc": "false", "loss": "pl"})
    assert h["steps"] == 7 and h["rho"] == 0.25 and h["mc"] is False and h["loss"] == "pl"


def test_bad_overrides_say_what_exists():
    with pytest.raises(HyperParameterError, match=r"no hyper-parameter\(s\) \['step'\].*'steps'"):
        resolve_hparams(Child, {"step": 1})
    with pytest.raises(HyperParameterError, match="steps='many' must be of type int"):
        resolve_hparams(Child, {"steps": "many"})


def test_episode_generator_depends_on_the_episode_only():
    ep = Episode(torch.zeros(1), torch.zeros(1, dtype=torch.long), torch.zeros(1),
                 torch.zeros(1, dtype=torch.long), way=1, shot=1, info={"seed": 42})
    a = torch.rand(3, generator=episode_generator(ep))
    torch.manual_seed(5)
    assert torch.equal(a, torch.rand(3, generator=episode_generator(ep)))
    assert not torch.equal(a, torch.rand(3, generator=episode_generator(ep, salt=1)))
