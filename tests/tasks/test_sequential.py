"""The sequential kind's curve: metrics after each evaluation step and the wall time so far."""

import pytest
import torch

from zoo.plugins import registry
from zoo.tasks import PredictionError
from zoo.tasks.sequential import Stream, StreamPrediction


def test_curve_points_carry_the_wall_time_of_the_updates_so_far_and_are_averaged():
    task = registry().get("tasks", "sequential")
    held_y = torch.tensor([0, 1])
    stream = Stream(torch.zeros(3, 2), torch.zeros(3, dtype=torch.long), torch.zeros(2, 2), held_y,
                    (0, 2, 3))
    probs = [torch.tensor([[0.5, 0.5], [0.5, 0.5]]), torch.tensor([[0.8, 0.2], [0.2, 0.8]]),
             torch.tensor([[1.0, 0.0], [0.0, 1.0]])]
    record = task.score(StreamPrediction(probs, [1.0, 2.0, 4.0]), stream)
    assert [p["update_seconds"] for p in record["curve"]] == [0.0, 3.0, 7.0]
    nlpd = [p["nlpd"] for p in record["curve"]]
    assert torch.allclose(torch.tensor(nlpd), -torch.tensor([0.5, 0.8, 1.0]).log())
    other = task.score(StreamPrediction(probs, [3.0, 0.0, 0.0]), stream)
    summary = task.summarise([record | {"seconds": 1.0}, other | {"seconds": 1.0}])
    assert [p["update_seconds"] for p in summary["curve"]] == [0.0, 3.0, 5.0]


def test_predictions_are_checked_by_the_classification_rule():
    """The stream's check is classification's (:func:`zoo.tasks.base.probabilities_problem`):
    round-off below 0 passes, a row off the simplex is refused with its reason and the stream."""
    task = registry().get("tasks", "sequential")
    held_y = torch.tensor([0, 1])
    stream = Stream(torch.zeros(2, 2), torch.zeros(2, dtype=torch.long), torch.zeros(2, 2), held_y,
                    (0, 2))
    fine = torch.tensor([[1.0 + 1e-17, -1e-17], [0.0, 1.0]], dtype=torch.float64)
    task.check(StreamPrediction([fine, fine], [0.0, 0.0]), stream, "ok")
    for bad, reason in ((torch.tensor([[0.9, 0.2], [0.0, 1.0]]), "sums to 1"),
                        (torch.tensor([[1.1, -0.1], [0.0, 1.0]]), "negative probabilities"),
                        (torch.tensor([[float("nan"), 1.0], [0.0, 1.0]]), "non-finite")):
        with pytest.raises(PredictionError, match=reason):
            task.check(StreamPrediction([fine, bad], [0.0, 0.0]), stream, "sloppy")
