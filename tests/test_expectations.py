"""Gaussian-expectation estimators (:mod:`zoo.expectations`) against closed forms and each other."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.episode import Episode
from zoo.errors import HyperParameterError, UnknownNameError
from zoo.expectations import (
    GaussHermiteEstimator,
    MonteCarloEstimator,
    PerPoint,
    SobolEstimator,
    build_estimator,
    standard_normal_draws,
)
from zoo.families.latent_gaussian import ESTIMATORS as NAMED
from zoo.plugins import registry
from zoo.seeds import draw_seed, episode_generator, episode_own_seed

DTYPE = torch.float64
ESTIMATORS = [SobolEstimator(samples=512), MonteCarloEstimator(samples=512),
              GaussHermiteEstimator(nodes=6)]


def softmax(f: torch.Tensor) -> torch.Tensor:
    return torch.softmax(f, -1)


def marginals(Q: int = 4, C: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(Q, C, generator=g, dtype=DTYPE),
            0.2 + torch.rand(Q, C, generator=g, dtype=DTYPE))


def normal_moment(k: int, m: float, v: float) -> float:
    """``E[f^k]`` for ``f ~ N(m, v)``: ``sum_j C(k, j) m^(k-j) v^(j/2) (j-1)!!`` over even ``j``."""
    return sum(math.comb(k, j) * m ** (k - j) * v ** (j // 2) * math.prod(range(j - 1, 0, -2))
               for j in range(0, k + 1, 2))


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: e.name)
def test_expected_softmax_rows_sum_to_one(estimator):
    mean, var = marginals()
    probs = estimator.expect(softmax, mean, var, seed=3).value
    assert probs.shape == (4, 3)
    assert torch.allclose(probs.sum(-1), torch.ones(4, dtype=DTYPE), atol=1e-14, rtol=0)


@pytest.mark.parametrize("nodes", [1, 3, 7])
def test_gauss_hermite_is_exact_for_polynomials_up_to_degree_2n_minus_1(nodes):
    m, v = 0.7, 1.9
    mean, var = torch.tensor([[m]], dtype=DTYPE), torch.tensor([[v]], dtype=DTYPE)
    est = GaussHermiteEstimator(nodes=nodes)
    for k in range(2 * nodes):
        got = float(est.expect(lambda f, k=k: f[..., 0] ** k, mean, var).value)
        assert got == pytest.approx(normal_moment(k, m, v), rel=1e-11, abs=1e-11)
    k = 2 * nodes  # one degree more is not exact
    got = float(est.expect(lambda f: f[..., 0] ** k, mean, var).value)
    assert abs(got - normal_moment(k, m, v)) > 1e-6


def test_gauss_hermite_product_rule_is_exact_for_products_of_coordinates():
    mean = torch.tensor([[0.3, -1.1]], dtype=DTYPE)
    var = torch.tensor([[0.5, 2.0]], dtype=DTYPE)
    got = GaussHermiteEstimator(nodes=4).expect(lambda f: f[..., 0] ** 3 * f[..., 1] ** 4,
                                                 mean, var).value
    assert float(got) == pytest.approx(normal_moment(3, 0.3, 0.5) * normal_moment(4, -1.1, 2.0),
                                       rel=1e-12)


def test_sobol_and_monte_carlo_converge_to_a_high_order_gauss_hermite_answer():
    mean, var = marginals(Q=3, C=3, seed=1)
    exact = GaussHermiteEstimator(nodes=30).expect(softmax, mean, var).value
    sobol = SobolEstimator(samples=4096).expect(softmax, mean, var, seed=2).value
    assert (sobol - exact).abs().max() < 1e-3
    mc = MonteCarloEstimator(samples=2**15).expect(softmax, mean, var, seed=2)
    assert mc.stderr is not None and (mc.stderr > 0).all()
    assert ((mc.value - exact).abs() < 5 * mc.stderr).all()
    coarse = SobolEstimator(samples=64).expect(softmax, mean, var, seed=2).value
    assert (sobol - exact).abs().max() < (coarse - exact).abs().max()


def test_antithetic_sobol_is_exact_for_odd_functions():
    zero = torch.zeros(5, 3, dtype=DTYPE)
    var = 0.5 + torch.rand(5, 3, dtype=DTYPE, generator=torch.Generator().manual_seed(0))
    odd = SobolEstimator(samples=100).expect(lambda f: f**3 + torch.sin(f), zero, var, seed=4)
    assert odd.value.abs().max() < 1e-14
    even = SobolEstimator(samples=100).expect(lambda f: f**2, zero, var, seed=4)
    assert even.value.abs().min() > 0.1  # not vacuous


@pytest.mark.parametrize("estimator", [SobolEstimator(samples=32), MonteCarloEstimator(samples=32),
                                       GaussHermiteEstimator(nodes=4)], ids=lambda e: e.name)
def test_gradients_in_mean_and_variance_pass_gradcheck(estimator):
    mean, var = marginals(Q=2, C=3, seed=5)
    m, v = mean.requires_grad_(), var.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, b: estimator.expect(softmax, a, b, seed=1).value, (m, v))


def test_estimators_are_registered_and_built_from_specs():
    assert {"sobol", "mc", "gauss-hermite"} <= set(registry().names("estimators"))
    assert build_estimator("sobol[samples=64]", NAMED, samples=256) == SobolEstimator(samples=64)
    assert build_estimator("sobol", NAMED, samples=256) == SobolEstimator(samples=256)
    assert build_estimator("gauss-hermite", NAMED, samples=256) == GaussHermiteEstimator()
    with pytest.raises(HyperParameterError, match="no option"):
        build_estimator("gauss-hermite[samples=3]", NAMED)
    with pytest.raises(UnknownNameError, match="estimator"):
        build_estimator("simpson", NAMED)
    with pytest.raises(HyperParameterError, match="positive"):
        SobolEstimator(samples=0)
    # the learned state the method binds is not a spec option: refused when the spec is built
    with pytest.raises(HyperParameterError, match=r"no option\(s\) \['state'\]"):
        build_estimator("meta-cv[state=1]", NAMED)


def test_sobol_draws_are_antithetic_and_standard():
    z = standard_normal_draws(4096, 3, seed=0)
    assert z.shape == (4096, 3)
    assert torch.allclose(z.mean(0), torch.zeros(3, dtype=DTYPE), atol=1e-12)  # antithetic
    assert torch.allclose(z.var(0), torch.ones(3, dtype=DTYPE), atol=0.01)
    assert torch.equal(z, standard_normal_draws(4096, 3, seed=0))


def test_episode_seed_keeps_the_historical_streams():
    empty = torch.zeros(0)
    episode = Episode(empty, empty, empty, empty, way=2, shot=1, info={"seed": 2**40 + 12345})
    assert episode_own_seed(episode) == (2**40 + 12345) % 2**31
    expected = int(torch.randint(0, 2**62, (1,), generator=episode_generator(episode, 2)))
    assert draw_seed(episode, salt=2) == expected != draw_seed(episode, salt=1)


def test_a_methods_estimator_is_chosen_by_spec_and_checked_at_build():
    from zoo.testing import build_for_tests, toy_episode

    episode = toy_episode(3, 2)
    default = build_for_tests("dkt", 3).eval()
    coarse = build_for_tests("dkt", 3, estimator="sobol[samples=8]").eval()
    quadrature = build_for_tests("dkt", 3, estimator="gauss-hermite[nodes=12]").eval()
    with torch.no_grad():
        p_default, p_coarse, p_quad = (m.predict(episode).probs for m in (default, coarse, quadrature))
    assert not torch.equal(p_default, p_coarse)
    assert (p_default - p_quad).abs().max() < 2e-3  # 512 Sobol points vs 12^3-point quadrature
    with pytest.raises(UnknownNameError, match="unknown estimator 'simpson'"):
        build_for_tests("dkt", 3, estimator="simpson")
    with pytest.raises(HyperParameterError, match="no option"):
        build_for_tests("md-bfsc", 3, estimator="sobol[nodes=4]")


def test_per_point_link_in_blocks_is_bit_identical_to_the_whole_rule(monkeypatch):
    """:class:`PerPoint` (block by block of points, several blocks here, a leading batch axis, a
    transposed view) gives exactly the numbers and gradients of the rule on all points at once."""
    import zoo.expectations as expectations

    monkeypatch.setattr(expectations, "BLOCK_ELEMENTS", 3 * 16 * 4)  # 3 points per block
    g = torch.Generator().manual_seed(2)
    mean = torch.randn(2, 4, 11, generator=g, dtype=torch.float64).requires_grad_()
    var = torch.rand(2, 4, 11, generator=g, dtype=torch.float64).requires_grad_()
    rule = SobolEstimator(samples=16).rule(4, seed=1)
    weights = torch.randn(2, 11, 4, generator=g, dtype=torch.float64)
    results = []
    for link in (softmax, PerPoint(softmax)):
        out = rule.expect(link, mean.transpose(-1, -2), var.transpose(-1, -2))
        results.append((out, *torch.autograd.grad((out * weights).sum(), (mean, var))))
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)
