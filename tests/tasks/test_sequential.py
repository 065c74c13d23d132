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


def gaussian_stream(held_y, steps=(0, 2)):
    return Stream(torch.zeros(2, 3), torch.zeros(2), torch.zeros(len(held_y), 3), held_y, steps)


def test_a_regression_stream_is_scored_by_the_exact_gaussian_nlpd_and_the_rmse():
    task = registry().get("tasks", "sequential")
    held_y = torch.tensor([0.5, -1.0, 2.0])
    stream = gaussian_stream(held_y)
    first = (torch.zeros(3), torch.ones(3))
    last = (torch.tensor([0.4, -0.5, 1.0], dtype=torch.float64), torch.tensor([0.5, 2.0, 0.1]))
    task.check(StreamPrediction([first, last], [1.0, 1.0]), stream, "ok")
    record = task.score(StreamPrediction([first, last], [1.0, 1.0]), stream)
    for point, (mean, var) in zip(record["curve"], (first, last)):
        normal = torch.distributions.Normal(mean.double(), var.double().sqrt())
        assert point["nlpd"] == pytest.approx(-float(normal.log_prob(held_y.double()).mean()))
        assert point["rmse"] == pytest.approx(float((held_y - mean).square().mean().sqrt()))
        assert "error" not in point and "ece" not in point
    assert record["final_rmse"] == record["curve"][-1]["rmse"]
    summary = task.summarise([record | {"seconds": 1.0}, record | {"seconds": 1.0}])
    assert summary["final_rmse"] == pytest.approx(record["final_rmse"]) and summary["rmse_ci95"] == 0
    assert "RMSE" in task.view.cell_text(summary) and "final_error" not in summary


def test_gaussian_predictions_are_checked():
    task = registry().get("tasks", "sequential")
    stream = gaussian_stream(torch.tensor([0.5, -1.0]))
    fine = (torch.zeros(2), torch.ones(2))
    for bad, reason in ((torch.full((2, 2), 0.5), "not a \\(mean, variance\\) pair"),
                        ((torch.zeros(2), torch.tensor([1.0, 0.0])), "is not positive"),
                        ((torch.zeros(3), torch.ones(3)), "shapes"),
                        ((torch.tensor([0.0, float("nan")]), torch.ones(2)), "non-finite")):
        with pytest.raises(PredictionError, match=reason):
            task.check(StreamPrediction([fine, bad], [0.0, 0.0]), stream, "sloppy")


def test_the_diabetes_stream_is_standardised_on_the_validation_pool_and_its_splits_are_disjoint():
    """(The values read are scikit-learn's ``load_diabetes(scaled=False)``: the loader checks their
    SHA-256, computed from those arrays.)"""
    from zoo.data.streams import load_diabetes_stream

    data = load_diabetes_stream()
    assert data.regression and data.dim == 10 and data.y.is_floating_point()
    assert (len(data.pool), len(data.held_out), len(data.val_pool), len(data.val_held_out)) == \
        (353, 89, 264, 89)
    for pool, held in ((data.pool, data.held_out), (data.val_pool, data.val_held_out)):
        assert not set(pool.tolist()) & set(held.tolist())
    assert not set(data.val_held_out.tolist()) & set(data.held_out.tolist())
    basis = torch.cat([data.x, data.y[:, None]], 1)[data.val_pool].double()
    assert torch.allclose(basis.mean(0), torch.zeros(11, dtype=torch.float64), atol=1e-6)
    assert torch.allclose(basis.std(0), torch.ones(11, dtype=torch.float64), atol=1e-6)


def test_diabetes_files_that_read_differently_are_refused(monkeypatch):
    from zoo.data import streams
    from zoo.errors import ChecksumError

    monkeypatch.setattr(streams, "DIABETES_SHA256", "0" * 64)
    with pytest.raises(ChecksumError, match="reinstall scikit-learn"):
        streams.load_diabetes_stream()


def test_online_blr_is_the_batch_posterior_and_classifiers_refuse_real_targets():
    from zoo.data.streams import load_diabetes_stream
    from zoo.errors import ZooError

    reg = registry()
    data = load_diabetes_stream()
    blr = reg.get("methods", "online-blr")(dim=10, classes=0, prior_var=0.7, noise_var=0.3)
    order = data.pool[torch.randperm(len(data.pool), generator=torch.Generator().manual_seed(0))]
    state = blr.init()
    for i in order[:60]:
        state = blr.update(state, data.x[i], data.y[i])
    phi = torch.cat([data.x[order[:60]].double(), torch.ones(60, 1, dtype=torch.float64)], 1)
    precision = torch.eye(11, dtype=torch.float64) / 0.7 + phi.T @ phi / 0.3
    cov = torch.linalg.inv(precision)
    mean = cov @ phi.T @ data.y[order[:60]].double() / 0.3
    assert torch.allclose(state[0], mean, atol=1e-10) and torch.allclose(state[1], cov, atol=1e-10)
    test_phi = torch.cat([data.x[:5].double(), torch.ones(5, 1, dtype=torch.float64)], 1)
    m, v = blr.predict(state, data.x[:5])
    assert torch.allclose(m, test_phi @ mean)
    assert torch.allclose(v, 0.3 + (test_phi @ cov * test_phi).sum(1))
    with pytest.raises(ZooError, match="real-valued.*online-blr"):
        reg.get("methods", "online-logreg")(dim=10, classes=0)
    with pytest.raises(ZooError, match="regression stream"):
        reg.get("methods", "online-blr")(dim=64, classes=10)
