"""The bootstrap of BNP/BANP (Lee et al. 2020): seeded, reproducible resampling; the residual
bootstrap's closed form; predictions that are a function of the episode and vary across draws;
cross-attention to a single context point is the same at every target."""

import torch
from zoo_neural_processes import BootstrapAttentiveNP, BootstrapNP
from zoo_neural_processes.bootstrap import resample_indices, residual_bootstrap
from zoo_neural_processes.paths import DeterministicPath

from zoo.data import load_sinusoid
from zoo.tasks import sample_task


def test_resampling_is_reproducible_from_its_generator_and_with_replacement():
    a = resample_indices(7, 500, torch.Generator().manual_seed(3))
    b = resample_indices(7, 500, torch.Generator().manual_seed(3))
    c = resample_indices(7, 500, torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.min() == 0 and a.max() == 6
    repeats = torch.tensor([len(row.unique()) < 7 for row in a]).float().mean()
    assert abs(float(repeats) - (1 - 5040 / 7**7)) < 0.05  # P(some point drawn twice) = 1 - 7!/7^7


def test_residual_bootstrap_closed_form():
    g = torch.Generator().manual_seed(0)
    y, mean = torch.randn(2, 5, 1, generator=g), torch.randn(2, 5, 1, generator=g)
    var = 0.5 + torch.rand(2, 5, 1, generator=g)
    std = var.sqrt()
    e = (y - mean) / std
    identity = torch.arange(5).expand(2, 5)
    assert torch.allclose(residual_bootstrap(y, mean, var, identity), y - std * e.mean(1, True))
    index = resample_indices(5, 2, g)
    y_hat = residual_bootstrap(y, mean, var, index)
    centred = e - e.mean(1, True)
    assert torch.allclose((y_hat - mean) / std, torch.gather(centred, 1, index[..., None]),
                          atol=1e-6)


def test_bootstrap_prediction_is_seeded_by_the_episode_and_varies_across_draws():
    torch.manual_seed(0)
    method = BootstrapNP(x_dim=1, y_dim=1, samples=16).eval()
    family = load_sinusoid()
    episode = sample_task(family, "test", 0, 16, 0, 6)
    with torch.no_grad():
        a, b = method.predict(episode), method.predict(episode)
        other = method.predict(sample_task(family, "test", 1, 16, 0, 6))
    assert torch.equal(a.mean, b.mean)
    assert a.mean.std(0).mean() > 0  # the draws differ
    assert not torch.equal(a.mean, other.mean)


def test_banp_with_an_empty_context_gives_identical_draws():
    torch.manual_seed(0)
    method = BootstrapAttentiveNP(x_dim=1, y_dim=1, samples=4).eval()
    with torch.no_grad():
        p = method.predict(sample_task(load_sinusoid(), "test", 0, 16, 0, 0))
    assert torch.allclose(p.mean, p.mean[:1].expand_as(p.mean))


def test_cross_attention_to_one_context_point_is_constant_over_targets():
    torch.manual_seed(0)
    path = DeterministicPath(1, 1, 16, attention=True, self_attention=True, heads=4)
    r = path(torch.randn(1, 1, 1), torch.randn(1, 1, 1), torch.randn(1, 9, 1))
    assert torch.allclose(r, r[:, :1].expand_as(r), atol=1e-6)
