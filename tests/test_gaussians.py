"""The Gaussian families against dense matrices and ``torch.distributions`` (float64, small
sizes): log density, entropy, KL, variances, sampling moments, natural <-> moment round trips,
the Kronecker determinant, and the three predictives on a linear model."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import MultivariateNormal
from torch.distributions import kl_divergence as torch_kl

from zoo.gaussians import (
    DiagonalGaussian,
    FullGaussian,
    KroneckerGaussian,
    LowRankPrecisionGaussian,
    kl_divergence,
    kron,
    predictive,
)

DT = torch.float64
N_ROW, N_COL = 2, 3
P = N_ROW * N_COL
BATCH = (2,)


def spd(n: int, g: torch.Generator, batch: tuple[int, ...] = ()) -> torch.Tensor:
    X = torch.randn(*batch, n, n + 2, generator=g, dtype=DT)
    return X @ X.mT / n + 0.3 * torch.eye(n, dtype=DT)


def member(family: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(*BATCH, P, generator=g, dtype=DT)
    if family == "full-moment":
        return FullGaussian.from_moments(mean, spd(P, g, BATCH))
    if family == "full-natural":
        return FullGaussian.from_precision(mean, spd(P, g, BATCH))
    if family == "diagonal":
        return DiagonalGaussian(mean, torch.rand(*BATCH, P, generator=g, dtype=DT) + 0.2)
    if family == "low-rank":
        return LowRankPrecisionGaussian(mean, torch.rand(*BATCH, P, generator=g, dtype=DT) + 0.5,
                                        torch.randn(*BATCH, P, 2, generator=g, dtype=DT))
    return KroneckerGaussian.from_moments(mean.unflatten(-1, (N_ROW, N_COL)),
                                          spd(N_ROW, g, BATCH), spd(N_COL, g, BATCH))


FAMILIES = ["full-moment", "full-natural", "diagonal", "low-rank", "kronecker"]


def dense(q) -> MultivariateNormal:
    return MultivariateNormal(q.mean, covariance_matrix=q.covariance())


@pytest.mark.parametrize("family", FAMILIES)
def test_closed_forms_match_torch_distributions(family):
    q = member(family, 0)
    ref = dense(q)
    x = torch.randn(4, *BATCH, P, generator=torch.Generator().manual_seed(1), dtype=DT)
    assert torch.allclose(q.log_prob(x), ref.log_prob(x), atol=1e-10)
    assert torch.allclose(q.entropy(), ref.entropy(), atol=1e-10)
    assert torch.allclose(q.variance(), torch.diagonal(q.covariance(), dim1=-2, dim2=-1))
    assert torch.allclose(q.precision() @ q.covariance(), torch.eye(P, dtype=DT), atol=1e-10)
    V = torch.randn(*BATCH, 4, P, generator=torch.Generator().manual_seed(2), dtype=DT)
    ref_var = torch.diagonal(V @ q.covariance() @ V.mT, dim1=-2, dim2=-1)
    assert torch.allclose(q.projected_variance(V), ref_var, atol=1e-10)


@pytest.mark.parametrize("family", FAMILIES)
def test_kl_same_family_matches_dense_and_vanishes_at_equality(family):
    q, p = member(family, 0), member(family, 1)
    assert torch.allclose(kl_divergence(q, p), torch_kl(dense(q), dense(p)), atol=1e-10)
    assert torch.allclose(q.kl(q), torch.zeros(BATCH, dtype=DT), atol=1e-10)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("prior", ["diagonal", "full-moment", "low-rank"])
def test_kl_across_families_matches_dense(family, prior):
    q, p = member(family, 2), member(prior, 3)
    assert torch.allclose(kl_divergence(q, p), torch_kl(dense(q), dense(p)), atol=1e-10)


@pytest.mark.parametrize("family", FAMILIES)
def test_natural_round_trip(family):
    q = member(family, 4)
    back = type(q).from_natural(*q.natural())
    assert torch.allclose(back.mean, q.mean, atol=1e-10)
    assert torch.allclose(back.covariance(), q.covariance(), atol=1e-10)
    eta1 = q.natural()[0]
    assert torch.allclose(eta1, (q.precision() @ q.mean[..., None])[..., 0], atol=1e-10)


def test_full_natural_parameters_and_both_parameterisations_agree():
    q = member("full-moment", 5)
    eta1, eta2 = q.natural()
    assert torch.allclose(-2 * eta2, q.precision())
    nat = q.to_natural()
    assert nat.parameterisation == "natural"
    assert torch.allclose(nat.covariance(), q.covariance(), atol=1e-10)
    assert torch.allclose(nat.to_moment().scale() @ nat.to_moment().scale().mT, q.covariance())
    assert torch.allclose(nat.scale() @ nat.scale().mT, q.covariance(), atol=1e-10)


def test_diagonal_natural_parameters_are_the_univariate_ones():
    q = member("diagonal", 6)
    eta1, eta2 = q.natural()
    assert torch.allclose(eta1, q.mean / q.var) and torch.allclose(eta2, -0.5 / q.var)


def test_kronecker_determinant_is_det_a_to_the_m_times_det_b_to_the_n():
    """For ``A`` ``n x n`` and ``B`` ``m x m``, ``det(A (x) B) = det(A)^m det(B)^n`` (the notes'
    Eq. 3 has the exponents swapped, which is wrong whenever ``n != m``)."""
    g = torch.Generator().manual_seed(7)
    A, B = spd(N_ROW, g), spd(N_COL, g)
    K = kron(A, B)
    assert torch.allclose(K, torch.kron(A, B))
    right = N_COL * torch.logdet(A) + N_ROW * torch.logdet(B)
    wrong = N_ROW * torch.logdet(A) + N_COL * torch.logdet(B)
    assert torch.allclose(torch.logdet(K), right)
    assert not torch.allclose(torch.logdet(K), wrong)
    q = KroneckerGaussian.from_moments(torch.zeros(N_ROW, N_COL, dtype=DT), A, B)
    assert torch.allclose(q.logdet_cov(), right)


@pytest.mark.parametrize("family", FAMILIES)
def test_samples_have_the_family_moments(family):
    q = member(family, 8)
    x = q.sample(100_000, generator=torch.Generator().manual_seed(9))
    assert x.shape == (100_000, *BATCH, P)
    assert torch.allclose(x.mean(0), q.mean, atol=0.03)
    d = x - q.mean
    emp = torch.einsum("s...i,s...j->...ij", d, d) / x.shape[0]
    assert torch.allclose(emp, q.covariance(), atol=0.05 * q.covariance().abs().max().item())


def test_samples_are_reparameterised():
    mean = torch.zeros(P, dtype=DT, requires_grad=True)
    L = torch.eye(P, dtype=DT).requires_grad_()
    FullGaussian.from_scale_tril(mean, L).sample(3).sum().backward()
    assert mean.grad is not None and L.grad is not None


def test_predictives_on_a_linear_gaussian_model():
    """For ``f(theta) = H theta`` the linearised predictive is the MC predictive (same draws),
    and the MC mean of ``f`` is ``H mean``; plug-in is ``f(mean)``."""
    g = torch.Generator().manual_seed(10)
    H = torch.randn(3, P, generator=g, dtype=DT)
    q = FullGaussian.from_moments(torch.randn(P, generator=g, dtype=DT), spd(P, g))
    draws = torch.randn(4000, P, generator=g, dtype=DT)
    f = lambda th: H @ th  # noqa: E731
    probs = lambda th: torch.softmax(H @ th, -1)  # noqa: E731
    assert torch.allclose(predictive.plugin(f, q), H @ q.mean)
    mc = predictive.monte_carlo(probs, q, draws)
    lin = predictive.linearised(f, q, draws)
    assert torch.allclose(mc, lin, atol=1e-12)
    assert math.isclose(mc.sum().item(), 1.0)
    assert torch.allclose(predictive.monte_carlo(f, q, draws), H @ q.mean, atol=0.15)


def test_linearised_predictive_uses_the_jacobian_at_the_mean():
    """A nonlinear ``f``: the linearised predictive equals ``link(f(mu) + J delta)`` with ``J``
    by ``torch.func.jacrev``."""
    g = torch.Generator().manual_seed(11)
    W = torch.randn(3, P, generator=g, dtype=DT)
    f = lambda th: torch.tanh(W @ th) * 2  # noqa: E731
    q = DiagonalGaussian(torch.randn(P, generator=g, dtype=DT), torch.full((P,), 0.1, dtype=DT))
    draws = torch.randn(50, P, generator=g, dtype=DT)
    J = torch.func.jacrev(f)(q.mean)
    deltas = q.transform(draws) - q.mean
    ref = torch.softmax(f(q.mean) + deltas @ J.T, -1).mean(0)
    assert torch.allclose(predictive.linearised(f, q, draws), ref, atol=1e-12)
