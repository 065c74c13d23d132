"""The float64 GP algebra (``zoo.gp``) against the textbook formulas in 50-digit arithmetic.

A GP with six training points and Gaussian sites of unequal precisions: the posterior at the
training points and the predictive at three test points as heteroscedastic GP regression on the
pseudo-targets ``nu / lam`` with noise variances ``1 / lam`` (Rasmussen & Williams eqs. 2.22-2.24,
``C = (K + Lambda^-1)^-1``: mean ``K C nu / lam``, covariance ``K - K C K``; the zoo factorises
``B = I + S K S`` instead, so a singular ``K`` is allowed), and the log marginal likelihood
``log N(y | 0, K + noise I)``, all computed by mpmath from the very float64 inputs the zoo gets;
by the dense route (RBF kernel) and the feature-factor route (``K = Phi Phi^T`` with four features
for six points: a singular ``K``).
"""

import mpmath
import pytest
import torch

from zoo.gp import SitePosterior, gaussian_log_marginal
from zoo.gram import FeatureGram

N, M, D = 6, 3, 4
LENGTHSCALE, SCALE, NOISE = 0.8, 1.5, 0.05


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N + M, D, generator=g, dtype=torch.float64)
    x[N:] = x[:M] + 0.3 * x[N:]  # test points near training points: a predictive far from the prior
    lam = 0.5 + 20 * torch.rand(N, generator=g, dtype=torch.float64)
    nu = lam * torch.randn(N, generator=g, dtype=torch.float64)
    y = torch.randn(N, generator=g, dtype=torch.float64)
    return x, lam, nu, y


def _mp(t):
    return mpmath.matrix([[mpmath.mpf(float(v)) for v in row] for row in t.reshape(len(t), -1)])


def _rbf(a, b):
    def k(u, v):
        d2 = sum((u[i] - v[i]) ** 2 for i in range(D))
        return SCALE * mpmath.exp(-d2 / (2 * mpmath.mpf(LENGTHSCALE) ** 2))
    return mpmath.matrix([[k(a[i, :], b[j, :]) for j in range(b.rows)] for i in range(a.rows)])


def _linear(a, b):
    return a * b.T


@mpmath.workdps(50)
def _exact(kernel, x, lam, nu, y):
    """Posterior mean and variances, predictive mean and variances, log marginal (mpmath)."""
    X, Xs = _mp(x[:N]), _mp(x[N:])
    K, Ks, Kss = kernel(X, X), kernel(X, Xs), kernel(Xs, Xs)
    lam, nu, y = _mp(lam), _mp(nu), _mp(y)
    C = (K + mpmath.diag([1 / lam[i] for i in range(N)])) ** -1
    pseudo = mpmath.matrix([nu[i] / lam[i] for i in range(N)])
    Sigma = K - K * C * K
    mean = K * C * pseudo
    pred_mean = Ks.T * C * pseudo
    pred_cov = Kss - Ks.T * C * Ks
    Ky = K + NOISE * mpmath.eye(N)
    log_ml = (-(y.T * Ky ** -1 * y)[0] / 2 - mpmath.log(mpmath.det(Ky)) / 2
              - N * mpmath.log(2 * mpmath.pi) / 2)
    return ([mean[i] for i in range(N)], [Sigma[i, i] for i in range(N)],
            [pred_mean[i] for i in range(M)], [pred_cov[i, i] for i in range(M)], log_ml)


def _close(ours, exact, tol=1e-13):
    exact = torch.tensor([float(v) for v in exact], dtype=torch.float64)
    torch.testing.assert_close(ours.reshape(exact.shape), exact, rtol=0,
                               atol=tol * float(exact.abs().max()))


@pytest.mark.parametrize("seed", [0, 1])
def test_dense_route_agrees_with_50_digit_formulas(seed):
    x, lam, nu, y = _inputs(seed)
    mean, var, pmean, pvar, log_ml = _exact(_rbf, x, lam, nu, y)
    K = SCALE * torch.exp(-0.5 * torch.cdist(x, x).pow(2) / LENGTHSCALE**2)
    post = SitePosterior(K[:N, :N], lam, nu)
    _close(post.mean, mean)
    _close(post.var, var)
    m, v = post.predict(K[:N, N:], torch.full((M,), SCALE, dtype=torch.float64))
    _close(m, pmean)
    _close(v, pvar)
    _close(gaussian_log_marginal(K[:N, :N], y, NOISE), [log_ml])


@pytest.mark.parametrize("seed", [0, 1])
def test_feature_route_agrees_with_50_digit_formulas(seed):
    x, lam, nu, y = _inputs(seed)
    mean, var, pmean, pvar, log_ml = _exact(_linear, x, lam, nu, y)
    phi, phi_s = x[:N], x[N:]
    post = SitePosterior(FeatureGram.of(phi), lam, nu)
    assert type(post).__name__ == "FeatureSitePosterior"
    _close(post.mean, mean)
    _close(post.var, var)
    m, v = post.predict(FeatureGram(phi, phi_s), phi_s.pow(2).sum(-1))
    _close(m, pmean)
    _close(v, pvar)
    _close(gaussian_log_marginal(FeatureGram.of(phi), y, NOISE), [log_ml])
