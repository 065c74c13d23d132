"""The ELBO of the latent models (GMM-NP eq. 5): the training loss (closed-form KL) and the
Monte Carlo ELBO of :meth:`bounds` are the same quantity; ``ELBO <= IW bound``; the KL
vanishes when the context is all of the targets; observation stds respect their lower bound."""

import pytest
import torch
from zoo_neural_processes import AttentiveNP, BayesianAggregationNP, MeanAggregationNP

from zoo.data import load_sinusoid
from zoo.tasks import sample_task

LATENT = [MeanAggregationNP, BayesianAggregationNP, AttentiveNP]


@pytest.mark.parametrize("cls", LATENT, ids=lambda c: c.name)
def test_training_elbo_equals_the_monte_carlo_elbo_and_lies_below_the_iw_bound(cls):
    torch.manual_seed(0)
    method = cls(x_dim=1, y_dim=1, train_samples=20000)
    episode = sample_task(load_sinusoid(), "test", 0, 10, 1, 3)
    with torch.no_grad():
        elbo_closed_kl = -float(method.meta_loss(episode)) * 10
        elbo, iw = method.bounds(episode, 20000)
        small_elbo, small_iw = method.bounds(episode, 8)
    assert elbo == pytest.approx(elbo_closed_kl, abs=0.05)
    assert elbo <= iw and small_elbo <= small_iw
    assert iw >= small_iw - 0.05  # the IW bound tightens with more draws (in expectation)


def test_kl_term_vanishes_when_the_context_is_every_target():
    torch.manual_seed(0)
    method = MeanAggregationNP(x_dim=1, y_dim=1, train_samples=1)
    episode = sample_task(load_sinusoid(), "test", 0, 8, 2, 8)
    q = method.posterior(episode.target_x, episode.target_y)
    torch.manual_seed(0)
    z = q.rsample((1,))[:, 0]
    torch.manual_seed(0)
    loss = method.meta_loss(episode)
    mean, var = method._decode_latent(episode, z)
    expected = -torch.distributions.Normal(mean, var.sqrt()).log_prob(episode.target_y).sum() / 8
    assert torch.allclose(loss, expected, atol=1e-5)


def test_observation_std_is_bounded_below():
    method = MeanAggregationNP(x_dim=1, y_dim=1, min_std=0.3)
    with torch.no_grad():
        for p in method.decoder.parameters():
            p.fill_(-5.0)
        prediction = method.predict(sample_task(load_sinusoid(), "test", 0, 8, 0, 2))
    assert (prediction.var >= 0.09 - 1e-6).all()
