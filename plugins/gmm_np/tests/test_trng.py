"""The TRNG update of :mod:`zoo_gmm_np.trng` against closed forms: exact Gaussian targets, Stein
estimates, the trust region, the corrected weight update, and batching."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import MixtureSameFamily, MultivariateNormal, kl_divergence
from zoo_gmm_np import trng
from zoo_gmm_np.gmm import GMM

D = torch.float64


def spd(d: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(d, d, generator=g, dtype=D)
    return scale * (a @ a.T + d * torch.eye(d, dtype=D))


def quadratic(m: torch.Tensor, p: torch.Tensor) -> trng.LogTarget:
    """``log p~(z) = -1/2 (z - m)^T P (z - m)``, for ``z [S, K, T, d]`` (``m [T, d]``,
    ``p [T, d, d]`` or shared)."""
    def f(z: torch.Tensor) -> torch.Tensor:
        r = z - m
        return -0.5 * torch.einsum("...i,...ij,...j->...", r, p, r)
    return f


def single(mean: torch.Tensor, prec: torch.Tensor) -> GMM:
    return GMM(torch.zeros(1, 1, dtype=D), mean[None, None].clone(), prec[None, None].clone())


def test_exact_moments_with_eta_zero_land_on_a_gaussian_target():
    d, p, m = 3, spd(3, 0), torch.tensor([1.0, -2.0, 0.5], dtype=D)
    mean, prec = torch.zeros(1, 1, d, dtype=D), torch.eye(d, dtype=D)[None, None]
    hess, grad = -p[None, None], -(p @ (mean[0, 0] - m))[None, None]
    new_prec, new_mean, ok = trng.natural_step(prec, mean, hess, grad, torch.zeros(1, 1, dtype=D))
    assert ok.all()
    torch.testing.assert_close(new_prec[0, 0], p)
    torch.testing.assert_close(new_mean[0, 0], m)


def test_exact_moments_with_eta_contract_natural_parameters_at_rate_eta_over_eta_plus_one():
    d, p, m, eta = 2, spd(2, 1), torch.tensor([0.3, -1.0], dtype=D), 0.7
    mean, prec = torch.zeros(1, 1, d, dtype=D), torch.eye(d, dtype=D)[None, None]
    start_prec, start_lin = prec.clone(), (prec @ mean[..., None])[..., 0]
    for t in range(1, 6):
        hess, grad = -p[None, None], -(p @ (mean[0, 0] - m))[None, None]
        prec, mean, _ = trng.natural_step(prec, mean, hess, grad, torch.full((1, 1), eta, dtype=D))
        rate = (eta / (eta + 1)) ** t
        torch.testing.assert_close(prec[0, 0] - p, rate * (start_prec[0, 0] - p))
        torch.testing.assert_close((prec @ mean[..., None])[0, 0, :, 0] - p @ m,
                                   rate * (start_lin[0, 0] - p @ m))


def test_stein_estimates_converge_to_minus_p_and_its_gradient_at_root_s():
    p, m = spd(2, 2), torch.tensor([1.0, 0.5], dtype=D)
    q = single(torch.tensor([0.2, -0.3], dtype=D), spd(2, 3, 0.5))
    exact_r = -p @ (q.mean[0, 0] - m)
    errors = {}
    for s in (64, 4096):
        torch.manual_seed(0)
        e_r, e_g = [], []
        for _ in range(20):
            hess, grad, _ = trng.estimate(q, quadratic(m, p), s)
            assert torch.equal(hess, hess.transpose(-1, -2))  # symmetrised
            e_r.append(float((hess[0, 0] + p).norm()))
            e_g.append(float((grad[0, 0] - exact_r).norm()))
        errors[s] = (sum(e_r) / 20, sum(e_g) / 20)
    for which in (0, 1):  # 64x the samples: 8x smaller errors (1/sqrt(S)), within MC noise
        assert 5 < errors[64][which] / errors[4096][which] < 13
    assert errors[4096][0] < 0.1 * p.norm() and errors[4096][1] < 0.1 * exact_r.norm()


def test_the_closed_form_step_kl_is_torch_distributions_kl_of_the_updated_components():
    q = GMM(torch.zeros(2, 3, dtype=D), torch.randn(2, 3, 2, dtype=D),
            torch.stack([torch.stack([spd(2, 10 * i + k) for k in range(3)]) for i in range(2)]))
    hess = -torch.stack([torch.stack([spd(2, 100 + 10 * i + k) for k in range(3)])
                         for i in range(2)])
    grad = torch.randn(2, 3, 2, dtype=D)
    kl = trng.StepKL(q.prec, hess, grad)
    previous = torch.full((2, 3), math.inf, dtype=D)
    for eta in (0.0, 0.5, 3.0, 40.0):
        e = torch.full((2, 3), eta, dtype=D)
        prec, mean, ok = trng.natural_step(q.prec, q.mean, hess, grad, e)
        exact = kl_divergence(MultivariateNormal(mean, precision_matrix=prec), q.components)
        torch.testing.assert_close(kl(e[..., None])[..., 0], exact)
        assert (exact < previous).all()  # KL decreases with eta
        previous = exact


def banana(z: torch.Tensor) -> torch.Tensor:
    """A curved, non-Gaussian unnormalised density in 2-d."""
    return -0.5 * (z[..., 0] ** 2 / 4 + 4 * (z[..., 1] - 0.5 * z[..., 0] ** 2 + 1) ** 2)


@pytest.mark.parametrize("bound", [1e-3, 5e-2])
def test_every_component_stays_in_its_trust_region_and_keeps_a_cholesky_factor(bound):
    torch.manual_seed(1)
    q = GMM.standard(torch.randn(3, 2, dtype=D) * 2, tasks=4)
    config = trng.TRNGConfig(kl_bound=bound, samples=96)
    for _ in range(15):
        new, info = trng.step(q, banana, config)
        kl = kl_divergence(new.components, q.components)
        assert (kl <= bound * (1 + 1e-6) + 1e-12).all()
        assert (torch.linalg.cholesky_ex(new.prec).info == 0).all()
        assert not info.failed.any()
        q = new


def test_a_non_positive_definite_full_step_pushes_eta_up():
    prec = torch.eye(2, dtype=D)[None, None]
    hess = torch.diag(torch.tensor([3.0, -1.0], dtype=D))[None, None]  # E[hessian] not negative
    kl = trng.StepKL(prec, hess, torch.zeros(1, 1, 2, dtype=D))
    assert math.isinf(float(kl(torch.zeros(1, 1, 1, dtype=D))))  # the full step is not PD
    eta, feasible = trng.solve_eta(kl, bound=1e9)  # only positive definiteness binds
    assert feasible.all() and 3.0 < float(eta) < 3.01
    new_prec, _, ok = trng.natural_step(prec, torch.zeros(1, 1, 2, dtype=D), hess,
                                        torch.zeros(1, 1, 2, dtype=D), eta)
    assert ok.all() and (torch.linalg.eigvalsh(new_prec) > 0).all()


def test_a_full_step_inside_the_trust_region_is_taken_whole():
    q = single(torch.zeros(2, dtype=D), torch.eye(2, dtype=D))
    p = torch.eye(2, dtype=D) * 1.01
    _, info = trng.step(q, quadratic(torch.zeros(2, dtype=D), p),
                        trng.TRNGConfig(kl_bound=1.0, samples=64))
    assert float(info.eta) == 0.0


def test_a_failed_step_keeps_the_old_component_and_is_counted():
    q = GMM.standard(torch.zeros(2, 2, dtype=D), tasks=2)

    def broken(z):  # task 1's target is not finite
        out = banana(z)
        return torch.cat([out[..., :1], out[..., 1:] * math.nan], -1)

    new, info = trng.step(q, broken, trng.TRNGConfig(samples=32))
    assert info.failed[1].all() and not info.failed[0].any()
    assert torch.equal(new.mean[1], q.mean[1]) and torch.equal(new.prec[1], q.prec[1])


def separated_target(weights: torch.Tensor, log_z: float) -> tuple[trng.LogTarget, GMM]:
    means = torch.tensor([[-30.0, 0.0], [0.0, 30.0], [30.0, 0.0]], dtype=D)
    target = MixtureSameFamily(torch.distributions.Categorical(probs=weights),
                               MultivariateNormal(means, torch.eye(2, dtype=D)))
    q = GMM.standard(means)  # the target's components, equal weights
    return (lambda z: log_z + target.log_prob(z)), q


def test_the_corrected_weight_update_recovers_well_separated_target_weights_in_one_step():
    """From weights unlike the target's; Eq. 8c as printed, ``w ∝ exp(rho)``, forgets the old
    weights and fails (it passes only from equal weights)."""
    weights = torch.tensor([0.6, 0.3, 0.1], dtype=D)
    log_target, q = separated_target(weights, log_z=5.0)
    q = GMM(torch.log(torch.tensor([[0.1, 0.3, 0.6]], dtype=D)), q.mean, q.prec)
    _, _, rho = trng.estimate(q, log_target, 16)
    torch.testing.assert_close(trng.weight_step(q.log_w, rho).exp()[0], weights)
    assert (torch.softmax(rho, -1)[0] - weights).abs().max() > 0.2  # the printed update


def test_at_the_optimum_the_printed_weight_update_goes_uniform_and_the_corrected_one_stays():
    weights = torch.tensor([0.6, 0.3, 0.1], dtype=D)
    log_target, q = separated_target(weights, log_z=-2.0)
    q = GMM(weights.log()[None], q.mean, q.prec)
    _, _, rho = trng.estimate(q, log_target, 16)
    torch.testing.assert_close(torch.softmax(rho, -1)[0], torch.full((3,), 1 / 3, dtype=D))
    torch.testing.assert_close(trng.weight_step(q.log_w, rho).exp()[0], weights)


def test_steps_batched_over_tasks_equal_a_loop_over_tasks():
    torch.manual_seed(3)
    t, k, d, s = 4, 3, 2, 8
    q = GMM(torch.log_softmax(torch.randn(t, k, dtype=D), -1), torch.randn(t, k, d, dtype=D),
            torch.stack([torch.stack([spd(d, 10 * i + j, 0.3) for j in range(k)])
                         for i in range(t)]))
    centres = torch.randn(t, d, dtype=D)
    precs = torch.stack([spd(d, 50 + i) for i in range(t)])
    noise = torch.randn(s, k, t, d, dtype=D)
    for config in (trng.TRNGConfig(samples=s * k), trng.TRNGConfig(update="direct", samples=s * k),
                   trng.TRNGConfig(diagonal=True, samples=s * k)):
        batched, _ = trng.step(q, quadratic(centres, precs), config, noise)
        for i in range(t):
            alone, _ = trng.step(q.select(slice(i, i + 1)),
                                 quadratic(centres[i:i + 1], precs[i:i + 1]), config,
                                 noise[:, :, i:i + 1])
            for a, b in ((alone.log_w, batched.log_w), (alone.mean, batched.mean),
                         (alone.prec, batched.prec)):
                torch.testing.assert_close(a[0], b[i])


def test_the_analytic_mixture_score_is_the_autograd_gradient_of_its_log_density():
    torch.manual_seed(4)
    q = GMM(torch.log_softmax(torch.randn(3, 4, dtype=D), -1), torch.randn(3, 4, 2, dtype=D),
            torch.stack([torch.stack([spd(2, 10 * i + k) for k in range(4)]) for i in range(3)]))
    z = torch.randn(5, 3, 2, dtype=D, requires_grad=True)
    value, score = q.log_prob_and_score(z.detach())
    (grad,) = torch.autograd.grad(q.mixture.log_prob(z).sum(), z)
    torch.testing.assert_close(value, q.mixture.log_prob(z).detach())
    torch.testing.assert_close(score, grad)
