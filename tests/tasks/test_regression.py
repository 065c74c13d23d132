"""Regression tasks: the sampler is a pure function of its coordinates, the context is part of the
targets, the prediction checks, and the baselines' numbers make sense (the exact GP beats a
context-blind Gaussian on GP samples, and improves with context)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from zoo.baselines.regression import ConstantGaussian, ExactGP
from zoo.data.functions import load_gp_rbf, load_sinusoid
from zoo.errors import ZooError
from zoo.tasks import PredictionError
from zoo.tasks.regression import Regression, RegressionPrediction, sample_task

TASK = Regression()


def test_a_task_is_a_pure_function_of_its_coordinates_and_shared_across_context_sizes():
    family = load_sinusoid()
    a, b = sample_task(family, "test", 0, 64, 3, 4), sample_task(family, "test", 0, 64, 3, 4)
    assert torch.equal(a.target_x, b.target_x) and torch.equal(a.target_y, b.target_y)
    more = sample_task(family, "test", 0, 64, 3, 16)
    assert torch.equal(more.target_y, a.target_y)            # same function at every context size
    assert torch.equal(more.context_x, more.target_x[:16])   # the targets include the context
    assert not torch.equal(sample_task(family, "test", 1, 64, 3, 4).target_y, a.target_y)
    assert not torch.equal(sample_task(family, "val", 0, 64, 3, 4).target_y, a.target_y)


def test_sinusoid_follows_the_protocol():
    family = load_sinusoid()
    for i in range(20):
        ep = sample_task(family, "test", 0, 200, i, 0)
        f = ep.info["function"]
        assert 0.1 <= f["amplitude"] <= 5 and 0 <= f["phase"] <= np.pi
        assert ep.target_x.abs().max() <= 5
        clean = f["amplitude"] * torch.sin(ep.target_x.double() - f["phase"])
        assert float((ep.target_y.double() - clean).std()) == pytest.approx(0.25, rel=0.2)


def test_training_episodes_draw_their_context_size():
    get = TASK.episodes(load_sinusoid(), "train", {"train_targets": 16, "train_max_context": 8},
                        0, training=True)
    sizes = {len(get(i).context_y) for i in range(60)}
    assert sizes <= set(range(9)) and len(sizes) > 4


@pytest.mark.parametrize("mean, var, problem", [
    (torch.zeros(1, 7, 1), torch.ones(1, 7, 1), "shape"),
    (torch.zeros(1, 8, 1), torch.zeros(1, 8, 1), "not positive"),
    (torch.full((1, 8, 1), float("nan")), torch.ones(1, 8, 1), "non-finite"),
])
def test_malformed_predictions_are_rejected(mean, var, problem):
    episode = sample_task(load_gp_rbf(), "test", 0, 8, 5, 2)
    with pytest.raises(PredictionError, match=problem) as info:
        TASK.check(RegressionPrediction(mean, var), episode, "sloppy")
    assert "'sloppy'" in str(info.value) and "gp-rbf/test#5" in str(info.value)


def test_a_prediction_of_another_type_says_what_predict_must_return():
    episode = sample_task(load_gp_rbf(), "test", 0, 8, 5, 2)
    with pytest.raises(PredictionError) as info:
        TASK.check((torch.zeros(1, 8, 1), torch.ones(1, 8, 1)), episode, "raw")
    assert str(info.value) == (
        f"method 'raw' in episode {episode.id}: returned a tuple, not a RegressionPrediction; its "
        "predict must return RegressionPrediction(mean, var) with mean and var [samples, targets, "
        "y_dim], var > 0")


def mean_lmlhd(method, context: int, tasks: int = 30) -> float:
    family = load_gp_rbf()
    scores = []
    with torch.no_grad():
        for i in range(tasks):
            episode = sample_task(family, "test", 0, 32, i, context)
            prediction = method.predict(episode)
            TASK.check(prediction, episode, method.name)
            scores.append(TASK.score(prediction, episode)["lmlhd"])
    return float(np.mean(scores))


def test_exact_gp_beats_the_best_context_blind_gaussian_on_gp_samples():
    constant = ConstantGaussian(x_dim=1, y_dim=1)
    with torch.no_grad():  # the family's marginal: N(0, E[variance] + noise^2)
        constant.raw_sigma.fill_(float(np.log(np.expm1(np.sqrt(0.75 + 0.01)))))
    gp = ExactGP(x_dim=1, y_dim=1)
    blind = mean_lmlhd(constant, 8)
    assert mean_lmlhd(gp, 8) > blind + 20
    assert mean_lmlhd(gp, 16) > mean_lmlhd(gp, 2)


def test_gp_is_scored_by_its_exact_predictive_the_density_its_meta_loss_is():
    gp = ExactGP(x_dim=1, y_dim=1, samples=8)
    episode = sample_task(load_gp_rbf(), "test", 0, 6, 0, 3)
    loss = float(gp.meta_loss(episode).detach()) * 6
    with torch.no_grad():
        prediction = gp.predict(episode)
        TASK.check(prediction, episode, "gp")
        record = TASK.score(prediction, episode)
    assert record["exact"] and record["samples"] == 8
    assert record["lmlhd"] == pytest.approx(-loss, rel=1e-9)  # whatever the number of draws
    loc, cov = prediction.joint
    sd = cov[0].diagonal().sqrt()
    marginal = torch.distributions.Normal(loc[:, 0], sd).log_prob(episode.target_y[:, 0].double())
    assert record["nll"] == pytest.approx(float(-marginal.mean()), rel=1e-9)
    assert record["mse"] == pytest.approx(float((loc - episode.target_y).square().mean()), rel=1e-9)


def test_monte_carlo_lmlhd_of_a_correlated_gaussian_is_far_below_its_exact_density():
    """Why the exact density: 256 draws of a 64-target GP predictive with no context miss the
    typical set of its correlated Gaussian by hundreds of nats (the exact value is what the
    draws estimate)."""
    gp = ExactGP(x_dim=1, y_dim=1)
    episode = sample_task(load_sinusoid(), "test", 0, 64, 0, 0)
    with torch.no_grad():
        prediction = gp.predict(episode)
        exact = TASK.score(prediction, episode)["lmlhd"]
        prediction.joint = None
        sampled = TASK.score(prediction, episode)["lmlhd"]
    assert exact > sampled + 100


@pytest.mark.parametrize("joint, problem", [
    ((torch.zeros(8, 1), torch.eye(7)[None]), "expected"),
    ((torch.zeros(8, 1), -torch.eye(8)[None]), "not positive definite"),
    ((torch.zeros(8, 1), torch.full((1, 8, 8), float("inf"))), "non-finite joint"),
])
def test_malformed_joint_predictives_are_rejected(joint, problem):
    episode = sample_task(load_gp_rbf(), "test", 0, 8, 5, 2)
    prediction = RegressionPrediction(torch.zeros(1, 8, 1), torch.ones(1, 8, 1), joint=joint)
    with pytest.raises(PredictionError, match=problem):
        TASK.check(prediction, episode, "sloppy")


def test_a_pool_of_training_functions_is_revisited_with_fresh_orders_and_contexts():
    family, shape = load_sinusoid(), {"train_targets": 16, "train_max_context": 15,
                                      "train_tasks": 4}
    get = TASK.episodes(family, "train", shape, 0, training=True)
    a, b = get(1), get(5)
    assert a.info["task"] == b.info["task"] == 1 and a.info["order"] != b.info["order"]
    canonical = [e.target_y[torch.argsort(torch.tensor(e.info["order"]))] for e in (a, b)]
    assert torch.equal(*canonical)  # the same function's points at every visit
    assert torch.equal(a.context_y, a.target_y[:a.info["context"]])
    assert len({len(get(i).context_y) for i in range(1, 80, 4)}) > 3
    assert "train_tasks" not in TASK.shapes(Regression.settings | {"train_tasks": 0})[0]


class Bounded(ConstantGaussian):
    """A context-blind Gaussian that reports made-up evidence bounds."""

    def bounds(self, episode, samples):
        return -3.0 - samples, -1.0


def test_bounds_become_looseness_and_seeds_are_summarised_by_their_medians():
    method = Bounded(x_dim=1, y_dim=1)
    records = []
    for seed in (0, 1, 2):
        get = TASK.episodes(load_sinusoid(), "test", {"targets": 8, "context": 2,
                                                      "bound_samples": 4}, seed, False)
        for i in range(5):
            episode = get(i)
            record = TASK.score(TASK.predict(method, episode), episode) | {"seconds": 0.0}
            record["lmlhd"] = 10.0 * seed + i  # per-seed medians 2, 12, 22
            records.append(record)
    assert records[0]["looseness"] == pytest.approx(6.0) and records[0]["elbo"] == -7.0
    summary = TASK.summarise(records)
    assert summary["seeds_pooled"] == 3 and summary["looseness_median"] == pytest.approx(6.0)
    assert summary["lmlhd_seeds_median"] == pytest.approx(12.0)
    assert summary["lmlhd_seeds_p05"] == pytest.approx(np.percentile([2, 12, 22], 5))
    assert TASK.view.cell_text(summary).startswith("12.0 [3.0, 21.0]") and "loose 6" in \
        TASK.view.cell_text(summary)
    no_bounds = TASK.episodes(load_sinusoid(), "test", {"targets": 8, "context": 2}, 0, False)(0)
    assert "looseness" not in TASK.score(TASK.predict(method, no_bounds), no_bounds)


class TwoBounds(ConstantGaussian):
    """Made-up evidence bounds from two proposals: the main one and one named ``free``."""

    def bounds(self, episode, samples):
        return {"": (-3.0, -1.0), "free": (-7.0, -2.0)}


def test_named_bounds_become_a_second_looseness_column():
    get = TASK.episodes(load_sinusoid(), "test", {"targets": 8, "context": 2, "bound_samples": 4},
                        0, False)
    records = [TASK.score(TASK.predict(TwoBounds(x_dim=1, y_dim=1), get(i)), get(i))
               | {"seconds": 0.0} for i in range(3)]
    assert records[0]["looseness"] == 2.0 and records[0]["looseness_free"] == 5.0
    assert records[0]["elbo_free"] == -7.0 and records[0]["iw_bound_free"] == -2.0
    summary = TASK.summarise(records)
    assert summary["looseness_median"] == 2.0 and summary["looseness_free_median"] == 5.0


def test_named_bounds_without_a_main_pair_are_refused_with_what_to_name():
    from zoo.tasks.regression import bound_pairs

    with pytest.raises(ZooError, match="name the main one"):
        bound_pairs({"free": (-1.0, 0.0)})


def test_the_runner_lets_a_method_prepare_a_cells_test_episodes_before_predicting_them():
    from zoo.runner.evaluate import evaluate

    class Preparing(ConstantGaussian):
        def prepare(self, episodes):
            self.prepared = [e.id for e in episodes]

        def predict(self, episode):
            assert episode.id in self.prepared, "predicted before prepare"
            return super().predict(episode)

    task, family = Regression(), load_sinusoid()
    method = Preparing(x_dim=1, y_dim=1)
    shape = task.shapes(task.settings | {"context_sizes": [4]})[0]
    records = evaluate(task, method, "constant", family, shape=shape, seed=0, count=3,
                       temperature=1.0)
    assert len(records) == 3 and len(method.prepared) == 3
    assert all(r["seconds"] > 0 for r in records)
