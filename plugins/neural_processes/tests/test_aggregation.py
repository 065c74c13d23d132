"""The aggregators' defining formulas: Bayesian aggregation is the exact Gaussian posterior
(checked against conditioning the joint Gaussian of z and the observations, and against one
observation at a time), mean aggregation does not depend on the order of the context."""

import torch
from zoo_neural_processes import MeanAggregationNP
from zoo_neural_processes.aggregation import bayesian_aggregate, mean_aggregate

from zoo.data import load_sinusoid
from zoo.tasks import RegressionEpisode, sample_task


def observations(n=5, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(1, n, d, generator=g, dtype=torch.float64)
    var = 0.1 + torch.rand(1, n, d, generator=g, dtype=torch.float64)
    mu0 = torch.randn(d, generator=g, dtype=torch.float64)
    var0 = 0.5 + torch.rand(d, generator=g, dtype=torch.float64)
    return r, var, mu0, var0


def test_bayesian_aggregation_is_gaussian_conditioning_of_the_joint():
    r, var, mu0, var0 = observations()
    mean, post_var = bayesian_aggregate(r, var, mu0, var0)
    n = r.shape[1]
    for j in range(r.shape[2]):  # per coordinate: z ~ N(mu0, v0), r_i = z + e_i, e_i ~ N(0, v_i)
        c_zr = var0[j] * torch.ones(1, n, dtype=torch.float64)
        c_rr = var0[j] * torch.ones(n, n, dtype=torch.float64) + torch.diag(var[0, :, j])
        gain = torch.linalg.solve(c_rr, c_zr.T).T  # C_zr C_rr^-1
        assert torch.allclose(mean[0, j], mu0[j] + (gain @ (r[0, :, j] - mu0[j]))[0])
        assert torch.allclose(post_var[0, j], var0[j] - (gain @ c_zr.T)[0, 0])


def test_bayesian_aggregation_equals_one_observation_at_a_time_and_the_prior_when_empty():
    r, var, mu0, var0 = observations(n=4)
    mean, post_var = bayesian_aggregate(r, var, mu0, var0)
    m, v = mu0.clone(), var0.clone()
    for i in range(r.shape[1]):  # Kalman update with observation r_i of noise var_i
        k = v / (v + var[0, i])
        m, v = m + k * (r[0, i] - m), (1 - k) * v
    assert torch.allclose(mean[0], m) and torch.allclose(post_var[0], v)
    empty_mean, empty_var = bayesian_aggregate(r[:, :0], var[:, :0], mu0, var0)
    assert torch.equal(empty_mean[0], mu0) and torch.equal(empty_var[0], var0)


def test_mean_aggregation_is_the_mean_and_zero_for_an_empty_set():
    s = torch.randn(2, 6, 4)
    assert torch.allclose(mean_aggregate(s), s.mean(1))
    assert torch.equal(mean_aggregate(s[:, :0]), torch.zeros(2, 4))


def test_the_latent_posterior_and_prediction_do_not_depend_on_the_context_order():
    torch.manual_seed(0)
    method = MeanAggregationNP(x_dim=1, y_dim=1).eval()
    episode = sample_task(load_sinusoid(), "test", 0, 16, 0, 6)
    order = torch.randperm(6)
    shuffled = RegressionEpisode(episode.context_x[order], episode.context_y[order],
                                 episode.target_x, episode.target_y, episode.info)
    with torch.no_grad():
        a = method.posterior(episode.context_x, episode.context_y).base_dist
        b = method.posterior(shuffled.context_x, shuffled.context_y).base_dist
        assert torch.allclose(a.loc, b.loc, atol=1e-6) and torch.allclose(a.scale, b.scale)
        pa, pb = method.predict(episode), method.predict(shuffled)
    assert torch.allclose(pa.mean, pb.mean, atol=1e-5)
