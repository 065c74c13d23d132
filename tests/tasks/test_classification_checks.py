"""Every classification prediction is checked before it is scored: a malformed one is an error
naming the method and the episode, never a number in the results."""

from __future__ import annotations

import pytest
import torch

from zoo.method import Prediction
from zoo.tasks import PredictionError
from zoo.tasks.classification import Classification
from zoo.testing import toy_episode

TASK = Classification()


@pytest.fixture
def episode():
    return toy_episode(3, 1, query=2)


def test_a_proper_prediction_passes(episode):
    TASK.check(Prediction(torch.softmax(torch.randn(6, 3), -1)), episode, "ok")


@pytest.mark.parametrize("probs, problem", [
    (torch.full((6, 3), 2 / 3), "sums to 1"),                       # rows summing to 2
    (torch.full((6, 4), 0.25), r"shape \(6, 4\), expected"),        # [Q, way + 1]
    (torch.full((5, 3), 1 / 3), r"shape \(5, 3\)"),                  # a query missing
    (torch.tensor([[1.5, -0.5, 0.0]] * 6), "negative"),
    (torch.tensor([[float("nan"), 0.5, 0.5]] * 6), "non-finite"),
])
def test_malformed_predictions_are_rejected(episode, probs, problem):
    with pytest.raises(PredictionError, match=problem) as info:
        TASK.check(Prediction(probs), episode, "sloppy")
    assert "'sloppy'" in str(info.value) and episode.id in str(info.value)
    assert "zoo.Prediction(probs)" in str(info.value)


def test_float32_softmax_rounding_is_within_tolerance(episode):
    logits = 30 * torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    TASK.check(Prediction(torch.softmax(logits.float(), -1)), episode, "ok")
    with pytest.raises(PredictionError):
        TASK.check(Prediction(torch.full((6, 3), 1 / 3 + 1e-3)), episode, "off")
