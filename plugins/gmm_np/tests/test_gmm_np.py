"""GMM-NP against closed forms: a linear-Gaussian decoder with a Gaussian-mixture prior has a
Gaussian-mixture posterior and an analytic evidence; bounds, LMLHD, training state, conformance."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.distributions import MultivariateNormal
from zoo_gmm_np import GMMNP, VARIANTS, trng
from zoo_gmm_np.gmm import GMM
from zoo_gmm_np.method import importance_bounds

from zoo.data import load_sinusoid
from zoo.tasks import Regression, sample_task
from zoo.testing import check_task

D = torch.float64
SIGMA = 0.5


def linear_posterior(prior: GMM, a: torch.Tensor, y: torch.Tensor) -> tuple[GMM, float]:
    """Exact posterior of ``z ~ prior``, ``y ~ N(A z, sigma^2 I)``, and ``log Z``."""
    prec = prior.prec[0] + a.T @ a / SIGMA**2
    lin = (prior.prec[0] @ prior.mean[0, :, :, None])[..., 0] + a.T @ y / SIGMA**2
    mean = torch.linalg.solve(prec, lin)
    cov = torch.linalg.inv(prior.prec[0])
    evidence = MultivariateNormal(prior.mean[0] @ a.T,
                                  SIGMA**2 * torch.eye(len(y), dtype=D) + a @ cov @ a.T)
    joint = prior.log_w[0] + evidence.log_prob(y)
    return GMM(torch.log_softmax(joint, -1)[None], mean[None], prec[None]), float(
        torch.logsumexp(joint, -1))


def linear_target(prior: GMM, a: torch.Tensor, y: torch.Tensor) -> trng.LogTarget:
    like = lambda z: MultivariateNormal(z @ a.T, SIGMA**2 * torch.eye(len(y), dtype=D)  # noqa: E731
                                        ).log_prob(y)
    return lambda z: like(z) + prior.log_prob(z)


def elbo(q: GMM, log_target: trng.LogTarget, n: int = 20000) -> float:
    z = q.mixture.sample((n,))
    return float((log_target(z) - q.log_prob(z)).mean())


def test_trng_recovers_the_exact_mixture_posterior_of_a_linear_gaussian_decoder():
    torch.manual_seed(0)
    prior = GMM.standard(torch.tensor([[-3.0, 0.0], [3.0, 0.5]], dtype=D))
    a = torch.tensor([[0.2, 1.0], [0.1, 0.9], [0.3, -0.2]], dtype=D)
    y = torch.tensor([0.2, 0.1, 0.3], dtype=D)
    exact, log_z = linear_posterior(prior, a, y)
    assert float(exact.log_w.exp().min()) > 0.1  # both components matter
    target = linear_target(prior, a, y)
    q, failures = trng.fit(prior, target, trng.TRNGConfig(kl_bound=0.1, samples=8192), 60)
    assert failures == 0
    torch.testing.assert_close(q.log_w.exp(), exact.log_w.exp(), atol=0.02, rtol=0)
    torch.testing.assert_close(q.mean, exact.mean, atol=0.03, rtol=0)
    torch.testing.assert_close(torch.linalg.inv(q.prec), torch.linalg.inv(exact.prec), atol=0.01,
                               rtol=0.05)
    assert abs(elbo(q, target) - log_z) < 0.01  # ELBO reaches log Z


def test_a_diagonal_single_gaussian_leaves_a_gap_on_a_correlated_posterior():
    torch.manual_seed(1)
    prior = GMM.standard(torch.zeros(1, 2, dtype=D))
    a = torch.tensor([[1.0, 1.0], [1.0, 1.3]], dtype=D)
    y = torch.tensor([1.0, 0.5], dtype=D)
    _, log_z = linear_posterior(prior, a, y)
    target = linear_target(prior, a, y)
    gaps = {}
    for diagonal in (False, True):
        config = trng.TRNGConfig(kl_bound=0.1, samples=4096, diagonal=diagonal)
        q, _ = trng.fit(prior, target, config, 60)
        gaps[diagonal] = log_z - elbo(q, target)
        if diagonal:
            assert q.prec[0, 0, 0, 1] == 0
    assert abs(gaps[False]) < 0.01 and gaps[True] > 0.3


def linear_gmm_np(**hparams) -> GMMNP:
    """GMM-NP with a linear decoder ``y = w_x x + w_z . z + b`` (its MLP replaced by one layer)."""
    torch.manual_seed(0)
    m = GMMNP(x_dim=1, y_dim=1, latent_dim=2, components=2, noise="fixed", noise_std=SIGMA,
              **hparams)
    m.decoder = nn.Sequential(nn.Linear(3, 1))
    with torch.no_grad():
        m.decoder[0].weight.copy_(torch.tensor([[0.5, 1.0, -0.7]]))
        m.decoder[0].bias.fill_(0.2)
    return m


def test_elbo_below_importance_weighted_bound_below_log_z():
    m = linear_gmm_np(kl_bound=0.05, test_trng_steps=15, trng_samples=256)
    episode = sample_task(load_sinusoid(), "test", 0, 6, 0, 0)
    x, y = episode.target_x.double(), episode.target_y.double()[:, 0]
    w = m.decoder[0].weight.detach().double()
    a = w[:, 1:].expand(len(x), -1)
    _, log_z = linear_posterior(m.prior(), a, y - w[0, 0] * x[:, 0] - 0.2)
    bounds = m.bounds(episode, samples=4096)
    assert bounds[""] == bounds["free"]  # no context: both proposals are the fit from p(z)
    b = bounds[""]
    assert b.elbo < b.iw < log_z + 0.02
    assert log_z - b.iw < log_z - b.elbo  # the importance-weighted bound is tighter


def test_the_bounds_are_equal_to_log_z_when_the_proposal_is_the_exact_posterior():
    torch.manual_seed(0)
    prior = GMM.standard(torch.tensor([[-3.0, 0.0], [3.0, 0.5]], dtype=D))
    a = torch.tensor([[0.2, 1.0], [0.1, 0.9], [0.3, -0.2]], dtype=D)
    y = torch.tensor([0.2, 0.1, 0.3], dtype=D)
    exact, log_z = linear_posterior(prior, a, y)
    z = exact.mixture.sample((64,))  # [S, 1, 2]
    like = MultivariateNormal(z @ a.T, SIGMA**2 * torch.eye(len(y), dtype=D)).log_prob(y)
    b = importance_bounds(like, prior, exact, z)
    assert b.elbo == pytest.approx(log_z, abs=1e-9) and b.iw == pytest.approx(log_z, abs=1e-9)
    b = importance_bounds(like, prior, prior, z)  # another proposal: a gap, the IW bound above
    assert b.elbo < b.iw and b.iw - b.elbo > 0.1


def test_both_proposals_bound_the_closed_form_evidence_given_the_context_and_free_is_looser():
    m = linear_gmm_np(kl_bound=0.05, test_trng_steps=15, trng_samples=256)
    episode = sample_task(load_sinusoid(), "test", 0, 6, 0, 2)
    x, y = episode.target_x.double(), episode.target_y.double()[:, 0]
    w = m.decoder[0].weight.detach().double()
    a = w[:, 1:].expand(len(x), -1)
    # log E_{q(z|context)} p(targets | z): q(z|context) a mixture, the decoder linear
    _, log_z = linear_posterior(m.context_posterior(episode), a, y - w[0, 0] * x[:, 0] - 0.2)
    bounds = m.bounds(episode, samples=4096)
    for b in bounds.values():
        assert b.elbo < b.iw < log_z + 0.02
    loose = {k: b.iw - b.elbo for k, b in bounds.items()}
    assert loose[""] < 0.05 and loose["free"] > 2 * loose[""]


def test_lmlhd_is_the_exact_gaussian_log_likelihood_when_the_decoder_ignores_z():
    m = linear_gmm_np(test_trng_steps=2, predict_samples=64)
    with torch.no_grad():
        m.decoder[0].weight[:, 1:] = 0
    episode = sample_task(load_sinusoid(), "test", 0, 784, 0, 4)
    far = type(episode)(episode.context_x, episode.context_y + 40, episode.target_x,
                        episode.target_y + 40, episode.info)  # ~ -5e6: no underflow
    record = Regression().score(m.predict(far), far)
    mean = 0.5 * far.target_x.double() + 0.2
    exact = torch.distributions.Normal(mean, SIGMA).log_prob(far.target_y.double()).sum()
    assert math.isfinite(record["lmlhd"]) and record["lmlhd"] < -1e5
    assert abs(record["lmlhd"] - float(exact)) < 1e-6 * abs(float(exact))


def parameter_count(gmm, diagonal: bool = False) -> int:
    """Free variational parameters per task: ``(K-1) + K d + K d (d+1)/2`` (``K d`` for the
    covariances of a diagonal family): 39 for K = 4, d = 3 (GMM-NP, Table 2)."""
    k, d = gmm.mean.shape[-2:]
    return (k - 1) + k * d + k * (d if diagonal else d * (d + 1) // 2)


def test_parameter_counts_match_the_paper_tables():
    for hidden, dz, theta, phi in ((8, 3, 121, 39), (44, 4, 2289, 59)):
        m = GMMNP(x_dim=1, y_dim=1, hidden=hidden, latent_dim=dz, components=4)
        assert sum(p.numel() for p in m.decoder.parameters()) == theta
        assert parameter_count(m.prior()) == phi


def test_training_keeps_one_posterior_per_subtask_of_a_pooled_function_and_resumes_them():
    torch.manual_seed(0)
    m = GMMNP(x_dim=1, y_dim=1, subtasks=8, trng_samples=32, decoder_samples=4)
    get = Regression().episodes(load_sinusoid(), "train", {"train_targets": 16,
                                                           "train_max_context": 15,
                                                           "train_tasks": 2}, 0, training=True)
    for i in range(4):
        m.meta_loss(get(i)).backward()
    assert sorted(m.posteriors) == ["sinusoid/0", "sinusoid/1"]
    assert m.posteriors["sinusoid/0"].mean.shape == (8, 4, 3)
    assert m.counters()["trng_component_steps"] == 4 * 8 * 4
    assert m.prior_means.grad is None and m.decoder[0].weight.grad is not None
    again = GMMNP(x_dim=1, y_dim=1, subtasks=8)
    again.load_state_dict(m.state_dict())
    torch.testing.assert_close(again.posteriors["sinusoid/1"].prec, m.posteriors["sinusoid/1"].prec)


def test_subtasks_cycle_through_every_size():
    masks = GMMNP(x_dim=1, y_dim=1).subtask_masks(16, seed=3)
    assert masks.shape == (32, 16)
    assert sorted(masks.sum(1).tolist()) == sorted(list(range(1, 17)) * 2)


@pytest.mark.slow  # ~10 s: the paper's 1000 test-time TRNG steps
def test_gmm_np_conforms_to_the_regression_task_kind():
    check_task("regression", "gmm-np", "sinusoid", context_sizes=[4])


def test_a_masked_point_is_not_observed_so_padded_contexts_can_be_fitted_together():
    m = GMMNP(x_dim=1, y_dim=1, test_trng_steps=3, trng_samples=16)
    x, y = torch.randn(2, 5, 1), torch.randn(2, 5, 1)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    torch.manual_seed(0)
    padded = m.fit(x, y, mask)
    torch.manual_seed(0)
    alone = m.fit(x[:, :3], y[:, :3])
    torch.manual_seed(0)
    full = m.fit(x, y)
    torch.testing.assert_close(padded.select(slice(0, 1)).mean, alone.select(slice(0, 1)).mean)
    torch.testing.assert_close(padded.select(slice(1, 2)).mean, full.select(slice(1, 2)).mean)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_ablation_variant_trains_and_predicts(variant):
    torch.manual_seed(0)
    m = GMMNP(x_dim=1, y_dim=1, subtasks=4, trng_samples=16, decoder_samples=4,
              test_trng_steps=3, predict_samples=8, **VARIANTS[variant])
    episode = sample_task(load_sinusoid(), "train", 0, 16, 0, 5)
    loss = m.meta_loss(episode)
    loss.backward()
    assert torch.isfinite(loss) and m.counters()["trng_failed_steps"] == 0
    Regression().check(m.predict(episode), episode, variant)
    if VARIANTS[variant].get("covariance") == "diag":
        q = m.context_posterior(episode)
        assert torch.equal(q.prec, torch.diag_embed(torch.diagonal(q.prec, dim1=-2, dim2=-1)))


def test_test_episodes_prepared_together_predict_and_bound_as_one_at_a_time():
    torch.manual_seed(0)
    m = GMMNP(x_dim=1, y_dim=1, trng_samples=16, test_trng_steps=5, predict_samples=8)
    family = load_sinusoid()
    episodes = [sample_task(family, "test", 0, 12, i, c, bound_samples=32)
                for i in range(3) for c in (0, 4)]
    alone = [(m.predict(e).mean, m.bounds(e, 32)) for e in episodes]
    m.prepare(episodes)
    assert len(m.prepared) == len(episodes)
    for e, (mean, bounds) in zip(episodes, alone):
        torch.testing.assert_close(m.predict(e).mean, mean, rtol=1e-4, atol=1e-4)
        again = m.bounds(e, 32)
        assert bounds.keys() == again.keys() == {"", "free"}
        for k in bounds:
            assert bounds[k] == pytest.approx(again[k], rel=1e-4, abs=1e-4)
