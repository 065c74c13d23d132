"""Correctness of MD-BFSC: each formula against an independent derivation or a closed form."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from torch import Tensor
from zoo_md_bfsc.inference import gradient_descent, mirror_descent
from zoo_md_bfsc.method import MDBFSC

from zoo import Episode, NumericalError, build_method
from zoo.backbones import Backbone
from zoo.inference import DTYPE, Expectations, SoftmaxLikelihood, standard_normal_draws
from zoo.kernels import RBFKernel
from zoo.testing import (
    GaussianLikelihood,
    build_for_tests,
    check_algebra_routes,
    check_batched_meta_loss,
    exact_expected_log_softmax,
    registry,
    softmax_marginals,
    toy_episode,
)

torch.set_num_threads(1)


def random_spd(C: int, n: int, seed: int = 0) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(C, n, n, generator=g, dtype=DTYPE)
    return A @ A.transpose(-1, -2) / n + 0.5 * torch.eye(n, dtype=DTYPE)


class AutogradLikelihood:
    """A likelihood whose derivatives are autograd of its exact (quadrature) expectation."""

    def __init__(self, onehot: Tensor):
        self.onehot = onehot

    def ell(self, mean: Tensor, var: Tensor) -> Tensor:
        return exact_expected_log_softmax(self.onehot, mean, var, nodes=30)

    def expectations(self, mean: Tensor, var: Tensor) -> Expectations:
        with torch.enable_grad():
            m, v = mean.detach().requires_grad_(), var.detach().requires_grad_()
            ell = self.ell(m, v)
            g_m, g_v = torch.autograd.grad(ell.sum(), (m, v))
        return Expectations(self.ell(mean, var), g_m, g_v)


# -- likelihood expectations -------------------------------------------------------------------


def test_estimator_error_at_the_default_draws_is_below_the_authors_monte_carlo():
    """RMSE of (g_m, g_v) against tensor Gauss-Hermite quadrature (exact to ~1e-12), over 8
    seeds: MD-BFSC's estimator (256 antithetic Sobol draws, float32) is more accurate than the
    authors' 10,000 plain Monte Carlo draws, and within 1e-3."""
    onehot, mean, var = softmax_marginals(N=12, C=3, seed=6)
    var = 0.3 + 1.5 * var  # spread like test-point marginals
    m, v = mean.clone().requires_grad_(), var.clone().requires_grad_()
    dm, dv = torch.autograd.grad(exact_expected_log_softmax(onehot, m, v).sum(), (m, v))
    exact = torch.cat([dm.flatten(), dv.flatten()])

    def rmse(samples: int, method: str) -> float:
        errs = []
        for seed in range(8):
            draws = standard_normal_draws(samples, 3, method=method, seed=seed)
            e = SoftmaxLikelihood(onehot, draws).expectations(mean, var)
            errs.append(torch.cat([e.g_m.flatten(), e.g_v.flatten()]) - exact)
        return torch.stack(errs).pow(2).mean().sqrt().item()

    ours = rmse(MDBFSC.all_defaults()["samples_train"], "sobol")
    assert ours < rmse(10_000, "mc")
    assert ours < 1e-3


# -- inner loops --------------------------------------------------------------------------------

def test_conjugate_case_one_step_with_rho_one_is_the_exact_posterior():
    K = random_spd(2, 5)
    y = torch.randn(5, 2, generator=torch.Generator().manual_seed(4), dtype=DTYPE)
    noise = 0.3
    post = mirror_descent(K, GaussianLikelihood(y, noise), steps=1, rho=1.0).posterior
    A = K + noise * torch.eye(5, dtype=DTYPE)
    exact_mean = (K @ torch.linalg.solve(A, y.T[..., None]))[..., 0]
    exact_cov = K - K @ torch.linalg.solve(A, K)
    assert torch.allclose(post.mean, exact_mean, atol=1e-10)
    assert torch.allclose(post.cov, exact_cov, atol=1e-10)
    again = mirror_descent(K, GaussianLikelihood(y, noise), steps=4, rho=1.0).posterior
    assert torch.allclose(again.mean, exact_mean, atol=1e-10)  # a fixed point


def _natural_gradient_step(K: Tensor, lik: AutogradLikelihood, m: Tensor, S: Tensor,
                           rho: float) -> tuple[Tensor, Tensor]:
    """One natural-gradient step on the ELBO in the natural parameters of full Gaussians
    (``theta1 = S^-1 m``, ``theta2 = -S^-1 / 2``, lower triangle free), with the Fisher taken as the
    autograd Hessian of the log-partition function. Independent of any site algebra."""
    C, n = m.shape
    rows, cols = torch.tril_indices(n, n)

    def unpack(theta: Tensor) -> tuple[Tensor, Tensor]:
        t1 = theta[: C * n].reshape(C, n)
        L = torch.zeros(C, n, n, dtype=DTYPE)
        L[:, rows, cols] = theta[C * n:].reshape(C, -1)
        t2 = L + L.transpose(-1, -2) - torch.diag_embed(torch.diagonal(L, dim1=-2, dim2=-1))
        return t1, t2

    def log_partition(theta: Tensor) -> Tensor:
        t1, t2 = unpack(theta)
        P = -2 * t2
        return (0.5 * (t1[..., None, :] @ torch.linalg.solve(P, t1[..., None]))[..., 0, 0]
                - 0.5 * torch.logdet(P)).sum()

    def objective(theta: Tensor) -> Tensor:
        t1, t2 = unpack(theta)
        cov = torch.linalg.inv(-2 * t2)
        mean = (cov @ t1[..., None])[..., 0]
        Kinv = torch.linalg.inv(K)
        kl = 0.5 * (torch.einsum("cij,cji->c", Kinv, cov) + (mean[..., None, :] @ Kinv
                    @ mean[..., None])[..., 0, 0] - n + torch.logdet(K) - torch.logdet(cov))
        return lik.ell(mean.T, torch.diagonal(cov, dim1=-2, dim2=-1).T).sum() - kl.sum()

    P = torch.linalg.inv(S)
    theta = torch.cat([(P @ m[..., None])[..., 0].reshape(-1), (-0.5 * P)[:, rows, cols].reshape(-1)])
    grad = torch.autograd.functional.jacobian(objective, theta)
    fisher = torch.autograd.functional.hessian(log_partition, theta)
    t1, t2 = unpack(theta + rho * torch.linalg.solve(fisher, grad))
    cov = torch.linalg.inv(-2 * t2)
    return (cov @ t1[..., None])[..., 0], cov


def test_theorem_3_1_mirror_step_equals_natural_gradient_step():
    K = random_spd(2, 3, seed=5)
    lik = AutogradLikelihood(torch.nn.functional.one_hot(torch.tensor([0, 1, 1]), 2).to(DTYPE))
    rho = 0.4
    q1 = mirror_descent(K, lik, steps=1, rho=rho).posterior
    q2 = mirror_descent(K, lik, steps=2, rho=rho).posterior
    mean, cov = _natural_gradient_step(K, lik, q1.mean, q1.cov, rho)
    assert torch.allclose(q2.mean, mean, atol=1e-8)
    assert torch.allclose(q2.cov, cov, atol=1e-8)
    assert (q2.mean - q1.mean).abs().max() > 1e-2  # the step moved


def test_elbo_does_not_decrease_for_small_rho_on_a_fixed_kernel():
    K = random_spd(3, 8, seed=6)
    onehot = torch.nn.functional.one_hot(torch.arange(8) % 3, 3).to(DTYPE)
    lik = SoftmaxLikelihood(onehot, standard_normal_draws(1024, 3, seed=7))
    for run in (mirror_descent, gradient_descent):
        elbo = torch.tensor(run(K, lik, steps=30, rho=0.05, trace=True).elbo)
        assert len(elbo) == 31
        assert (elbo.diff() >= -1e-6 * elbo.abs().max()).all(), (run.__name__, elbo)
        assert elbo[-1] > elbo[0] + 0.1


def test_mirror_descent_converges_in_fewer_steps_each_at_its_best_step_size():
    """The paper's claim, compared fairly: rho is a step in different coordinates for MD (a convex
    combination of sites) and GD (moment or whitened parameters), so equal numbers are not equal
    steps; each method gets its best step size from a grid, and the steps to reach the common
    optimum (within 1e-3 relative) are compared."""

    K = random_spd(3, 8, seed=6)
    onehot = torch.nn.functional.one_hot(torch.arange(8) % 3, 3).to(DTYPE)
    lik = SoftmaxLikelihood(onehot, standard_normal_draws(256, 3, seed=7))
    optimum = mirror_descent(K, lik, steps=200, rho=0.5, trace=True).elbo[-1]

    def steps_to_optimum(run, rho: float, **options) -> float:
        try:
            elbo = run(K, lik, steps=30, rho=rho, trace=True, **options).elbo
        except NumericalError:
            return math.inf
        return next((t for t, e in enumerate(elbo) if e >= optimum - 1e-3 * abs(optimum)),
                    math.inf)

    md = min(steps_to_optimum(mirror_descent, r) for r in (0.1, 0.2, 0.5, 1.0))
    for parameterisation, grid in [("whitened", (0.03, 0.1, 0.3, 1.0, 2.0)),
                                   ("moment", (1e-3, 0.01, 0.1, 0.3, 1.0))]:
        gd = min(steps_to_optimum(gradient_descent, r, parameterisation=parameterisation)
                 for r in grid)
        assert md < gd, (parameterisation, md, gd)
    assert md <= 2


def test_gradient_descent_parameterisations_agree_on_the_same_family():
    K = random_spd(2, 4, seed=8)
    onehot = torch.nn.functional.one_hot(torch.tensor([0, 1, 0, 1]), 2).to(DTYPE)
    lik = SoftmaxLikelihood(onehot, standard_normal_draws(512, 2, seed=9))
    a = gradient_descent(K, lik, steps=1000, rho=0.1, trace=True, parameterisation="moment")
    b = gradient_descent(K, lik, steps=300, rho=0.1, trace=True, parameterisation="whitened")
    c = mirror_descent(K, lik, steps=50, rho=0.5, trace=True)
    assert a.elbo[0] == pytest.approx(b.elbo[0])
    # all three reach the same optimum of the same objective
    assert a.elbo[-1] == pytest.approx(c.elbo[-1], abs=1e-6)
    assert b.elbo[-1] == pytest.approx(c.elbo[-1], abs=1e-6)
    Kq = K[..., :2]
    assert torch.allclose(b.posterior.predict(Kq, torch.diagonal(K, dim1=-2, dim2=-1)[..., :2])[0],
                          c.posterior.predict(Kq, torch.diagonal(K, dim1=-2, dim2=-1)[..., :2])[0],
                          atol=1e-5)


def test_moment_gradient_descent_diverging_names_the_episode():
    K = random_spd(2, 6, seed=10) * 1e-2
    onehot = torch.nn.functional.one_hot(torch.arange(6) % 2, 2).to(DTYPE)
    lik = SoftmaxLikelihood(onehot, standard_normal_draws(64, 2, seed=1))
    with pytest.raises(NumericalError, match="toy/test#3"):
        gradient_descent(K, lik, steps=20, rho=1.0, parameterisation="moment",
                         episode="toy/test#3")



@pytest.mark.parametrize("parameterisation, rho", [("moment", 1.0), ("whitened", 1.0)])
def test_gradient_descent_divergence_raises_instead_of_jitter_repair(parameterisation, rho):
    """A step that makes the covariance indefinite is a divergence: it raises naming the episode,
    and the jitter policy (for the prior's K only) is never used on the iterate, whose jittered
    factor would give the KL a different Gaussian than the variances."""
    from zoo.inference import JitterPolicy

    K = random_spd(2, 6, seed=10) * (1e-2 if parameterisation == "moment" else 100.0)
    onehot = torch.nn.functional.one_hot(torch.arange(6) % 2, 2).to(DTYPE)
    lik = SoftmaxLikelihood(onehot, standard_normal_draws(64, 2, seed=1))
    jitter = JitterPolicy()
    with pytest.raises(NumericalError, match="toy/test#3.*diverged"):
        gradient_descent(K, lik, steps=20, rho=rho, parameterisation=parameterisation,
                         jitter=jitter, episode="toy/test#3")
    assert jitter.uses == 0


def test_covariance_factor_never_jitters_a_barely_indefinite_iterate():
    from zoo.inference import covariance_factor

    S = torch.eye(3, dtype=DTYPE)
    S[2, 2] = -1e-12  # one jitter step would have "repaired" it
    with pytest.raises(NumericalError, match="episode e#1.*not positive definite"):
        covariance_factor(S, "whitened covariance S", "e#1")


# -- the methods --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["md-bfsc", "gd-bfsc"])
def test_predictions_invariant_to_support_order_and_equivariant_to_relabelling(name):
    method = build_for_tests(name, 3, samples_test=2048).eval()
    ep = toy_episode(3, 2, query=3)
    with torch.no_grad():
        probs = method.predict(ep).probs
        perm = torch.randperm(6, generator=torch.Generator().manual_seed(0))
        shuffled = replace(ep, support_x=ep.support_x[perm], support_y=ep.support_y[perm])
        assert torch.allclose(method.predict(shuffled).probs, probs, atol=1e-6)
        relabel = torch.tensor([2, 0, 1])
        renamed = replace(ep, support_y=relabel[ep.support_y], query_y=relabel[ep.query_y])
        moved = method.predict(renamed).probs
    # class c is now called relabel[c]; equal up to the estimator's error (draws are per column)
    assert torch.allclose(moved[:, relabel], probs, atol=1e-2)
    # the decision is the same wherever the top two are further apart than that error
    top2 = probs.topk(2, dim=1).values
    clear = top2[:, 0] - top2[:, 1] > 2 * (moved[:, relabel] - probs).abs().max()
    assert clear.sum() >= probs.shape[0] // 2
    assert torch.equal(moved[clear][:, relabel].argmax(1), probs[clear].argmax(1))


class Pixels(Backbone):
    feature_dim = 28 * 28

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(1)


def test_predict_reports_the_inner_objective_and_is_accurate_on_separable_data():
    method = registry().get("methods", "md-bfsc")(
        Pixels(), way=5, kernel=RBFKernel(28 * 28, lengthscale=0.5)).eval()
    ep = toy_episode(5, 5, query=4)
    with torch.no_grad():
        pred = method.predict(ep)
    assert len(pred.extras["inner_objective"]) == method.hparams["steps_test"] + 1
    assert (pred.probs.argmax(1) == ep.query_y).float().mean() > 0.9
    elbo = torch.tensor(pred.extras["inner_objective"])
    assert elbo[-1] > elbo[0]


def test_predictive_loss_option_trains():
    method = build_for_tests("md-bfsc", 3, loss="predictive").train()
    loss = method.meta_loss(toy_episode(3, 2, query=3))
    loss.backward()
    assert torch.isfinite(loss) and loss > 0


class NaNBackbone(Backbone):
    feature_dim = 4

    def forward(self, x: Tensor) -> Tensor:
        return torch.full((x.shape[0], 4), float("nan"))


def test_non_finite_features_name_the_episode():
    method = registry().get("methods", "md-bfsc")(
        NaNBackbone(), way=2, kernel=RBFKernel(4))
    with pytest.raises(NumericalError, match=r"toy/test#0"):
        method.predict(toy_episode(2, 1))


def test_registers_methods_and_the_convergence_suite():
    reg = registry()
    assert {"md-bfsc", "gd-bfsc"} <= set(reg.names("methods"))
    import tomllib

    with open(reg.get("suites", "md-convergence"), "rb") as f:
        assert tomllib.load(f)["suite"]["entry"] == "zoo_md_bfsc.convergence:run"


def test_convergence_suite_writes_the_documented_json_and_figures(tmp_path):
    from zoo_md_bfsc.convergence import run

    run(tmp_path, None, "cpu", {"shots": [1], "episodes": 1, "query": 2, "inner_iterations": 3,
                                "outer_iterations": 2, "md_rhos": [1.0], "gd_rhos": [0.1],
                                "gd_moment_rhos": [1e-3], "val_every": 1, "val_episodes": 2})
    out = json.loads((tmp_path / "convergence.json").read_text())
    for variant in ("md", "gd", "gd_moment"):
        assert len(out["inner"][variant]["1-shot"]) == 4
        assert out["inner_best"][variant]["1-shot"]["rho"] > 0
    for variant in ("md", "gd"):
        assert len(out["outer"][variant]["1-shot"]) == 2
        val = out["outer_val"][variant]["1-shot"]
        assert [v["iteration"] for v in val] == [0, 1, 2] and 0 <= val[-1]["accuracy"] <= 1
    for md, gd, diff in zip(out["outer_val"]["md"]["1-shot"], out["outer_val"]["gd"]["1-shot"],
                            out["outer_val_diff"]["1-shot"]):
        assert diff["iteration"] == md["iteration"] == gd["iteration"]
        for score in ("loss", "accuracy"):  # a paired mean difference is the difference of means
            assert diff[score] == pytest.approx(md[score] - gd[score])
            assert md[f"{score}_ci"] >= 0 and diff[f"{score}_ci"] >= 0
    assert out["inner_best"]["md"]["1-shot"]["elbo"][-1] > out["inner"]["md"]["1-shot"][0]
    assert (tmp_path / "inner.png").stat().st_size > 0 and (tmp_path / "outer.png").exists()


def test_convergence_outer_study_can_train_with_each_methods_own_inner_loop(tmp_path, caplog):
    from zoo_md_bfsc.convergence import run

    settings = {"shots": [1], "episodes": 1, "query": 2, "inner_iterations": 1,
                "outer_iterations": 1, "md_rhos": [1.0], "gd_rhos": [0.1],
                "gd_moment_rhos": [1e-3], "val_every": 0, "outer_inner": "defaults"}
    run(tmp_path, None, "cpu", settings)
    out = json.loads((tmp_path / "convergence.json").read_text())
    assert len(out["outer"]["md"]["1-shot"]) == 1 and out["outer_val_diff"]["1-shot"] == []
    with pytest.raises(ValueError, match="outer_inner"):
        run(tmp_path, None, "cpu", {**settings, "outer_inner": "own"})


@pytest.mark.parametrize("kernel", ["cosine", "linear"])
def test_feature_route_equals_dense_route(kernel):
    check_algebra_routes(MDBFSC, "query_predictive", kernel=kernel)
def test_convergence_study_refuses_to_choose_step_sizes_on_test_episodes(tmp_path):
    from zoo_md_bfsc.convergence import run

    with pytest.raises(ValueError, match="never the test split"):
        run(tmp_path, None, "cpu", {"split": "test"})


@pytest.mark.parametrize("loss", ["elbo", "predictive"])
def test_meta_gradient_equals_finite_differences(loss):
    """The meta-gradient through the unrolled inner loop (mirror descent, sites, Cholesky, the
    expectation rule's fixed draws) against central differences of the meta-loss in the kernel's
    lengthscale and the features' scale."""
    from zoo.testing import IdentityBackbone

    g = torch.Generator().manual_seed(0)
    sx, qx = torch.randn(6, 3, generator=g), torch.randn(6, 3, generator=g)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    ep = Episode(sx.double(), y, qx.double(), y, way=3, shot=2, info={"seed": 7})
    method = MDBFSC(IdentityBackbone(3, learnable=True), way=3, kernel=RBFKernel(3),
                    loss=loss, samples_train=64, normalize=False).double()
    params = [method.backbone.scale, method.kernel.raw_lengthscale]

    def meta_loss() -> Tensor:
        """``meta_loss`` before its cast to float32 (which would swamp the differences)."""
        if loss == "predictive":
            probs, _ = method.query_probs(ep, steps=3, rho=1.0, samples=64)
            return -probs[torch.arange(6), y].log().mean()
        K, labels = method.labelled_kernel(ep)
        return -method.run_inner(K, labels, ep, steps=3, rho=1.0, samples=64,
                                 final_elbo=True).final_elbo / labels.numel()

    with torch.no_grad():
        assert float(meta_loss()) == pytest.approx(float(method.meta_loss(ep)), rel=1e-6)
    grads = torch.autograd.grad(meta_loss(), params)
    h = 1e-2  # the per-draw work is float32 (~1e-7): smaller steps difference its rounding
    for p, grad in zip(params, grads):
        with torch.no_grad():
            p += h
            up = float(meta_loss())
            p -= 2 * h
            down = float(meta_loss())
            p += h
        assert float(grad) == pytest.approx((up - down) / (2 * h), rel=1e-3, abs=1e-6)


@pytest.mark.parametrize("kernel,way,shot,seed", [("cosine", 5, 1, 0), ("cosine", 5, 20, 1),
                                                  ("cosine", 12, 5, 2), ("rbf", 5, 5, 3)])
def test_early_stop_keeps_the_full_loops_answer(kernel, way, shot, seed):
    """The test-time loop stopped at its fixed point (``tol_test``) predicts what all
    ``steps_test`` steps predict, to 1e-5 in every probability, in fewer steps; its ELBO trace
    keeps the full length."""
    method = build_method("md-bfsc", way=way, in_channels=1, image_size=28, backbone="conv4s",
                          seed=seed, kernel=kernel, registry=registry()).eval()
    h = method.hparams
    ep = toy_episode(way, shot, query=6, seed=seed)
    with torch.no_grad():
        full, ran_all = method.query_probs(ep, steps=h["steps_test"], rho=h["rho_test"],
                                           samples=h["samples_test"])
        stopped, ran = method.query_probs(ep, steps=h["steps_test"], rho=h["rho_test"],
                                          samples=h["samples_test"], trace=True,
                                          tol=h["tol_test"])
    assert ran_all.steps_run == h["steps_test"]
    assert ran.steps_run < h["steps_test"] / 2
    assert (stopped - full).abs().max() < 1e-5
    assert len(ran.elbo) == h["steps_test"] + 1
    assert ran.elbo[ran.steps_run:] == [ran.elbo[ran.steps_run]] * (h["steps_test"] + 1
                                                                     - ran.steps_run)


def test_a_zero_tolerance_runs_every_step_and_gd_does_not_stop_by_default():
    K = random_spd(3, 6)
    like = SoftmaxLikelihood(torch.eye(3, dtype=DTYPE)[torch.arange(6) % 3],
                             standard_normal_draws(64, 3, seed=0))
    assert mirror_descent(K, like, 20, 0.5).steps_run == 20
    assert mirror_descent(K, like, 20, 0.5, tol=1e-4).steps_run < 20
    assert registry().get("methods", "gd-bfsc").all_defaults()["tol_test"] == 0


@pytest.mark.parametrize("dtype, rtol, grad_rtol, options", [
    (torch.float32, 1e-6, 1e-5, {}),
    (torch.float64, 1e-10, 1e-10, {}),
    (torch.float64, 1e-10, 1e-10, {"algebra": "features", "kernel": "cosine"}),
    (torch.float64, 1e-10, 1e-10, {"algebra": "nystrom", "inducing": 4}),
], ids=["float32", "float64", "features", "nystrom"])
def test_a_batched_meta_batch_equals_the_episode_loop(dtype, rtol, grad_rtol, options):
    """The ELBO objective: Conv4S's BatchNorm per episode, each episode's own Sobol draws, on
    every algebra route."""
    check_batched_meta_loss("md-bfsc", dtype=dtype, rtol=rtol, grad_rtol=grad_rtol,
                            steps_train=2, samples_train=32, **options)
