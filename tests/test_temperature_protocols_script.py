"""``benchmarks/gp_calibration/temperature_protocols.py``: each protocol's temperature is the
NLL-fitted one of the queries it names, and its ECE is that of the tempered probabilities."""

from __future__ import annotations

import pytest
import torch

from zoo.metrics import calibrated_confidence, ece_mce, fit_temperature

from .conftest import load_benchmark


def load():
    return load_benchmark("gp_calibration/temperature_protocols.py")


def flat_predictions(g, n, classes=5):
    """Right 80% of the time with a largest probability near 0.3: under-confident, like a GP."""
    y = torch.randint(0, classes, (n,), generator=g)
    logits = 0.2 * torch.randn(n, classes, generator=g, dtype=torch.float64)
    right = torch.rand(n, generator=g) < 0.8
    logits[torch.arange(n), torch.where(right, y, (y + 1) % classes)] += 0.6
    return logits.softmax(1), y


def test_each_protocol_fits_on_the_queries_it_names_and_scores_the_same_queries():
    g = torch.Generator().manual_seed(0)
    probs, y = flat_predictions(g, 600)
    fit_probs, fit_y = flat_predictions(g, 600)
    rows = load().protocol_eces(probs, y, 0.7, fit_probs, fit_y)
    correct = (probs.argmax(1) == y).double().numpy()
    other = fit_temperature(fit_probs.log(), fit_y)
    own = fit_temperature(probs.log(), y)
    expected = {"raw": 1.0, "validation temperature (the zoo)": 0.7,
                "test-split temperature, other episodes (DKT's code)": other,
                "test-split temperature, in-sample": own}
    assert set(rows) == set(expected)
    for name, t in expected.items():
        ece = ece_mce(calibrated_confidence(probs, t).numpy(), correct)[0]
        assert rows[name][0] == pytest.approx((t,), rel=1e-12)
        assert rows[name][1] == pytest.approx(ece, rel=1e-12)
    assert own < 1 and other < 1  # an under-confident predictive is sharpened
    assert rows["test-split temperature, in-sample"][1] < rows["raw"][1]


def latent_gaussian(g, n, classes=5, draws=64):
    """Latent marginals of ``n`` queries, right 80% of the time and flat after the softmax, and
    ``T -> E[softmax(f / T)]`` from fixed draws (what MD-BFSC's likelihood temperature does)."""
    y = torch.randint(0, classes, (n,), generator=g)
    mean = 0.2 * torch.randn(n, classes, generator=g, dtype=torch.float64)
    right = torch.rand(n, generator=g) < 0.8
    mean[torch.arange(n), torch.where(right, y, (y + 1) % classes)] += 0.6
    var = torch.full_like(mean, 0.5)
    eps = torch.randn(draws, n, classes, generator=g, dtype=torch.float64)
    return (lambda t: torch.softmax((mean + var.sqrt() * eps) / t, -1).mean(0)), y


def test_the_batched_ece_of_many_temperatures_is_the_zoos_ece_of_each():
    g = torch.Generator().manual_seed(1)
    probs, y = flat_predictions(g, 500)
    correct = probs.argmax(1) == y
    temperatures = torch.tensor([0.05, 0.2, 0.5, 1.0, 1.7], dtype=torch.float64)
    eces = load().ece_per_temperature(probs, correct, temperatures)
    for t, e in zip(temperatures.tolist(), eces.tolist()):
        assert e == pytest.approx(
            ece_mce(calibrated_confidence(probs, t).numpy(), correct.double().numpy())[0],
            abs=1e-12)


def test_md_bfsc_grid_is_its_codes_and_the_search_keeps_the_smallest_validation_ece():
    module = load()
    grid = module.MD_BFSC_GRID
    assert len(grid) == 260 and grid[0] == 0.05 and grid[59] == pytest.approx(0.345)
    assert grid[60] == 1.0 and grid[-1] == pytest.approx(1.995)
    g = torch.Generator().manual_seed(2)
    at, y = latent_gaussian(g, 400)
    small = (0.1, 0.2, 0.3, 1.0, 1.5)
    t_lik, t_ece, best = module.md_bfsc_temperatures(at, y, small)
    brute = {}
    for a in small:  # every pair, scored by the zoo's ECE
        p = at(a)
        right = (p.argmax(1) == y).double().numpy()
        for b in small:
            brute[a, b] = ece_mce(calibrated_confidence(p, b).numpy(), right)[0]
    assert best == pytest.approx(min(brute.values()), abs=1e-12)
    assert brute[t_lik, t_ece] == pytest.approx(best, abs=1e-12)
    assert best < brute[1.0, 1.0]  # the flat predictive is sharpened


def test_md_bfsc_row_scores_the_test_queries_at_the_validation_pair():
    module = load()
    g = torch.Generator().manual_seed(3)
    test_at, y = latent_gaussian(g, 300)
    val_at, val_y = latent_gaussian(g, 300)
    fit_probs, fit_y = flat_predictions(g, 300)
    grid = module.MD_BFSC_GRID[::13]   # every 13th of the code's grid: both sides search the same
    rows = module.protocol_eces(test_at(1.0), y, 0.5, fit_probs, fit_y, (test_at, val_at, val_y),
                                grid=grid)
    (t_lik, t_ece), ece = rows["T_lik, T_ece grid-searched on validation by ECE (MD-BFSC's code)"]
    assert (t_lik, t_ece) == module.md_bfsc_temperatures(val_at, val_y, grid)[:2]
    p = test_at(t_lik)
    right = (p.argmax(1) == y).double().numpy()
    assert ece == pytest.approx(ece_mce(calibrated_confidence(p, t_ece).numpy(), right)[0],
                                rel=1e-12)


class Latent:
    """A latent-Gaussian method's shape: predict -> probabilities(mean, var) once per episode."""

    def __init__(self, route=True):
        self.route = route
        self.eps = torch.randn(32, 1, 3, generator=torch.Generator().manual_seed(4),
                               dtype=torch.float64)

    def probabilities(self, mean, var, *, seed):
        return torch.softmax(mean + var.sqrt() * self.eps, -1).mean(0)

    def predict(self, episode):
        from types import SimpleNamespace

        mean, var = episode
        probs = self.probabilities(mean, var, seed=0) if self.route else torch.softmax(mean, -1)
        return SimpleNamespace(probs=probs)


def test_the_likelihood_temperature_divides_the_latent_draws_and_needs_the_marginals():
    module = load()
    g = torch.Generator().manual_seed(5)
    episodes = [(torch.randn(4, 3, generator=g, dtype=torch.float64),
                 torch.rand(4, 3, generator=g, dtype=torch.float64)) for _ in range(3)]
    method = Latent()
    probs, at = module.latent_probabilities(method, episodes)
    assert "probabilities" not in vars(method)  # the method is left as it was
    torch.testing.assert_close(at(1.0), probs)
    t = 0.3
    draws = torch.cat([torch.softmax((m + v.sqrt() * method.eps) / t, -1).mean(0)
                       for m, v in episodes])
    torch.testing.assert_close(at(t), draws)
    assert module.latent_probabilities(Latent(route=False), episodes)[1] is None
