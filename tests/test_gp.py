"""The stable site-form GP algebra against dense reference formulas (float64)."""

import math

import pytest
import torch
from torch.distributions import MultivariateNormal, kl_divergence

from zoo import gp
from zoo.errors import NumericalError
from zoo.jitter import JitterPolicy


@pytest.fixture(autouse=True)
def float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def rbf(x, y, ell=1.0):
    return torch.exp(-0.5 * torch.cdist(x, y) ** 2 / ell**2)


@pytest.fixture
def problem():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 2, generator=g, dtype=torch.float64)
    xs = torch.randn(4, 2, generator=g, dtype=torch.float64)
    lam = torch.rand(7, generator=g, dtype=torch.float64) * 3 + 0.1
    nu = torch.randn(7, generator=g, dtype=torch.float64)
    return x, xs, lam, nu


def dense_posterior(K, lam, nu):
    """Sigma = (I + K Lam)^-1 K and m = Sigma nu: no inverse of K, valid for singular K."""
    A = torch.eye(K.shape[-1]) + K * lam[..., None, :]
    Sigma = torch.linalg.solve(A, K)
    return Sigma @ nu, Sigma


def test_posterior_matches_dense_formula(problem):
    x, _, lam, nu = problem
    K = rbf(x, x) + 1e-6 * torch.eye(7)
    post = gp.SitePosterior(K, lam, nu)
    m, S = dense_posterior(K, lam, nu)
    assert torch.allclose(post.mean, m, atol=1e-10)
    assert torch.allclose(post.cov, S, atol=1e-10)
    assert torch.allclose(post.var, torch.diagonal(S), atol=1e-10)
    # and the textbook form with K^-1 where K is invertible
    S2 = torch.linalg.inv(torch.linalg.inv(K) + torch.diag(lam))
    assert torch.allclose(S, S2, atol=1e-6)


def test_posterior_with_rank_deficient_kernel():
    """Cosine kernel on 3-d features for 9 points: rank 3; the B-form must stay exact."""
    g = torch.Generator().manual_seed(1)
    z = torch.nn.functional.normalize(torch.randn(9, 3, generator=g), dim=-1)
    K = z @ z.T
    assert torch.linalg.matrix_rank(K) == 3
    lam, nu = torch.rand(9, generator=g) + 0.5, torch.randn(9, generator=g)
    post = gp.SitePosterior(K, lam, nu)
    m, S = dense_posterior(K, lam, nu)
    assert torch.allclose(post.mean, m, atol=1e-10)
    assert torch.allclose(post.cov, S, atol=1e-10)
    assert post.kl_to_prior().isfinite()


def test_empty_sites_leave_the_prior(problem):
    x, _, lam, nu = problem
    K = rbf(x, x)
    post = gp.SitePosterior(K, torch.zeros(7), torch.zeros(7))
    assert torch.allclose(post.mean, torch.zeros(7))
    assert torch.allclose(post.cov, K, atol=1e-12)
    assert torch.allclose(post.kl_to_prior(), torch.tensor(0.0), atol=1e-12)


def test_predictive_equals_gp_regression_with_site_pseudo_data(problem):
    """Gaussian sites (lam, nu) are GP regression on y = nu / lam with noise 1 / lam."""
    x, xs, lam, nu = problem
    K, Kxs, kss = rbf(x, x), rbf(x, xs), torch.ones(4)
    mean, var = gp.SitePosterior(K, lam, nu).predict(Kxs, kss)
    A = K + torch.diag(1 / lam)
    ref_mean = Kxs.T @ torch.linalg.solve(A, nu / lam)
    ref_var = kss - torch.diagonal(Kxs.T @ torch.linalg.solve(A, Kxs))
    assert torch.allclose(mean, ref_mean, atol=1e-10)
    assert torch.allclose(var, ref_var, atol=1e-10)


def test_kl_to_prior_matches_torch_distributions(problem):
    x, _, lam, nu = problem
    K = rbf(x, x) + 1e-3 * torch.eye(7)
    post = gp.SitePosterior(K, lam, nu)
    ref = kl_divergence(MultivariateNormal(post.mean, post.cov), MultivariateNormal(torch.zeros(7), K))
    assert torch.allclose(post.kl_to_prior(), ref, rtol=1e-8)


def test_batched_over_classes_equals_one_at_a_time(problem):
    x, xs, lam, nu = problem
    K = torch.stack([rbf(x, x, ell) for ell in (0.5, 1.0, 2.0)])
    lam3, nu3 = torch.stack([lam, 2 * lam, lam / 2]), torch.stack([nu, -nu, nu * 0.3])
    batched = gp.SitePosterior(K, lam3, nu3)
    for c in range(3):
        single = gp.SitePosterior(K[c], lam3[c], nu3[c])
        assert torch.allclose(batched.mean[c], single.mean)
        assert torch.allclose(batched.kl_to_prior()[c], single.kl_to_prior())


def test_gaussian_log_marginal_matches_mvn(problem):
    x, _, _, nu = problem
    K = rbf(x, x)
    ref = MultivariateNormal(torch.zeros(7), K + 0.1 * torch.eye(7)).log_prob(nu)
    assert torch.allclose(gp.gaussian_log_marginal(K, nu, 0.1), ref)


def test_jitter_is_counted_and_bounded():
    policy = JitterPolicy()
    singular = torch.ones(4, 4)  # rank 1, zero pivots: Cholesky fails without jitter
    L = policy.cholesky(singular)
    assert policy.uses >= 1 and torch.isfinite(L).all()
    with pytest.raises(NumericalError, match="not positive definite"):
        JitterPolicy(max_tries=3).cholesky(-torch.eye(3))
    with pytest.raises(NumericalError, match="episode glyphs/test#4"):
        policy.cholesky(torch.full((2, 2), math.nan), episode="glyphs/test#4")


def test_prior_draws_a_few_at_a_time_equal_one_batch(monkeypatch):
    """The dense route's draws ``root z`` taken a few draws at a time (bounded memory: the square
    root is broadcast over the draws) are the one-batch draws, bit for bit."""
    import zoo.gp

    A = torch.randn(4, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    K = A @ A.mT
    whole = zoo.gp.prior_draws(K, 25, torch.Generator().manual_seed(1))
    monkeypatch.setattr(zoo.gp, "PRIOR_DRAW_ELEMENTS", 4 * 6 * 6 * 3)  # 3 draws at a time
    assert torch.equal(zoo.gp.prior_draws(K, 25, torch.Generator().manual_seed(1)), whole)
    assert whole.shape == (25, 4, 6)


@pytest.mark.parametrize("dim", [6, 64, 200])  # 64 and 200: LAPACK's blocked factorisation
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_entry_anywhere_in_the_lower_triangle_is_refused(dim, bad):
    """The policy finds non-finite entries on the factor's diagonal (``factorised``), not by
    reading ``A``: a NaN or infinity at any position the factorisation reads (the lower triangle,
    diagonal included; every position at 6 rows, a spread of them at 64 and 200), in any matrix of
    a batch, is refused as non-finite, never returned as a factor or taken for a jitter case."""
    g = torch.Generator().manual_seed(dim)
    X = torch.randn(3, dim, 2 * dim, dtype=torch.float64, generator=g)
    A = X @ X.mT / dim + torch.eye(dim, dtype=torch.float64)
    rows, cols = torch.tril_indices(dim, dim)
    picks = range(len(rows)) if dim == 6 else torch.randperm(len(rows), generator=g)[:25].tolist()
    for k in [*picks, len(rows) - 1]:  # the last pivot too
        i, j = int(rows[k]), int(cols[k])
        bad_A = A.clone()
        bad_A[1, i, j] = bad_A[1, j, i] = bad
        policy = JitterPolicy()
        with pytest.raises(NumericalError, match="non-finite entries"):
            policy.cholesky(bad_A, episode="glyphs/test#4")
        assert policy.uses == 0
    L = JitterPolicy().cholesky(A)
    assert torch.allclose(L @ L.mT, A)
