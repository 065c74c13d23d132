"""The BONG family's formulas, each against an independent derivation."""

import itertools

import pytest
import torch
from torch.func import grad, hessian, jacrev
from zoo_bong.beliefs import (
    FAMILIES,
    BeliefError,
    DiagLowRank,
    DiagMoment,
    DiagNatural,
    FullMoment,
    FullNatural,
    prior_belief,
    project_low_rank,
)
from zoo_bong.curvature import Curvature, linearised, monte_carlo
from zoo_bong.likelihoods import Categorical, Gaussian
from zoo_bong.rules import RULES, TRACTABLE, check_combination, update

from zoo.gaussians import DiagonalGaussian

P, C = 4, 2


def natural_gradient_step(log_partition, expected_log_lik, psi, alpha: float = 1.0):
    """BONG's step for any exponential family ``q_psi(theta) = exp(psi^T T(theta) - Phi(psi))``
    by automatic differentiation: ``psi + alpha F(psi)^-1 grad_psi expected_log_lik(rho(psi))``
    with the mean parameter ``rho = grad Phi`` and the Fisher matrix ``F = hess Phi`` (Jones et al.
    2024, eq. 3/5). For a conjugate likelihood it is Bayes' rule ``psi + lambda(y)`` (Prop. 4.1),
    which the Gaussian families of :mod:`zoo_bong.beliefs` compute in closed form."""
    def objective(p):
        return expected_log_lik(grad(log_partition)(p))

    fisher = hessian(log_partition)(psi)
    return psi + alpha * torch.linalg.solve(fisher, grad(objective)(psi))


@pytest.fixture(autouse=True)
def float64():
    """The exactness checks run in float64; the default is restored for every other module."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def linear_gaussian(n: int = 6, seed: int = 0):
    """``y_t = H_t theta + N(0, R)``: rows ``H_t [C, P]`` flattened into ``x_t``."""
    gen = torch.Generator().manual_seed(seed)
    hs = torch.randn(n, C, P, generator=gen)
    noise = torch.tensor([[0.5, 0.1], [0.1, 0.3]])
    theta = torch.randn(P, generator=gen)
    ys = hs @ theta + torch.randn(n, C, generator=gen) @ torch.linalg.cholesky(noise).T
    return hs.reshape(n, -1), ys, Gaussian(noise)


def linear_model(theta, x):
    return x.reshape(C, P) @ theta


def estimator(kind, lik, x, y, seed=0, samples=64):
    def estimate(q):
        if kind.startswith("lin"):
            return linearised(linear_model, lik, q.mu, x, y, kind == "lin-hess")
        gen = torch.Generator().manual_seed(seed)
        return monte_carlo(linear_model, lik, q.sample(samples, gen), x, y, kind == "mc-hess",
                           gen)
    return estimate


def kalman(mu, cov, h, y, noise):
    s = h @ cov @ h.T + noise
    gain = cov @ h.T @ torch.linalg.inv(s)
    return mu + gain @ (y - h @ mu), cov - gain @ s @ gain.T


def batch_posterior(mu0, cov0, hs, ys, noise):
    prec = torch.linalg.inv(cov0) + sum(h.T @ torch.linalg.solve(noise, h) for h in hs)
    shift = torch.linalg.solve(cov0, mu0) + sum(h.T @ torch.linalg.solve(noise, y)
                                                for h, y in zip(hs, ys))
    cov = torch.linalg.inv(prec)
    return cov @ shift, cov


def test_bong_fc_lin_hess_is_the_kalman_filter_and_the_batch_posterior_in_any_order():
    xs, ys, lik = linear_gaussian()
    mu0 = torch.linspace(-1, 1, P)
    for order in ([0, 1, 2, 3, 4, 5], [5, 3, 1, 0, 4, 2]):
        q, (m, s) = prior_belief("fc", mu0, 2.0), (mu0, 2.0 * torch.eye(P))
        for t in order:
            q = update(q, estimator("lin-hess", lik, xs[t], ys[t]), "bong", 1.0)
            m, s = kalman(m, s, xs[t].reshape(C, P), ys[t], lik.noise)
            torch.testing.assert_close(q.mu, m, rtol=1e-9, atol=1e-9)
            torch.testing.assert_close(q.gaussian.covariance(), s, rtol=1e-9, atol=1e-9)
        exact_mu, exact_cov = batch_posterior(mu0, 2.0 * torch.eye(P), xs.reshape(-1, C, P), ys,
                                              lik.noise)
        torch.testing.assert_close(q.mu, exact_mu)
        torch.testing.assert_close(q.gaussian.covariance(), exact_cov)


def test_fc_moment_bong_is_only_first_order_in_sigma_g():
    xs, ys, lik = linear_gaussian(1)
    errors = []
    for variance in (1e-2, 1e-3, 1e-4):
        q = update(prior_belief("fc-mom", torch.zeros(P), variance),
                   estimator("lin-hess", lik, xs[0], ys[0]), "bong", 1.0)
        _, exact = kalman(torch.zeros(P), variance * torch.eye(P), xs[0].reshape(C, P), ys[0],
                          lik.noise)
        errors.append(float((q.gaussian.covariance() - exact).norm() / variance))
    assert errors[0] > 1e-2  # not the Kalman filter
    # the error Sigma G Sigma G Sigma is second order in Sigma G: relative to Sigma, ten times
    # smaller prior variance gives a hundred times smaller error
    assert errors[1] / errors[0] == pytest.approx(0.01, rel=0.3)
    assert errors[2] / errors[1] == pytest.approx(0.01, rel=0.3)


def test_conjugate_exponential_families_are_updated_exactly_by_the_generic_route():
    # Beta(a, b): psi = (a - 1, b - 1), T = (log th, log(1 - th)); Bernoulli: lambda = (y, 1 - y)
    def beta_phi(psi):
        a, b = psi + 1
        return torch.lgamma(a) + torch.lgamma(b) - torch.lgamma(a + b)
    psi = torch.tensor([1.5, 0.7])
    for y in (1.0, 0.0):
        new = natural_gradient_step(beta_phi, lambda rho, y=y: y * rho[0] + (1 - y) * rho[1], psi)
        torch.testing.assert_close(new, psi + torch.tensor([y, 1 - y]))
    # Gamma(a, b): psi = (a - 1, -b), T = (log th, th); Poisson y: lambda = (y, -1)
    def gamma_phi(psi):
        a, b = psi[0] + 1, -psi[1]
        return torch.lgamma(a) - a * torch.log(b)
    psi = torch.tensor([2.0, -1.5])
    new = natural_gradient_step(gamma_phi, lambda rho: 3 * rho[0] - rho[1], psi)
    torch.testing.assert_close(new, psi + torch.tensor([3.0, -1.0]))
    # Dirichlet(alpha): psi = alpha - 1, T = log th; categorical y = k: lambda = onehot(k)
    def dirichlet_phi(psi):
        a = psi + 1
        return torch.lgamma(a).sum() - torch.lgamma(a.sum())
    psi = torch.tensor([0.5, 1.0, 2.0])
    new = natural_gradient_step(dirichlet_phi, lambda rho: rho[2], psi)
    torch.testing.assert_close(new, psi + torch.tensor([0.0, 0.0, 1.0]))


def test_natural_gradient_of_a_gaussian_is_the_gradient_in_the_mean_parameters():
    # 1-d N(m, v): psi = (m / v, -1 / (2 v)), rho = (m, m^2 + v); Gaussian likelihood y ~ N(th, r)
    def phi(psi):
        return -psi[0] ** 2 / (4 * psi[1]) - 0.5 * torch.log(-2 * psi[1])
    m, v, y, r = 0.3, 2.0, 1.1, 0.5
    psi = torch.tensor([m / v, -1 / (2 * v)])
    new = natural_gradient_step(phi, lambda rho: (y * rho[0] - 0.5 * rho[1]) / r, psi)
    post_v = 1 / (1 / v + 1 / r)
    torch.testing.assert_close(new, torch.tensor([post_v * (m / v + y / r) / post_v,
                                                  -1 / (2 * post_v)]))


def _beliefs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    mu = torch.randn(P, generator=gen)
    a = torch.randn(P, P, generator=gen)
    cov = a @ a.T / P + 0.5 * torch.eye(P)
    var = torch.rand(P, generator=gen) + 0.5
    w = 0.3 * torch.randn(P, 2, generator=gen)
    return {"fc": FullNatural.make(mu, torch.linalg.inv(cov)), "fc-mom": FullMoment.make(mu, cov),
            "dg": DiagNatural(DiagonalGaussian(mu, var)), "dg-mom": DiagMoment(DiagonalGaussian(mu, var)),
            "dlr": DiagLowRank.make(mu, 1 / var, w)}


def _fields(q):
    return [q.mu, q.gaussian.covariance()]


@pytest.mark.parametrize("family", FAMILIES)
def test_blr_with_one_step_of_rate_one_is_bong_in_every_curvature(family):
    xs, ys, lik = linear_gaussian(1)
    xs, ys = 0.1 * xs, 0.1 * ys  # a weak observation: the moment families stay positive
    q = _beliefs()[family]
    for kind in TRACTABLE[family]:
        bong = update(q, estimator(kind, lik, xs[0], ys[0]), "bong", 0.3)  # alpha is ignored
        blr = update(q, estimator(kind, lik, xs[0], ys[0]), "blr", 1.0, 1)
        for a, b in zip(_fields(bong), _fields(blr)):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("family", FAMILIES)
def test_blr_with_one_step_of_rate_alpha_is_bong_on_the_likelihood_tempered_by_alpha(family):
    # at the predicted belief the KL's gradient vanishes, so one BLR step of rate a is one BONG
    # step with (g, G) -> (a g, a G): the likelihood raised to the power a (a damped update)
    xs, ys, lik = linear_gaussian(1)
    xs, ys = 0.1 * xs, 0.1 * ys
    q = _beliefs()[family]
    alpha = 0.3
    for kind in TRACTABLE[family]:
        est = estimator(kind, lik, xs[0], ys[0])

        def tempered(belief, est=est):
            c = est(belief)
            return Curvature(alpha * c.g, root=None if c.root is None else alpha ** 0.5 * c.root,
                             diag=None if c.diag is None else alpha * c.diag)
        blr = update(q, est, "blr", alpha, 1)
        bong = update(q, tempered, "bong", 1.0)
        for a, b in zip(_fields(bong), _fields(blr)):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("family", ["fc", "dg", "dlr"])
def test_one_step_blr_along_a_stream_is_bong_with_the_prior_variance_times_alpha(family):
    # by induction: if Lambda_blr = alpha Lambda' and the means agree, both linearise at the same
    # mean and Lambda_blr - alpha G = alpha (Lambda' - G), mu + alpha (alpha Lambda')^-1 g =
    # mu + Lambda'^-1 g; so BLR(alpha, v) has BONG(alpha v)'s means and 1 / alpha its covariance
    xs, ys, lik = linear_gaussian(5)
    xs, ys = 0.5 * xs, 0.5 * ys
    alpha, mu0 = 0.4, torch.linspace(-1, 1, P)
    blr = prior_belief(family, mu0, 2.0, rank=2)
    bong = prior_belief(family, mu0, 2.0 * alpha, rank=2)
    for t in range(5):
        for kind in ("lin-hess", "lin-ef"):
            blr = update(blr, estimator(kind, lik, xs[t], ys[t]), "blr", alpha, 1)
            bong = update(bong, estimator(kind, lik, xs[t], ys[t]), "bong", 1.0)
            torch.testing.assert_close(blr.mu, bong.mu)
            torch.testing.assert_close(alpha * blr.gaussian.covariance(), bong.gaussian.covariance())


@pytest.mark.parametrize("family", ["fc", "dg", "dlr"])
def test_bong_ignores_alpha_and_bog_with_tiny_alpha_leaves_the_belief(family):
    xs, ys, lik = linear_gaussian(1)
    q = _beliefs()[family]
    est = estimator("lin-hess", lik, xs[0], ys[0])
    for a, b in zip(_fields(update(q, est, "bong", 0.01)), _fields(update(q, est, "bong", 5.0))):
        torch.testing.assert_close(a, b)
    for a, b in zip(_fields(update(q, est, "bog", 1e-12)), _fields(q)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_blr_with_a_small_step_converges_to_the_exact_linear_gaussian_posterior():
    xs, ys, lik = linear_gaussian(1)
    q0 = prior_belief("fc", torch.zeros(P), 1.0)
    q = update(q0, estimator("lin-hess", lik, xs[0], ys[0]), "blr", 0.1, 300)
    mu, cov = kalman(torch.zeros(P), torch.eye(P), xs[0].reshape(C, P), ys[0], lik.noise)
    torch.testing.assert_close(q.mu, mu, rtol=1e-8, atol=1e-8)
    torch.testing.assert_close(q.gaussian.covariance(), cov, rtol=1e-8, atol=1e-8)


def test_bbb_with_a_small_step_approaches_the_exact_posterior_too():
    xs, ys, lik = linear_gaussian(1)
    xs = 0.3 * xs
    q0 = prior_belief("dg-mom", torch.zeros(P), 1.0)
    q = update(q0, estimator("lin-hess", lik, xs[0], ys[0]), "bbb", 0.05, 2000)
    h = xs[0].reshape(C, P)
    exact_prec = torch.ones(P) + torch.diag(h.T @ torch.linalg.solve(lik.noise, h))
    # the VI optimum in the mean-field family has precision diag(Lambda_exact)
    torch.testing.assert_close(1 / q.var, exact_prec, rtol=1e-6, atol=1e-6)


def test_gradient_steps_match_the_gradient_of_the_expected_log_likelihood():
    # E_q[log N(y | H th, R)] in closed form, differentiated by autograd in each coordinate system
    xs, ys, lik = linear_gaussian(1)
    h, y, r_inv = xs[0].reshape(C, P), ys[0], torch.linalg.inv(lik.noise)

    def expected(mu, cov):
        res = y - h @ mu
        return -0.5 * (res @ r_inv @ res + torch.trace(h.T @ r_inv @ h @ cov))

    curv = linearised(linear_model, lik, torch.zeros(P), xs[0], ys[0], True)
    q = _beliefs()["fc"]
    curv = linearised(linear_model, lik, q.mu, xs[0], ys[0], True)
    lam = q.gaussian.precision()
    psi1, psi2 = (lam @ q.mu).requires_grad_(), (-0.5 * lam).requires_grad_()
    cov = torch.linalg.inv(-2 * psi2)
    expected(cov @ psi1, cov).backward()
    alpha = 1e-3
    new = q.gradient_step(curv, alpha)
    g2 = 0.5 * (psi2.grad + psi2.grad.T)
    new_lam = new.gaussian.precision()
    torch.testing.assert_close(new_lam, lam - 2 * alpha * g2)
    torch.testing.assert_close(new_lam @ new.mu, lam @ q.mu + alpha * psi1.grad)
    d = _beliefs()["dg"]
    curv = linearised(linear_model, lik, d.mu, xs[0], ys[0], True)
    p1, p2 = (d.prec * d.mu).requires_grad_(), (-0.5 * d.prec).requires_grad_()
    expected(p1 / (-2 * p2), torch.diag(1 / (-2 * p2))).backward()
    new = d.gradient_step(curv, alpha)
    torch.testing.assert_close(new.prec, d.prec - 2 * alpha * p2.grad)
    torch.testing.assert_close(new.prec * new.mu, d.prec * d.mu + alpha * p1.grad)


def test_dlr_gradient_step_is_the_gradient_in_mu_upsilon_w():
    xs, ys, lik = linear_gaussian(1)
    h, y, r_inv = xs[0].reshape(C, P), ys[0], torch.linalg.inv(lik.noise)
    q = _beliefs()["dlr"]
    mu, ups, w = (t.clone().requires_grad_() for t in (q.mu, q.ups, q.w))
    cov = torch.linalg.inv(torch.diag(ups) + w @ w.T)
    res = y - h @ mu
    (-0.5 * (res @ r_inv @ res + torch.trace(h.T @ r_inv @ h @ cov))).backward()
    alpha = 1e-2
    new = q.gradient_step(linearised(linear_model, lik, q.mu, xs[0], ys[0], True), alpha)
    torch.testing.assert_close(new.mu, q.mu + alpha * mu.grad)
    torch.testing.assert_close(new.ups, q.ups + alpha * ups.grad)
    torch.testing.assert_close(new.w, q.w + alpha * w.grad)


def _random_net(seed, classes):
    gen = torch.Generator().manual_seed(seed)
    w1, w2 = torch.randn(5, 3, generator=gen), torch.randn(classes, 5, generator=gen)
    theta = torch.cat([w1.reshape(-1), w2.reshape(-1)])

    def logits(th, x):
        a, b = th[:15].reshape(5, 3), th[15:].reshape(classes, 5)
        return b @ torch.tanh(a @ x)
    return theta, logits, torch.randn(3, generator=gen)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gauss_newton_identities_of_prop_4_2_on_random_networks(seed):
    # softmax: H = d softmax(f) / d theta, R = diag(p) - p p^T singular -> pseudo-inverse
    theta, logits, x = _random_net(seed, 3)
    y = torch.nn.functional.one_hot(torch.tensor(seed % 3), 3).double()
    p = torch.softmax(logits(theta, x), -1)
    big_f = jacrev(logits)(theta, x)
    big_h = jacrev(lambda th: torch.softmax(logits(th, x), -1))(theta)
    r = torch.diag(p) - torch.outer(p, p)
    torch.testing.assert_close(big_h.T @ torch.linalg.pinv(r) @ (y - p), big_f.T @ (y - p))
    torch.testing.assert_close(big_h.T @ torch.linalg.pinv(r) @ big_h, big_f.T @ r @ big_f)
    # the curvature module's logits form gives the same g and G = -F^T R F
    curv = linearised(logits, Categorical(), theta, x, torch.tensor(seed % 3), True)
    torch.testing.assert_close(curv.g, big_f.T @ (y - p))
    torch.testing.assert_close(curv.dense(), -big_f.T @ r @ big_f)
    # Bernoulli (C = 1): R = p (1 - p) is invertible
    theta, logit1, x = _random_net(seed, 1)
    q = torch.sigmoid(logit1(theta, x))
    f1 = jacrev(logit1)(theta, x)
    h1 = jacrev(lambda th: torch.sigmoid(logit1(th, x)))(theta)
    r1 = q * (1 - q)
    torch.testing.assert_close(h1.T @ ((1 - q) / r1), f1.T @ (1 - q))
    torch.testing.assert_close(h1.T @ h1 / r1, f1.T @ f1 * r1)


def test_dlr_equals_fc_when_the_rank_is_not_truncated():
    xs, ys, lik = linear_gaussian(3)
    mu0 = torch.linspace(-1, 1, P)
    fc = prior_belief("fc", mu0, 1.5)
    dlr = prior_belief("dlr", mu0, 1.5, rank=P)
    for t in range(3):
        fc = update(fc, estimator("lin-hess", lik, xs[t], ys[t]), "bong", 1.0)
        dlr = update(dlr, estimator("lin-hess", lik, xs[t], ys[t]), "bong", 1.0)
    torch.testing.assert_close(dlr.mu, fc.mu)
    torch.testing.assert_close(dlr.gaussian.precision(), fc.gaussian.precision())


def test_svd_projection_keeps_the_diagonal_and_the_top_spectrum():
    gen = torch.Generator().manual_seed(3)
    ups, wide = torch.rand(7, generator=gen) + 1, torch.randn(7, 5, generator=gen)
    new_ups, w = project_low_rank(ups, wide, 2)
    torch.testing.assert_close(new_ups + w.square().sum(1), ups + wide.square().sum(1))
    top = torch.linalg.eigvalsh(wide @ wide.T).flip(0)[:2]
    torch.testing.assert_close(torch.linalg.eigvalsh(w @ w.T).flip(0)[:2], top)


def test_projection_matches_the_dense_svd_on_an_ill_conditioned_rank_deficient_factor():
    # singular values over nine decades and two exact zeros: the Gram route must still keep the
    # diagonal to rounding and the top-L part of the dense SVD
    gen = torch.Generator().manual_seed(4)
    u = torch.linalg.qr(torch.randn(30, 8, generator=gen))[0]
    v = torch.linalg.qr(torch.randn(8, 8, generator=gen))[0]
    s = torch.tensor([1e3, 1e2, 10.0, 1.0, 1e-3, 1e-6, 0.0, 0.0])
    wide = (u * s) @ v.T
    ups = torch.rand(30, generator=gen) + 1
    new_ups, w = project_low_rank(ups, wide, 3)
    left, sv, _ = torch.linalg.svd(wide, full_matrices=False)
    dense = (left[:, :3] * sv[:3]) @ (left[:, :3] * sv[:3]).T
    torch.testing.assert_close(w @ w.T, dense, rtol=0, atol=1e-9 * float(s[0]) ** 2)
    torch.testing.assert_close(new_ups + w.square().sum(1), ups + wide.square().sum(1),
                               rtol=1e-14, atol=0)
    torch.testing.assert_close(new_ups - ups, (left[:, 3:] * sv[3:]).square().sum(1),
                               rtol=0, atol=1e-9)


def test_dg_vd_ekf_mean_is_the_ekf_gain_of_the_reference_and_the_projected_fc_step():
    xs, ys, lik = linear_gaussian(1)
    h = xs[0].reshape(C, P)
    q = _beliefs()["dg"]
    vd = DiagNatural(q.gaussian, "vd-ekf")
    est = estimator("lin-hess", lik, xs[0], ys[0])
    new = update(vd, est, "bong", 1.0)
    # notes §2.4: mu + diag(s2) H^T (H diag(s2) H^T + R)^-1 (y - H mu); precision unchanged
    s2 = q.gaussian.var
    gain = s2[:, None] * h.T @ torch.linalg.inv(h @ (s2[:, None] * h.T) + lik.noise)
    torch.testing.assert_close(new.mu, q.mu + gain @ (ys[0] - h @ q.mu))
    ngd = update(q, est, "bong", 1.0)
    torch.testing.assert_close(new.prec, ngd.prec)
    assert (new.mu - ngd.mu).abs().max() > 1e-3  # the two mean rules differ
    # any curvature and BLR too: the FC natural step from the diagonal belief, then the diagonal
    # of its precision; BLR(alpha = 1, one step) is still BONG
    fc = FullNatural.make(q.mu, torch.diag(q.prec))
    for kind, rule, alpha in (("lin-ef", "bong", 1.0), ("mc-ef", "bong", 1.0),
                              ("lin-hess", "blr", 0.4), ("mc-ef", "blr", 1.0)):
        est = estimator(kind, lik, xs[0], ys[0])
        full = update(fc, est, rule, alpha)
        new = update(vd, est, rule, alpha)
        torch.testing.assert_close(new.mu, full.mu)
        torch.testing.assert_close(new.prec, torch.diag(full.gaussian.precision()))
    with pytest.raises(ValueError, match="unknown dg mean rule"):
        DiagNatural(q.gaussian, "ekf")


def test_dynamics_of_each_family_give_gamma_squared_sigma_plus_q():
    for family, q in _beliefs().items():
        cov = _cov(q)
        if family == "dlr":  # LO-FI's predict step is exact when q = 0
            torch.testing.assert_close(_cov(q.dynamics(0.9, 0.0)), 0.81 * cov)
            zero = DiagLowRank.make(q.mu, q.ups, torch.zeros_like(q.w))
            torch.testing.assert_close(_cov(zero.dynamics(0.9, 0.2)),
                                       0.81 * _cov(zero) + 0.2 * torch.eye(P))
            continue
        new = q.dynamics(0.9, 0.2)
        torch.testing.assert_close(new.mu, 0.9 * q.mu)
        expect = 0.81 * cov + 0.2 * torch.eye(P)
        torch.testing.assert_close(_cov(new), expect if family.startswith("fc")
                                   else torch.diag(torch.diag(expect)))


def _cov(q):
    return q.gaussian.covariance()


def test_dg_natural_lin_ef_keeps_variances_positive_where_dg_moment_fails_and_says_so():
    big = Curvature(torch.full((P,), 30.0), root=torch.full((P, 1), 30.0))
    q = prior_belief("dg", torch.zeros(P), 1.0)
    assert (q.natural_step(big, 1.0).prec > 0).all()
    with pytest.raises(BeliefError, match="positive variances.*natural-parameter family"):
        prior_belief("dg-mom", torch.zeros(P), 1.0).natural_step(big, 1.0)


def test_only_tractable_combinations_are_accepted():
    for rule, family in itertools.product(RULES, FAMILIES):
        for curvature in TRACTABLE[family]:
            check_combination(rule, curvature, family, 1)
    with pytest.raises(ValueError, match="not tractable.*dg: mc-hess"):
        check_combination("bong", "mc-hess", "dlr", 1)
    with pytest.raises(ValueError, match="only to the iterated rules"):
        check_combination("bong", "lin-hess", "dg", 3)


def test_hutchinson_diagonal_is_unbiased_for_the_hessian_diagonal():
    theta, logits, x = _random_net(0, 3)
    y = torch.tensor(1)
    lik = Categorical()
    draws = theta.expand(4000, -1)
    curv = monte_carlo(logits, lik, draws, x, y, True, torch.Generator().manual_seed(0))
    hess = torch.func.hessian(lambda th: lik.log_prob(logits(th, x), y))(theta)
    torch.testing.assert_close(curv.diag, torch.diag(hess), atol=0.05, rtol=0.05)


@pytest.mark.slow
def test_bbb_on_the_dlr_family_converges_to_the_exact_posterior_through_the_kl_gradient():
    # full rank (L = P): the VI optimum is the exact posterior; the KL term's gradient in
    # (mu, ups, w) comes from zoo.gaussians' closed-form KL by autograd
    xs, ys, lik = linear_gaussian(1)
    xs = 0.3 * xs
    q0 = DiagLowRank.make(torch.zeros(P), torch.ones(P), 0.1 * torch.eye(P))
    q = update(q0, estimator("lin-hess", lik, xs[0], ys[0]), "bbb", 0.05, 2000)
    mu, cov = kalman(q0.mu, q0.gaussian.covariance(), xs[0].reshape(C, P), ys[0], lik.noise)
    torch.testing.assert_close(q.mu, mu)
    torch.testing.assert_close(q.gaussian.covariance(), cov, atol=2e-3, rtol=0)


def test_a_non_finite_gradient_is_a_belief_error_not_a_linear_algebra_crash():
    q = prior_belief("dlr", torch.zeros(P), 1.0, rank=2)
    nan = Curvature(torch.full((P,), float("nan")), root=torch.ones(P, 1))
    with pytest.raises(BeliefError, match="diverged.*lower prior_var"):
        update(q, lambda belief: nan, "bong", 1.0)


@pytest.mark.parametrize("likelihood", ["categorical", "gaussian"])
@pytest.mark.parametrize("kind", ["lin-hess", "lin-ef", "mc-ef", "mc-hess"])
@pytest.mark.parametrize("network", ["mlp", "linear"])
def test_a_batched_models_curvature_is_the_per_parameter_vectors(kind, likelihood, network):
    # a model that also maps [K, P] (the zoo's networks) takes one batched forward for the
    # LIN-HESS copies of the mean and the MC draws; the numbers are those of vmap over one vector
    from zoo_bong.likelihoods import Gaussian
    from zoo_bong.networks import build_network, flat_function

    torch.manual_seed(3)
    outputs = 1 if likelihood == "gaussian" else 3
    dim = 5
    theta, f = flat_function(build_network(network, dim, outputs, hidden=6))
    lik = Gaussian(torch.full((1, 1), 0.5, dtype=torch.float64)) if outputs == 1 else Categorical()
    x = torch.rand(dim, dtype=torch.float64)
    y = torch.tensor([0.3], dtype=torch.float64) if outputs == 1 else torch.tensor(2)

    def model(t, x):
        return f(t, x[None])[..., 0, :]

    draws = theta + 0.3 * torch.randn(4, len(theta), dtype=torch.float64)
    results = []
    for batched in (False, True):
        if kind.startswith("mc"):
            gen = torch.Generator().manual_seed(0)
            curv = monte_carlo(model, lik, draws, x, y, kind == "mc-hess", gen, batched=batched)
        else:
            curv = linearised(model, lik, theta, x, y, kind == "lin-hess", batched=batched)
        results.append(curv)
    plain, batched = results
    torch.testing.assert_close(batched.g, plain.g, rtol=0, atol=1e-14)
    torch.testing.assert_close(batched.diagonal(), plain.diagonal(), rtol=0, atol=1e-14)
    if kind != "mc-hess":
        torch.testing.assert_close(batched.root, plain.root, rtol=0, atol=1e-14)


@pytest.mark.parametrize("kind", ["lin-hess", "lin-ef", "mc-ef"])
def test_the_autograd_and_the_differentiable_curvature_routes_agree(kind):
    # a constant input takes plain autograd; an input that requires a gradient (a meta-learned
    # head's features) takes torch.func, whose result stays differentiable in it
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(3, 4, generator=gen, dtype=torch.float64)

    def mlp(theta, x):  # 4 -> 3 tanh -> 3 classes, P = 12 + 9
        return theta[12:].view(3, 3) @ torch.tanh((theta[:12].view(3, 4) * w) @ x)

    theta = torch.randn(21, generator=gen, dtype=torch.float64)
    x, y = torch.randn(4, generator=gen, dtype=torch.float64), torch.tensor(1)
    draws = theta + 0.3 * torch.randn(5, 21, generator=gen, dtype=torch.float64)

    def curvature(inputs):
        if kind == "mc-ef":
            return monte_carlo(mlp, Categorical(), draws, inputs, y, False, gen)
        return linearised(mlp, Categorical(), theta, inputs, y, kind == "lin-hess")

    plain, traced = curvature(x), curvature(x.clone().requires_grad_())
    assert not plain.g.requires_grad and traced.g.requires_grad
    torch.testing.assert_close(plain.g, traced.g.detach(), rtol=0, atol=1e-14)
    torch.testing.assert_close(plain.root, traced.root.detach(), rtol=0, atol=1e-14)
    if kind == "lin-hess":  # root root^T = F^T R F, R = diag(p) - p p^T, F by jacrev
        jac = jacrev(mlp)(theta, x)
        p = torch.softmax(mlp(theta, x), -1)
        ggn = jac.T @ (torch.diag(p) - torch.outer(p, p)) @ jac
        torch.testing.assert_close(plain.root @ plain.root.T, ggn, rtol=0, atol=1e-13)


@pytest.mark.parametrize("kind", ["lin-hess", "lin-ef", "mc-ef"])
def test_the_compiled_curvature_is_the_eager_one_along_a_stream_without_recompiling(kind):
    # one traced program (fullgraph, static shapes) reused by every update of a stream; the
    # aot_eager backend traces exactly what inductor fuses, in a fraction of its compile time
    import torch._dynamo
    from zoo_bong.curvature import compiled
    from zoo_bong.networks import build_network, flat_function

    torch.manual_seed(4)
    theta, f = flat_function(build_network("mlp", 5, 3, hidden=6))

    def model(t, x):
        return f(t, x[None])[..., 0, :]

    torch._dynamo.reset()
    program = compiled(model, Categorical(), kind, backend="aot_eager")
    q = prior_belief("dlr", theta, 0.1, rank=2)
    gen = torch.Generator().manual_seed(0)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for i in range(4):
            x, y = torch.rand(5, dtype=torch.float64), torch.tensor(i % 3)
            at = q.mu if kind.startswith("lin") else q.sample(3, gen)
            if kind.startswith("lin"):
                eager = linearised(model, Categorical(), at, x, y, kind == "lin-hess", True)
            else:
                eager = monte_carlo(model, Categorical(), at, x, y, False, gen, True)
            traced = program(at, x, y)
            torch.testing.assert_close(traced.g, eager.g, rtol=0, atol=1e-14)
            torch.testing.assert_close(traced.root, eager.root, rtol=0, atol=1e-14)
            q = update(q, lambda belief, c=traced: c, "bong", 1.0)


def test_only_the_compilable_curvatures_compile():
    from zoo_bong.curvature import compiled

    with pytest.raises(ValueError, match="'mc-hess' cannot be compiled; compilable: mc-ef"):
        compiled(lambda t, x: t, Categorical(), "mc-hess")
