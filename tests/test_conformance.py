"""Every registered component, whichever plugin provides it, passes the same checks
(:mod:`zoo.testing`): every classification method (``check_method``: probabilities [Q, way]
summing to one, deterministic predictions for a fixed episode, a finite meta-loss that reaches the
backbone, at 2-way 1-shot and 20-way 5-shot), every kernel (``check_kernel``), and every built-in
data set that needs no download (``check_dataset``)."""

import pytest
import torch
from zoo_protonet import ProtoNet

from zoo import Prediction
from zoo.data import TensorDataset
from zoo.kernels import RBFKernel
from zoo.plugins import registry
from zoo.testing import check_dataset, check_kernel, check_method

METHODS = sorted(n for n, cls in registry().items("methods").items()
                 if cls.task == "classification")


@pytest.mark.parametrize("name", METHODS)
def test_method_conforms(name):
    check_method(name)


@pytest.mark.parametrize("name", sorted(registry().names("kernels")))
def test_kernel_conforms(name):
    check_kernel(name)


def test_glyphs_conforms(glyphs):
    check_dataset(glyphs)


def test_digits_conforms():
    check_dataset("digits")


class WrongDiagonal(RBFKernel):
    def base_diag(self, x):
        return 2 * super().base_diag(x)


def test_a_kernel_whose_diagonal_disagrees_is_caught():
    with pytest.raises(AssertionError, match="gram_diag.*differs from the diagonal"):
        check_kernel(WrongDiagonal)


def test_overlapping_splits_are_caught():
    images, labels = torch.rand(12, 1, 8, 8), torch.arange(4).repeat_interleave(3)
    ds = TensorDataset("overlap", images, labels, list("abcd"), {"train": [0, 1], "test": [1, 2]})
    with pytest.raises(AssertionError, match="'b' is in splits 'train' and 'test'"):
        check_dataset(ds, way=2, shot=1, query=1)


class GlobalNoise(ProtoNet):
    """Adds noise drawn from the global RNG to its probabilities."""

    name = "global-noise"

    def predict(self, episode):
        probs = super().predict(episode).probs
        noisy = probs + 0.01 * torch.rand(probs.shape, dtype=probs.dtype)
        return Prediction(noisy / noisy.sum(-1, keepdim=True))


class Drifting(ProtoNet):
    """Each call predicts a little differently from the last (state kept between calls)."""

    name = "drifting"

    def predict(self, episode):
        self.calls = getattr(self, "calls", 0) + 1
        probs = super().predict(episode).probs
        drifted = probs + 0.01 * self.calls * torch.arange(probs.shape[-1], dtype=probs.dtype)
        return Prediction(drifted / drifted.sum(-1, keepdim=True))


@pytest.mark.parametrize("cls", [GlobalNoise, Drifting])
def test_a_method_whose_predictions_are_not_repeatable_is_caught(cls):
    reg = registry()
    reg.register("methods", cls.name, cls, owner="tests")
    try:
        with pytest.raises(AssertionError, match="predict depends on the global RNG state"):
            check_method(cls.name, settings=((2, 1),))
    finally:
        reg.unregister("methods", cls.name)
