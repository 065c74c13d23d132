import numpy as np
import pytest
import torch
import zoo_logistic_softmax
from torch.distributions import Gamma, MultivariateNormal, Poisson
from zoo_logistic_softmax import LogisticSoftmax, _log_cosh

from zoo import Episode
from zoo.inference import dense, prior_draws, sample_polyagamma
from zoo.kernels import RBFKernel
from zoo.testing import IdentityBackbone, check_algebra_routes, check_method, line_episode

D = torch.float64


def method(**hp):
    return LogisticSoftmax(IdentityBackbone(1), way=2, kernel=RBFKernel(1, lengthscale=0.8,
                                                                outputscale=2.0), **hp)


def setup(m):
    ep = line_episode()
    K = m.kernel_matrices(ep).Kss.detach()
    return ep, K, m.onehot(ep).T


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_mean_field_elbo_never_decreases(tau):
    m = method(tau=tau)
    ep, K, y = setup(m)
    _, _, trace = m.mean_field(K, y, 40, ep)
    assert all(b >= a - 1e-10 for a, b in zip(trace, trace[1:])), trace
    assert trace[-1] > trace[0]


def test_closed_form_elbo_equals_a_monte_carlo_estimate_of_the_same_bound():
    m = method(tau=0.7)
    ep, K, y = setup(m)
    post, mf, _ = m.mean_field(K, y, 2, ep)
    mf.c = mf.c * 1.3  # away from the optimum, so every term of the bound is exercised
    with torch.no_grad():
        closed = float(m.elbo(post, y, mf))
    S, tau, C = 200_000, 0.7, 2
    g = torch.Generator().manual_seed(0)
    qf = MultivariateNormal(post.mean.detach(), post.cov.detach())
    pf = MultivariateNormal(torch.zeros_like(post.mean), K)
    f = qf.sample((S,))  # [S, C, N]
    torch.manual_seed(0)
    lam = Gamma(mf.alpha, torch.full_like(mf.alpha, C)).sample((S,))  # [S, N]
    n = Poisson(mf.gamma).sample((S,))
    b = y + n
    w = sample_polyagamma(b, mf.c.expand_as(b), g)
    gg = f / tau
    log_joint = (Poisson(lam[:, None, :]).log_prob(n) - b * np.log(2) + (y - n) * gg / 2
                 - w * gg**2 / 2).sum((-2, -1))
    log_q_aux = (Gamma(mf.alpha, torch.full_like(mf.alpha, C)).log_prob(lam).sum(-1)
                 + Poisson(mf.gamma).log_prob(n).sum((-2, -1)))
    # log PG(w | b, 0) - log PG(w | b, c) = -b log cosh(c/2) + c^2 w / 2
    pg_ratio = (-b * _log_cosh(mf.c / 2) + mf.c**2 * w / 2).sum((-2, -1))
    terms = log_joint - log_q_aux + pg_ratio + (pf.log_prob(f) - qf.log_prob(f)).sum(-1)
    mc, se = float(terms.mean()), float(terms.std() / S**0.5)
    assert abs(mc - closed) < 4 * se, (mc, closed, se)


def exact_posterior_mean(K, y, tau, draws=400_000):
    """E[f | y] by importance sampling from the prior (Monte Carlo integration)."""
    g = torch.Generator().manual_seed(1)
    L = torch.linalg.cholesky(K + 1e-10 * torch.eye(K.shape[-1], dtype=D))
    f = (L @ torch.randn(draws, *K.shape[:-1], 1, generator=g, dtype=D))[..., 0]  # [S, C, N]
    s = torch.sigmoid(f / tau)
    logw = (torch.log((s * y).sum(-2) / s.sum(-2))).sum(-1)
    w = torch.softmax(logw, 0)
    mean = (w[:, None, None] * f).sum(0)
    var = (w[:, None, None] * (f - mean) ** 2).sum(0)
    return mean, var, 1 / (w**2).sum()


def test_gibbs_matches_the_exact_posterior_by_numerical_integration():
    m = method(tau=0.8, chains=3000)
    ep, K, y = setup(m)
    _, _, f, _ = m.gibbs(K, y, 25, ep, torch.Generator().manual_seed(2))
    mean, var, ess = exact_posterior_mean(K, y, 0.8)
    se = (var / f.shape[0]).sqrt() + (var / ess).sqrt()
    assert ((f.mean(0) - mean).abs() < 4 * se).all(), (f.mean(0), mean, se)
    assert ((f.var(0) - var).abs() < 0.1 * var).all(), (f.var(0), var)


@pytest.mark.parametrize("inference", ["mean-field", "gibbs"])
@pytest.mark.parametrize("loss", ["ml", "pl"])
def test_losses_train_the_kernel_and_predict_sums_to_one(inference, loss):
    m = method(inference=inference, loss=loss, chains=4)
    ep = line_episode()
    value = m.meta_loss(ep)
    value.backward()
    assert torch.isfinite(value) and m.kernel.raw_lengthscale.grad is not None
    m.eval()
    with torch.no_grad():
        pred = m.predict(ep)
    assert torch.allclose(pred.probs.sum(-1), torch.ones(1))
    assert len(pred.extras["inner_objective"]) == (30 if inference == "mean-field" else 50)


def test_bad_hyper_parameters_are_errors():
    for hp in ({"inference": "ep"}, {"loss": "elbo"}, {"tau": 0.0}):
        with pytest.raises(ValueError, match="method 'logistic-softmax': hyper-parameter"):
            method(**hp)


def test_conformance():
    check_method("logistic-softmax", settings=((2, 1), (5, 5)))
    check_method("logistic-softmax", settings=((2, 1), (5, 5)), inference="gibbs")
    check_method("logistic-softmax", settings=((20, 5),), mf_test_steps=5)
    check_method("logistic-softmax", settings=((20, 5),), inference="gibbs", chains=4,
                 gibbs_test_steps=5)


@pytest.mark.slow
def test_conformance_defaults_gibbs():
    """The defaults with Gibbs inference (the defaults themselves, mean-field, are the core's
    conformance test)."""
    check_method("logistic-softmax", inference="gibbs")


@pytest.mark.parametrize("inference", ["mean-field", "gibbs"])
def test_feature_route_equals_dense_route(monkeypatch, inference):
    """Mean field and Gibbs on the feature route; Gibbs chains start from the same prior draws."""
    monkeypatch.setattr(zoo_logistic_softmax, "prior_draws",
                        lambda K, n, g: prior_draws(dense(K), n, g))
    check_algebra_routes(LogisticSoftmax, "query_predictive", inference=inference, gibbs_test_steps=3,
                         chains=2, pg_sampler="torch")
def test_probabilities_equal_an_independent_predictive_and_monte_carlo():
    """The mean-field posterior's Gaussian sites (captured), the class predictives by dense
    algebra (numpy) and Monte Carlo of the logistic-softmax, against the method's prediction."""
    g = torch.Generator().manual_seed(0)
    sx, qx = torch.randn(6, 2, generator=g), torch.randn(3, 2, generator=g)
    sy = torch.tensor([0, 1, 2, 0, 1, 2])
    ep = Episode(sx, sy, qx, torch.tensor([0, 1, 2]), way=3, shot=2, info={"seed": 4})
    method = LogisticSoftmax(IdentityBackbone(2), way=3, kernel=RBFKernel(2),
                             inference="mean-field", tau=0.5).eval()
    sites = []
    posterior = method.posterior

    def capture(K, lam, nu, episode):
        sites.append((lam.detach().double().numpy(), nu.detach().double().numpy()))
        return posterior(K, lam, nu, episode)

    method.posterior = capture
    with torch.no_grad():
        probs = method.predict(ep).probs.double().numpy()
    lam, nu = sites[-1]  # [C, n]: the final posterior's sites
    X, Z = sx.double().numpy(), qx.double().numpy()

    def k(a, b):
        return np.exp(-0.5 * ((a[:, None] - b[None]) ** 2).sum(-1))

    K, Ks = k(X, X), k(X, Z)
    rng = np.random.default_rng(1)
    f = np.empty((200_000, 3, 3))
    for c in range(3):
        cov = np.linalg.inv(np.linalg.inv(K) + np.diag(lam[c]))  # q(f_c) on the support
        m = cov @ nu[c]
        A = np.linalg.solve(K, Ks)
        mean = A.T @ m
        var = 1 - np.einsum("nq,nq->q", Ks, A) + np.einsum("nq,nm,mq->q", A, cov, A)
        f[:, :, c] = mean + np.sqrt(var) * rng.standard_normal((200_000, 3))
    s = 1 / (1 + np.exp(-f / 0.5))
    mc = (s / s.sum(-1, keepdims=True)).mean(0)
    assert np.allclose(probs, mc, atol=3e-3), (probs, mc)
