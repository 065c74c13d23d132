"""Control-variate estimators (Sun 2023, §3.3, Ch. 4-5; notes §0.5, §A.4, §B.4): zero variance,
unbiasedness of the split estimator with its negative control, the vector-valued closed form
against the full system and the stochastic fit, and the meta-learned CV's inner and outer steps."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.control_variates import linear, neural, vector_valued
from zoo.control_variates.gaussian import MetaCVEstimator
from zoo.control_variates.methods import MetaControlVariate
from zoo.errors import HyperParameterError
from zoo.expectations import build_estimator
from zoo.families.latent_gaussian import ESTIMATORS
from zoo.kernels import RBFKernel
from zoo.stein import first_order
from zoo.stein_kernels import matrix_stein_kernel, stein_kernel
from zoo.variational import SoftmaxMean

D = torch.float64


def quadratic_problem(n: int, d: int = 2, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(d, generator=g, dtype=D)
    R = torch.randn(d, d, generator=g, dtype=D) / 2 + torch.eye(d, dtype=D)
    S = R @ R.T
    M = torch.randn(d, d, generator=g, dtype=D)
    M = (M + M.T) / 2
    b = torch.randn(d, generator=g, dtype=D)
    x = mu + torch.randn(n, d, generator=g, dtype=D) @ R.T
    score = -torch.linalg.solve(S, (x - mu).T).T
    f = ((x @ M) * x).sum(-1) + x @ b + 0.7
    truth = torch.trace(M @ S) + mu @ M @ mu + b @ mu + 0.7
    return x, score, f, float(truth), (mu, S, M, b)


@pytest.mark.parametrize("mode", ["intercept", "split"])
def test_affine_field_cv_is_exact_for_a_quadratic_under_a_gaussian(mode):
    x, score, f, truth, (mu, S, M, b) = quadratic_problem(40)
    e = linear.polynomial_cv(x, score, f[:, None], degree=2, mode=mode, ridge=0.0)
    assert float(e.value) == pytest.approx(truth, abs=1e-10)
    assert float(e.stderr) < 1e-10
    # the notes' closed-form field u = a + A x, A = -Sigma M, a = -Sigma (b + M mu): f - L'[u]
    # is the constant integral
    A, a = -S @ M, -S @ (b + M @ mu)
    stein = torch.trace(A) + ((a + x @ A.T) * score).sum(-1)
    torch.testing.assert_close(f - stein, torch.full_like(f, truth))


def test_degree_one_cv_is_exact_for_a_linear_integrand():
    x, score, _, _, (mu, *_) = quadratic_problem(10)
    f = x @ torch.tensor([1.0, -2.0], dtype=D) + 3
    e = linear.polynomial_cv(x, score, f[:, None], degree=1, ridge=0.0)
    assert float(e.value) == pytest.approx(float(mu @ torch.tensor([1.0, -2.0], dtype=D) + 3),
                                           abs=1e-10)


def test_split_estimator_is_unbiased_and_the_same_sample_fit_is_not():
    reps, n = 10_000, 12
    g = torch.Generator().manual_seed(1)
    x = torch.randn(reps, n, 1, generator=g, dtype=D)
    f = torch.exp(1.5 * x[..., 0])[..., None]
    truth = math.exp(1.5**2 / 2)
    split = linear.polynomial_cv(x, -x, f, degree=2, mode="split").value[:, 0] - truth
    assert abs(float(split.mean())) < 3 * float(split.std()) / math.sqrt(reps)
    # negative control: fit and estimate on the same (held-out) half
    held = linear.polynomial_cv(x[:, n // 2:], -x[:, n // 2:], f[:, n // 2:], degree=2,
                                mode="intercept").value[:, 0] - truth
    assert abs(float(held.mean())) > 5 * float(held.std()) / math.sqrt(reps)


def test_intercept_cancels_in_the_split_estimator():
    x, score, f, _, _ = quadratic_problem(30, seed=4)
    f = f + torch.sin(3 * x[:, 0])
    m = 15
    phi = linear.polynomial_features(x, score, 2)
    fit = linear.polynomial_cv(x[:m], score[:m], f[:m, None], degree=2, mode="intercept")
    theta = torch.linalg.lstsq(phi[:m] - phi[:m].mean(0), f[:m] - f[:m].mean()).solution
    for beta in (float(fit.value), float(fit.value) + 5.0):
        value = (f[m:] - beta - phi[m:] @ theta).mean() + beta
        split = linear.polynomial_cv(x, score, f[:, None], degree=2, mode="split", ridge=0.0)
        assert float(value) == pytest.approx(float(split.value), abs=1e-9)


@pytest.mark.parametrize("mode", ["intercept", "split"])
def test_linear_cvs_are_rules_whose_weights_sum_to_one(mode):
    x, score, f, _, _ = quadratic_problem(24, seed=2)
    f = f + torch.cos(x[:, 1])
    w = linear.polynomial_weights(linear.polynomial_features(x, score, 2), mode)
    assert float(w.sum()) == pytest.approx(1.0, abs=1e-14)
    e = linear.polynomial_cv(x, score, f[:, None], degree=2, mode=mode)
    assert float(w @ f) == pytest.approx(float(e.value), rel=1e-9)


@pytest.mark.parametrize("spec", ["poly-cv[samples=16,degree=1]", "poly-cv[samples=16]",
                                  "poly-cv[samples=64,estimate=split]",
                                  "control-functional[samples=16]",
                                  "control-functional[samples=32,estimate=split]"])
def test_class_probabilities_sum_to_one_exactly(spec):
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(6, 5, generator=g, dtype=D)
    var = 2 * torch.rand(6, 5, generator=g, dtype=D)
    estimator = build_estimator(spec, ESTIMATORS)
    for integrand in (lambda f: torch.softmax(f, -1), SoftmaxMean(D)):
        probs = estimator.expect(integrand, mean, var, seed=5).value
        torch.testing.assert_close(probs.sum(-1), torch.ones(6, dtype=D), rtol=0, atol=1e-12)


def test_gaussian_poly_cv_beats_monte_carlo_on_smooth_probabilities():
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(50, 3, generator=g, dtype=D)
    var = 0.5 * torch.rand(50, 3, generator=g, dtype=D)
    ref = build_estimator("sobol[samples=65536]", ESTIMATORS).expect(SoftmaxMean(D), mean, var).value
    err = {}
    for spec in ("mc[samples=64]", "poly-cv[samples=64]"):
        est = build_estimator(spec, ESTIMATORS).expect(lambda f: torch.softmax(f, -1), mean, var, seed=1)
        err[spec] = float((est.value - ref).pow(2).mean())
    assert err["poly-cv[samples=64]"] < err["mc[samples=64]"] / 10


# -- vector-valued CVs -----------------------------------------------------------------------------

def two_tasks(m: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    shifts = torch.tensor([[0.0, 0.0], [0.7, -0.4]], dtype=D)
    x = torch.cat([torch.randn(m, 2, generator=g, dtype=D) + shifts[t] for t in range(2)])
    task = torch.arange(2).repeat_interleave(m)
    score_all = -(x[None] - shifts[:, None])  # [T, M, 2]: every task's score at every point
    own = score_all[task, torch.arange(2 * m)]
    fx = torch.sin(x[:, 0]) + x[:, 1] ** 2 + 0.3 * task
    return x, own, score_all, task, fx


def test_vv_cv_with_one_task_and_unit_b_is_the_control_functional():
    x, score, f, _, _ = quadratic_problem(15, seed=3)
    kernel = RBFKernel(2, lengthscale=1.2).double()
    k0 = vector_valued.base_gram(kernel, x, score)
    jitter = 1e-6
    fit = vector_valued.closed_form(k0, torch.ones(1, 1, dtype=D), torch.zeros(15, dtype=torch.long),
                                    f, jitter / 15)
    beta, alpha, _ = linear.gls_fit(k0, f[:, None], jitter)
    torch.testing.assert_close(fit.beta, beta)
    torch.testing.assert_close(fit.alpha, alpha[:, 0])


def test_diagonal_b_decouples_into_independent_cvs():
    x, own, _, task, fx = two_tasks()
    kernel = RBFKernel(2, lengthscale=1.0).double()
    k0 = vector_valued.base_gram(kernel, x, own)
    B = torch.diag(torch.tensor([2.0, 0.5], dtype=D))
    lam = 1e-3
    fit = vector_valued.closed_form(k0, B, task, fx, lam)
    for t in range(2):
        idx = task == t
        beta, _, _ = linear.gls_fit(k0[idx][:, idx], fx[idx, None], lam * 8 / B[t, t])
        assert float(fit.beta[t]) == pytest.approx(float(beta), rel=1e-9)


def test_reduced_system_equals_the_full_closed_form():
    m = 8
    x, own, score_all, task, fx = two_tasks(m)
    kernel = RBFKernel(2, lengthscale=1.0).double()
    B = torch.tensor([[1.0, 0.4], [0.4, 0.8]], dtype=D)
    lam = 1e-2
    fit = vector_valued.closed_form(vector_valued.base_gram(kernel, x, own), B, task, fx, lam)
    # the full system (Thm 4.2.4): theta_b in R^T per point, G = [K0(x_a, x_b)], Phi picks each
    # point's own component; joint least squares in (theta, beta)
    M, T = 2 * m, 2
    K = matrix_stein_kernel(kernel, B, x, x, score_all, score_all).detach()  # [M, M, T, T]
    G = K.permute(0, 2, 1, 3).reshape(M * T, M * T)
    Phi = G.reshape(M, T, M * T)[torch.arange(M), task]
    H = torch.nn.functional.one_hot(task, T).to(D)
    W = torch.diag(1 / H.sum(0)[task])
    top = torch.cat([Phi.T @ W @ Phi + lam * G, Phi.T @ W @ H], 1)
    bottom = torch.cat([H.T @ W @ Phi, H.T @ W @ H], 1)
    rhs = torch.cat([Phi.T @ W @ fx, H.T @ W @ fx])
    sol = torch.linalg.lstsq(torch.cat([top, bottom]), rhs[:, None], driver="gelsd").solution[:, 0]
    torch.testing.assert_close(sol[-T:], fit.beta, rtol=1e-6, atol=1e-6)
    k0 = vector_valued.base_gram(kernel, x, own)
    torch.testing.assert_close(Phi @ sol[:-T], vector_valued.reduced_gram(k0, B, task) @ fit.alpha,
                               rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_converged_stochastic_fit_equals_the_reduced_closed_form():
    x, own, _, task, fx = two_tasks(8)
    B = torch.tensor([[1.0, 0.4], [0.4, 0.8]], dtype=D)
    k0 = vector_valued.base_gram(RBFKernel(2, lengthscale=1.0).double(), x, own)
    fit = vector_valued.closed_form(k0, B, task, fx, 1e-2)
    sgd = vector_valued.fit_stochastic(k0, task, fx, lam=1e-2, B=B, steps=1500, lr=0.2)
    torch.testing.assert_close(sgd.beta, fit.beta, rtol=0, atol=5e-3)


def test_learned_b_stays_positive_definite_and_gets_gradients():
    x, own, _, task, fx = two_tasks()
    k0 = vector_valued.base_gram(RBFKernel(2).double(), x, own)
    fit = vector_valued.fit_stochastic(k0, task, fx, lam=1e-2, B=torch.eye(2, dtype=D),
                                       learn_B=True, steps=50)
    assert torch.linalg.eigvalsh(fit.B).min() > 0
    assert not torch.allclose(fit.B, torch.eye(2, dtype=D))


def test_profiled_minimiser_is_the_closed_form_and_batches():
    x, own, _, task, fx = two_tasks()
    B = torch.tensor([[1.0, 0.4], [0.4, 0.8]], dtype=D)
    k0 = vector_valued.base_gram(RBFKernel(2).double(), x, own)
    fit = vector_valued.closed_form(k0, B, task, fx, 1e-2)
    alpha, beta = vector_valued.profiled_minimiser(k0[None].expand(3, -1, -1), B, task,
                                                   fx.expand(3, -1), torch.full((3,), 1e-2, dtype=D))
    torch.testing.assert_close(beta, fit.beta.expand(3, -1), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(alpha, fit.alpha.expand(3, -1), rtol=1e-9, atol=1e-9)


def test_profiled_learned_b_reaches_a_lower_objective_than_joint_adam():
    """Both minimise Eq. 4.8 + ||B||^2 from B = I; with (alpha, beta) exact at every B the
    objective ends lower, and B stays positive definite."""
    x, own, _, task, fx = two_tasks()
    k0 = vector_valued.base_gram(RBFKernel(2).double(), x, own)
    eye = torch.eye(2, dtype=D)

    def objective(fit):
        return float(vector_valued.loss(k0, fit.B, task, fx, fit.alpha, fit.beta, 1e-2)
                     + fit.B.pow(2).sum())

    profiled = vector_valued.fit_profiled(k0, task, fx, lam=1e-2, B=eye, steps=60)
    joint = vector_valued.fit_stochastic(k0, task, fx, lam=1e-2, B=eye, learn_B=True, steps=60)
    assert torch.linalg.eigvalsh(profiled.B).min() > 0
    assert objective(profiled) < objective(joint)


# -- meta-learned CVs ------------------------------------------------------------------------------

def gaussian_tasks(T: int, n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(T, 1, generator=g, dtype=D) + 0.5
    x = torch.randn(T, n, 1, generator=g, dtype=D)
    return x, -x, torch.sin(a * x[..., 0]) + a * x[..., 0] ** 2


def test_zero_inner_steps_is_the_identity():
    x, s, f = gaussian_tasks(3, 10)
    meta = neural.MetaCV(1, hidden=(8,), steps=0)
    theta = meta.adapt(x, s, f)
    for p, q in zip(theta, meta.params):
        torch.testing.assert_close(p, q.expand_as(p))


def test_one_inner_step_of_a_linear_cv_is_the_analytic_step():
    x, s, f = gaussian_tasks(2, 10)
    params = [torch.tensor([[0.3]], dtype=D), torch.tensor([-0.2], dtype=D)]  # u = w x + b
    lr = 0.05
    theta = neural.adapt(params, x, s, f, steps=1, lr=lr, boundary=False, rule="sgd")
    # g = L'[u] = w + (w x + b) s: features (1 + x s, s); loss = mean (r - mean r)^2
    phi = torch.stack([1 + x[..., 0] * s[..., 0], s[..., 0]], -1)  # [T, n, 2]
    w = torch.tensor([0.3, -0.2], dtype=D)
    r = f - phi @ w
    rc, phic = r - r.mean(-1, keepdim=True), phi - phi.mean(-2, keepdim=True)
    grad = -2 * (phic * rc[..., None]).mean(-2)  # [T, 2]
    step = w - lr * grad
    torch.testing.assert_close(theta[0][:, 0, 0], step[:, 0])
    torch.testing.assert_close(theta[1][:, 0], step[:, 1])


def test_inner_adam_is_torch_adam_per_task():
    """Three inner Adam steps on two tasks at once equal ``torch.optim.Adam`` run on each task
    alone (its moments are per task); the first step moves every parameter by ~``lr``."""
    x, s, f = gaussian_tasks(2, 10, seed=5)
    params = neural.init_params(1, (6,), generator=torch.Generator().manual_seed(1))
    lr = 0.03
    theta = neural.adapt(params, x, s, f, steps=3, lr=lr, boundary=False, penalty=1e-3)
    one = neural.adapt(params, x, s, f, steps=1, lr=lr, boundary=False, penalty=1e-3)
    for p, q in zip(one, params):
        moved = (p.detach() - q).abs()
        assert 0.99 * lr < float(moved.min()) and float(moved.max()) <= lr * (1 + 1e-12)
    for t in range(2):
        own = [p.clone().requires_grad_(True) for p in params]
        opt = torch.optim.Adam(own, lr=lr)
        for _ in range(3):
            opt.zero_grad()
            neural.task_loss(own, x[t], s[t], f[t], False, 1e-3).sum().backward()
            opt.step()
        for p, q in zip(theta, own):
            torch.testing.assert_close(p[t].detach(), q.detach(), rtol=1e-12, atol=1e-14)


def test_inner_rule_default_is_the_thesis_adam():
    assert neural.MetaCV(1, hidden=(4,)).inner_rule == "adam"
    assert MetaControlVariate.hyperparameters["inner_rule"].default == "adam"
    assert MetaCVEstimator().inner_rule == "adam"
    with pytest.raises(ValueError, match="inner rule"):
        neural.MetaCV(1, hidden=(4,), inner_rule="rmsprop")
    with pytest.raises(HyperParameterError, match="inner_rule"):
        MetaCVEstimator(inner_rule="rmsprop")


def test_inner_adam_meta_gradient_is_finite_where_a_gradient_is_exactly_zero():
    """Centred outputs make the last bias's gradient exactly zero: Adam's square root at a zero
    second moment must not turn the second-order meta-gradient into NaN."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 8, 2, generator=g, dtype=D)
    f = torch.softmax(x, -1)
    meta = neural.MetaCV(2, hidden=(5,), outputs=2, steps=2, inner_lr=0.05, centre=True)
    grads = torch.autograd.grad(meta.meta_loss(x, -x, f), list(meta.params))
    assert all(bool(torch.isfinite(gr).all()) for gr in grads)
    assert float(grads[0].abs().sum()) > 0


@pytest.mark.parametrize("rule", neural.INNER_RULES)
def test_second_order_meta_gradient_equals_finite_differences(rule):
    x, s, f = gaussian_tasks(2, 8, seed=3)
    meta = neural.MetaCV(1, hidden=(3,), steps=2, inner_lr=0.1, penalty=0.0, inner_rule=rule)
    loss = meta.meta_loss(x, s, f)
    grads = torch.autograd.grad(loss, list(meta.params))
    eps = 1e-6
    for i, j in ((0, (0, 1)), (2, (1, 0)), (1, (2,))):
        p = meta.params[i]
        with torch.no_grad():
            p[j] += eps
            up = float(meta.meta_loss(x, s, f))
            p[j] -= 2 * eps
            down = float(meta.meta_loss(x, s, f))
            p[j] += eps
        assert float(grads[i][j]) == pytest.approx((up - down) / (2 * eps), rel=1e-5, abs=1e-9)
    meta.first_order = True
    first = torch.autograd.grad(meta.meta_loss(x, s, f), list(meta.params))
    assert not torch.allclose(first[0], grads[0])


def test_adapted_meta_cv_keeps_the_stein_identity_on_a_new_task():
    x, s, f = gaussian_tasks(1, 10, seed=7)
    meta = neural.MetaCV(1, hidden=(8,), steps=1, inner_lr=0.1)
    theta = meta.adapt(x, s, f)
    z = torch.randn(1, 200_000, 1, dtype=D)
    g = neural.stein_values([p.detach() for p in theta], z, -z, False)
    assert abs(float(g.mean())) < 4 * float(g.std()) / math.sqrt(z.shape[1])


@pytest.mark.parametrize("boundary", [False, True])
def test_forward_mode_stein_values_equal_the_autograd_operator(boundary):
    """The layer-by-layer slope of every output (centred or not) equals ``L'[u_k 1]`` by autograd
    (``zoo.stein.first_order``), with a leading task axis."""
    g = torch.Generator().manual_seed(0)
    params = [p.expand(2, *p.shape).clone() for p in
              neural.init_params(3, (5, 4), outputs=3, generator=g, scale=0.7)]
    x = torch.rand(2, 6, 3, generator=g, dtype=D)
    s = torch.randn(2, 6, 3, generator=g, dtype=D)
    for centre in (False, True):
        ours = neural.stein_values(params, x, s, boundary, centre)
        for k in range(3):
            ref = first_order(lambda z, k=k, c=centre: neural.potential(params, z, boundary, c)[..., k],
                              x, s)
            torch.testing.assert_close(ours[..., k], ref, rtol=1e-10, atol=1e-12)
    assert neural.potential(params, x, boundary, True).sum(-1).abs().max() < 1e-12


def test_stein_kernel_of_the_gaussian_estimator_matches_the_whitened_score():
    z = torch.randn(6, 3, dtype=D)
    kernel = RBFKernel(3).double()
    torch.testing.assert_close(stein_kernel(kernel, z, z, -z, -z),
                               stein_kernel(kernel, z, z, -z, -z).T)


def test_vv_cv_estimator_with_zero_correlation_is_each_task_alone():
    """B = I decouples the queries' vv-CV into one GLS control functional per query (each on its
    own draws); a positive correlation couples them."""
    mean = torch.randn(3, 2, dtype=D, generator=torch.Generator().manual_seed(0))
    var = torch.rand(3, 2, dtype=D, generator=torch.Generator().manual_seed(1)) + 0.1

    def g(f):
        return torch.sin(f) + f.pow(2)

    est = build_estimator("vv-cv[samples=12,tasks=3,correlation=0.0,lengthscale=1.5]", ESTIMATORS)
    e = est.expect(g, mean, var, seed=4)
    z = est.task_draws(2, 3, 4)
    kernel = RBFKernel(2, lengthscale=1.5, learn_outputscale=False).double()
    flat = z.reshape(-1, 2)
    k0 = stein_kernel(kernel, flat, flat, -flat, -flat).detach()
    lam = est.lam * float(k0.diagonal().mean()) * 12
    for t in range(3):
        K0 = stein_kernel(kernel, z[t], z[t], -z[t], -z[t])
        beta, _, _ = linear.gls_fit(K0, g(mean[t] + var[t].sqrt() * z[t]), lam)
        torch.testing.assert_close(e.value[t], beta, rtol=1e-8, atol=1e-10)
    assert torch.isfinite(e.stderr).all() and (e.stderr > 0).all()
    coupled = build_estimator("vv-cv[samples=12,tasks=3,correlation=0.5,lengthscale=1.5]", ESTIMATORS)
    assert not torch.allclose(coupled.expect(g, mean, var, seed=4).value, e.value)


@pytest.mark.parametrize("boundary", [False, True])
def test_forward_mode_divergence_of_the_vector_field_equals_the_autograd_operator(boundary):
    """``field="vector"``: ``div u_k + u_k . s`` by ``d`` forward tangents equals ``L'[u_k]`` by
    autograd for every integrand ``k`` (centred or not), with a leading task axis."""
    g = torch.Generator().manual_seed(1)
    params = [p.expand(2, *p.shape).clone() for p in
              neural.init_params(3, (5, 4), outputs=2 * 3, generator=g, scale=0.7)]
    x = torch.rand(2, 6, 3, generator=g, dtype=D)
    s = torch.randn(2, 6, 3, generator=g, dtype=D)
    for centre in (False, True):
        ours = neural.stein_values(params, x, s, boundary, centre, "vector")
        for k in range(2):
            ref = first_order(lambda z, k=k, c=centre: neural.potential(
                params, z, boundary, c, "vector")[..., k, :], x, s)
            torch.testing.assert_close(ours[..., k], ref, rtol=1e-10, atol=1e-12)


def test_the_ones_field_cannot_remove_variation_across_the_ones_direction():
    """``L'[u 1_d]`` has mean zero given the components orthogonal to ``1_d`` (under N(0, I)), so a
    fit of ``f = x_1 - x_2`` (orthogonal to ``1_d``) removes nothing, while the vector field
    removes it (a linear field ``u = (1, -1)`` is exact)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 400, 2, generator=g, dtype=D)
    f = x[..., 0] - x[..., 1]
    fits = {field: neural.fit_neural_cv(x, -x, f, hidden=(16,), epochs=40, batch=200, lr=0.02,
                                        mode="intercept", field=field, seed=0)
            for field in neural.FIELDS}
    residual = {field: float(e.stderr[0, 0]) * math.sqrt(400) for field, e in fits.items()}
    assert residual["ones"] > 0.95 * float(f.std())
    assert residual["vector"] < 0.2 * float(f.std())


def test_the_ones_field_bound_of_the_diagnostic_script():
    """``benchmarks/control_variates/ones_field.py`` splits ``Var f`` into ``Var E[f | y]`` (what
    ``u 1_d`` cannot remove) and the rest: in 2-d, ``z_1 - z_2`` is all across ``1_d`` (2 of 2),
    ``z_1`` half (1/2 of 1) and ``z_1 + z_2`` all along it (0 of 2)."""
    from ..conftest import load_benchmark

    script = load_benchmark("control_variates/ones_field.py")
    between, total = script.line_moments(
        lambda z: torch.stack([z[:, 0] - z[:, 1], z[:, 0], z.sum(-1)], -1), 2, 20_000, 20, 0)
    assert between == pytest.approx(2.5, rel=0.05)
    assert total == pytest.approx(5.0, rel=0.05)


# -- the control functional's nugget ---------------------------------------------------------------

def test_control_functional_nugget_maximises_the_stein_marginal_likelihood_jointly():
    """On noisy values the joint (lengthscale, nugget) choice is the grid's maximum of the
    profiled Stein marginal likelihood, and it is not the near-interpolating 1e-8."""
    g = torch.Generator().manual_seed(4)
    z = torch.randn(24, 1, generator=g, dtype=D)
    y = (torch.sin(2 * z[:, 0]) + 0.3 * torch.randn(24, generator=g, dtype=D))[:, None]
    chosen = linear.select_stein_kernel([(z, -z, y)], nugget=linear.NUGGETS)
    best = max(
        (float(linear.gls_fit(K0, y, lam * K0.diagonal().mean())[2]), ell, lam)
        for ell in linear.LENGTHSCALES  # times sqrt(d) = 1
        for K0 in [stein_kernel(RBFKernel(1, lengthscale=ell, learn_outputscale=False).double(),
                                z, z, -z, -z).detach()]
        for lam in linear.NUGGETS)
    assert chosen.nugget == best[2] > 1e-8
    assert float(chosen.kernel.lengthscale.detach()) == pytest.approx(best[1], rel=1e-6)
    assert float(chosen.fits[0][2]) == pytest.approx(best[0], rel=1e-12)
    with pytest.raises(ValueError, match="positive"):
        linear.select_stein_kernel([(z, -z, y)], nugget=(1e-3, 0.0))


@pytest.mark.parametrize("mode, boundary", [("intercept", False), ("split", False),
                                            ("split", True)])
def test_batched_control_functionals_equal_the_search_one_task_at_a_time(mode, boundary):
    """Every task of the batched search gets the estimate of its own (lengthscale, nugget) search,
    written here one candidate and one task at a time by the summed selection on that task alone:
    the same choice (tasks whose best candidates differ are in the batch) and the same fit."""
    g = torch.Generator().manual_seed(8)
    T, n, d = 6, 14, 2
    if boundary:
        x = torch.rand(T, n, d, generator=g, dtype=D)
        score = torch.zeros_like(x)
    else:
        x = 0.5 + 2 * torch.randn(T, n, d, generator=g, dtype=D)
        score = -(x - 0.5) / 4
    smooth = torch.linspace(0.3, 3, T, dtype=D)[:, None]
    noise = torch.linspace(0, 0.5, T, dtype=D)[:, None] * torch.randn(T, n, generator=g, dtype=D)
    fx = (torch.cos(smooth * x.sum(-1)) + noise)[..., None]
    batched = linear.control_functionals(x, score, fx, mode=mode, boundary=boundary)
    m = n if mode == "intercept" else n // 2
    picks = set()
    for t in range(T):
        if boundary:
            z, s = x[t], score[t]
        else:
            centre, scale = linear.standardiser(x[t, :m])
            z, s = (x[t] - centre) / scale, score[t] * scale
        chosen = linear.select_stein_kernel([(z[:m], s[:m], fx[t, :m])], boundary=boundary,
                                            nugget=linear.NUGGETS)
        base = chosen.kernel.inner if boundary else chosen.kernel
        picks.add((float(base.lengthscale.detach()), chosen.nugget))
        beta, alpha, _ = chosen.fits[0]
        if mode == "intercept":
            value = beta
        else:
            cross = stein_kernel(chosen.kernel, z[m:], z[:m], s[m:], s[:m]).detach()
            value = (fx[t, m:] - cross @ alpha).mean(0)
        assert float(batched.value[t, 0]) == pytest.approx(float(value[0]), rel=1e-10, abs=1e-12)
        single = linear.control_functional(x[t], score[t], fx[t], mode=mode, boundary=boundary)
        assert float(single.value[0]) == pytest.approx(float(batched.value[t, 0]), abs=1e-12)
        assert float(single.stderr[0]) == pytest.approx(float(batched.stderr[t, 0]), rel=1e-9)
    assert len(picks) > 1  # the tasks chose differently


def test_control_functional_method_chooses_its_nugget_unless_given():
    from zoo.control_variates.methods import ControlFunctional
    from zoo.tasks.integration import IntegrationProblem

    g = torch.Generator().manual_seed(6)
    x = torch.randn(30, 1, generator=g, dtype=D)
    f = (x[:, 0] > 0).to(D)  # the step: a near-interpolating CF removes nothing
    problem = IntegrationProblem(x, f, -x, {})
    chosen = ControlFunctional(dim=1).estimate(problem).value
    at = {lam: float(linear.control_functional(x, -x, f[:, None], nugget=lam).value[0])
          for lam in linear.NUGGETS}
    z = (x - x.mean(0)) / x.std(0)
    picked = linear.select_stein_kernel([(z, -z * x.std(0), f[:, None])],
                                        nugget=linear.NUGGETS).nugget
    assert picked > 1e-8
    assert chosen == pytest.approx(at[picked], abs=1e-12)
    assert ControlFunctional(dim=1, nugget=1e-8).estimate(problem).value == pytest.approx(
        at[1e-8], abs=1e-12)
