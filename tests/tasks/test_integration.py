"""Integration tasks: closed-form truths checked by Monte Carlo, the Monte Carlo baseline's error
rate, and the variance-reduction factor."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from zoo.baselines.integration import MonteCarlo
from zoo.data.integrands import load_gaussian_cosine, load_genz_oscillatory
from zoo.tasks.integration import IntegralEstimate, Integration, sample_integrand

TASK = Integration()


@pytest.mark.parametrize("load", [load_gaussian_cosine, load_genz_oscillatory])
def test_closed_form_truth_agrees_with_a_large_monte_carlo(load):
    family = load(dim=3)
    for i in range(3):
        episode = sample_integrand(family, "test", 0, 400_000, i)
        fx = episode.problem.fx
        stderr = float(fx.std()) / math.sqrt(len(fx))
        assert abs(float(fx.mean()) - episode.truth) < 5 * stderr


def test_tasks_are_a_pure_function_of_their_coordinates():
    family = load_gaussian_cosine(dim=2)
    a, b = sample_integrand(family, "test", 0, 50, 7), sample_integrand(family, "test", 0, 50, 7)
    assert torch.equal(a.problem.x, b.problem.x) and a.truth == b.truth
    assert sample_integrand(family, "val", 0, 50, 7).truth != a.truth


def rmse_of_mc(samples: int, tasks: int = 300) -> float:
    family, mc = load_gaussian_cosine(dim=2), MonteCarlo(dim=2)
    records = []
    for i in range(tasks):
        episode = sample_integrand(family, "test", 0, samples, i)
        records.append(TASK.score(mc.estimate(episode.problem), episode) | {"seconds": 0.0})
    return TASK.summarise(records)["rmse"]


def test_monte_carlo_error_shrinks_like_one_over_sqrt_n():
    ratio = rmse_of_mc(16) / rmse_of_mc(1024)
    assert 6 < ratio < 11  # sqrt(64) = 8


def test_variance_reduction_factor_of_monte_carlo_against_itself_is_one():
    family, mc = load_genz_oscillatory(dim=2), MonteCarlo(dim=2)
    records = []
    for i in range(20):
        episode = sample_integrand(family, "test", 0, 30, i)
        records.append(TASK.score(mc.estimate(episode.problem), episode) | {"seconds": 0.0})
    assert TASK.summarise(records)["vrf"] == pytest.approx(1.0, rel=1e-12)
    # an estimator with half the error has a factor of four
    halved = [r | {"error": r["mc_error"] / 2} for r in records]
    assert TASK.summarise(halved)["vrf"] == pytest.approx(4.0, rel=1e-12)


def test_monte_carlo_standard_error_is_calibrated():
    family, mc = load_gaussian_cosine(dim=2), MonteCarlo(dim=2)
    z = []
    for i in range(400):
        episode = sample_integrand(family, "test", 1, 200, i)
        est = mc.estimate(episode.problem)
        z.append((est.value - episode.truth) / est.stderr)
    assert np.std(z) == pytest.approx(1.0, abs=0.1)


def test_non_finite_estimate_is_rejected_naming_the_method_and_task():
    episode = sample_integrand(load_gaussian_cosine(), "test", 0, 10, 3)
    with pytest.raises(Exception, match=r"'bad'.*gaussian-cosine/test#3"):
        TASK.check(IntegralEstimate(math.nan), episode, "bad")
