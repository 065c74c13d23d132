"""The control-variate integrand families: truths against large Monte Carlo (and, for the
boundary-value family, against a finite-difference solve of the ODE), and every control-variate
method of the integration kind on them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.linalg import solve_banded

from zoo.control_variates.methods import METHODS
from zoo.data.integrands import (
    BOREHOLE_MEAN,
    BOREHOLE_TRUTH,
    BOREHOLE_VAR,
    borehole,
    bvp_weight,
    load_borehole,
    load_bvp,
    load_genz_oscillatory,
    load_south,
    load_step,
)
from zoo.tasks.integration import Integration, IntegrationProblem, sample_integrand

TASK = Integration()


@pytest.mark.parametrize("load", [load_south, load_step, load_bvp])
def test_truths_agree_with_a_large_monte_carlo(load):
    family = load()
    episode = sample_integrand(family, "test", 0, 400_000, 0)
    for p, truth in [(episode.problem, episode.truth)] + [
            (r, None) for r in episode.problem.related]:
        fx = p.fx
        if truth is None:  # related integrals: the family's documented truths
            truth = {"south": 3.0, "step": 0.5}[family.name]
        assert abs(float(fx.mean()) - truth) < 5 * float(fx.std()) / math.sqrt(len(fx))


def test_borehole_truth_is_the_quadrature_value_under_the_variance_reading():
    g = torch.Generator().manual_seed(0)
    mean = torch.tensor(BOREHOLE_MEAN, dtype=torch.float64)
    sd = torch.tensor(BOREHOLE_VAR, dtype=torch.float64).sqrt()
    z = torch.randn(1_000_000, 8, generator=g, dtype=torch.float64)
    pair = 0.5 * (borehole(mean + sd * z) + borehole(mean - sd * z))  # antithetic
    stderr = float(pair.std()) / math.sqrt(len(pair))
    assert abs(float(pair.mean()) - BOREHOLE_TRUTH) < 4 * stderr
    assert stderr < 0.01  # far tighter than the thesis's 72.8904 +- 0.033


@pytest.mark.parametrize("a", [1e-6, 0.3, 1.0])
def test_bvp_weight_is_the_finite_difference_solution(a):
    n = 2000
    s = np.linspace(0, 1, n + 1)
    h = 1 / n
    c = 1 + a * (s[:-1] + s[1:]) / 2  # c at the midpoints
    bands = np.zeros((3, n - 1))
    bands[0, 1:], bands[1], bands[2, :-1] = -c[1:-1], c[:-1] + c[1:], -c[1:-1]
    u = solve_banded((1, 1), bands / h**2, np.ones(n - 1))
    assert bvp_weight(a) == pytest.approx(u.sum() * h, rel=1e-5)


def test_linear_field_cv_solves_the_bvp_family_exactly():
    """``f = 50 W x^2`` and ``L'[theta x] = theta (1 - x^2)``: the affine-field CV (``degree=2``,
    the potential's degree; degree 1 in the field's, the notes' wording) is exact: rounding level
    without the ridge (whose shrinkage alone leaves ~1e-6 at the default)."""
    method = next(m for m in METHODS if m.name == "poly-cv")(dim=1, degree=2, ridge=0.0)
    for i in range(5):
        episode = sample_integrand(load_bvp(), "test", 0, 10, i)
        assert method.estimate(episode.problem).value == pytest.approx(episode.truth, abs=1e-12)


FAST = {"neural-cv": {"epochs": 2, "width": 8}, "meta-cv": {"width": 8},
        "vv-cv": {"steps": 20}}


@pytest.mark.parametrize("cls", METHODS, ids=lambda c: c.name)
@pytest.mark.parametrize("load", [load_south, load_borehole,
                                  lambda: load_genz_oscillatory(dim=2)])
def test_every_method_estimates_every_family(cls, load):
    family = load()
    method = cls(dim=family.dim, **FAST.get(cls.name, {}))
    episode = sample_integrand(family, "test", 0, 20, 0)
    prediction = TASK.predict(method, episode)
    TASK.check(prediction, episode, cls.name)
    assert abs(prediction.value - episode.truth) < 10 * abs(episode.truth) + 1


@pytest.mark.slow
def test_closed_form_cvs_beat_monte_carlo_on_the_south_pair():
    family = load_south()
    records = {name: [] for name in ("poly-cv", "control-functional", "vv-cv")}
    for i in range(10):
        episode = sample_integrand(family, "test", 0, 50, i)
        for cls in METHODS:
            if cls.name in records:
                p = cls(dim=1).estimate(episode.problem)
                records[cls.name].append(TASK.score(p, episode) | {"seconds": 0.0})
    for name, rows in records.items():
        assert TASK.summarise(rows)["vrf"] > 2, name


@pytest.mark.parametrize("name", ["neural-cv", "meta-cv", "control-functional"])
@pytest.mark.parametrize("load", [load_south, lambda: load_genz_oscillatory(dim=2)])
def test_batched_estimates_equal_each_problem_alone(name, load):
    """The runner's batched path (one fit over the cell's problems, each from its own seed)
    gives every problem the estimate it gets alone, to rounding."""
    family = load()
    cls = next(m for m in METHODS if m.name == name)
    method = cls(dim=family.dim, **FAST.get(name, {}))
    problems = [sample_integrand(family, "test", 0, 12, i).problem for i in range(5)]
    together = method.estimate_batch(problems)
    for problem, batched in zip(problems, together):
        alone = method.estimate(problem)
        assert batched.value == pytest.approx(alone.value, rel=1e-12, abs=1e-12)
        assert batched.stderr == pytest.approx(alone.stderr, rel=1e-9, abs=1e-12)


def test_learned_b_fits_batched_equal_each_problem_alone():
    """vv-cv with a learned B fits a cell's problems in one Adam run (each its own Gram matrix and
    B); every estimate and B equals the problem's fit alone."""
    family = load_south()
    method = next(m for m in METHODS if m.name == "vv-cv")(dim=1, coupling="learned", steps=10)
    problems = [sample_integrand(family, "test", 0, 12, i).problem for i in range(3)]
    with torch.no_grad():  # as the runner evaluates
        together = method.estimate_batch(problems)
    for problem, batched in zip(problems, together):
        alone = method.estimate(problem)
        assert batched.value == pytest.approx(alone.value, rel=1e-10, abs=1e-10)
        assert batched.stderr == pytest.approx(alone.stderr, rel=1e-8, abs=1e-10)
        torch.testing.assert_close(torch.tensor(batched.extras["B"]),
                                   torch.tensor(alone.extras["B"]), rtol=1e-10, atol=1e-10)


def test_the_runner_hands_out_each_prepared_estimate_once():
    family = load_south()
    method = next(m for m in METHODS if m.name == "neural-cv")(dim=1, **FAST["neural-cv"])
    get = lambda i: sample_integrand(family, "test", 0, 12, i)  # noqa: E731
    TASK.prepare(method, get, range(3))
    episode = get(1)
    assert method.prepared(episode.problem) is not None
    assert method.prepared(episode.problem) is None  # taken: a later call fits it again
    assert TASK.predict(method, episode).value == method.estimate(episode.problem).value
    assert method.prepared(get(3).problem) is None  # not prepared


@pytest.mark.parametrize("name", ["neural-cv", "meta-cv"])
def test_standardised_neural_cvs_are_equivariant_to_the_integrands_scale(name):
    """With ``standardise`` the estimate of ``a f + b`` is ``a`` times that of ``f`` plus ``b``
    (and the standard error ``a`` times), whatever the optimiser's step size."""
    family = load_borehole()
    cls = next(m for m in METHODS if m.name == name)
    method = cls(dim=family.dim, standardise=True, field="vector", **FAST[name])
    problem = sample_integrand(family, "test", 0, 12, 0).problem
    moved = IntegrationProblem(problem.x, 30.0 * problem.fx - 7.0, problem.score, problem.info)
    base, other = method.estimate(problem), method.estimate(moved)
    assert other.value == pytest.approx(30.0 * base.value - 7.0, rel=1e-9)
    assert other.stderr == pytest.approx(30.0 * base.stderr, rel=1e-9)
