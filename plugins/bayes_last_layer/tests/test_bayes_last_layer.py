"""The Bayesian last layer: its families' KL against dense matrices, the two ELBO scalings
against a hand computation, the conjugate (Gaussian-likelihood) limit against the exact
posterior, the pre-training variant, and conformance."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import MultivariateNormal
from torch.distributions import kl_divergence as torch_kl
from zoo_bayes_last_layer.method import AdamAscent, BayesLastLayer, scaled_elbo, support_batches
from zoo_bayes_last_layer.posterior import FAMILIES, build, initial_parameters

from zoo import Episode, NumericalError
from zoo.gaussians import kl_divergence, kron
from zoo.testing import IdentityBackbone, check_method, toy_episode

DT = torch.float64
C, D = 2, 3


def random_parameters(family: str, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    params = initial_parameters(family, C, D, 0.5, dtype=DT, device=torch.device("cpu"))
    return [(p + 0.3 * torch.randn(p.shape, generator=g, dtype=DT)).detach() for p in params]


@pytest.mark.parametrize("family", FAMILIES)
def test_kl_to_the_prior_matches_dense(family):
    scale = torch.tensor([0.5, 1.0, 2.0], dtype=DT)
    q = build(family, random_parameters(family, 0), scale)
    prior = BayesLastLayer(IdentityBackbone(D), way=C, prior="fixed").prior(C)
    with torch.no_grad():
        prior.var = scale.repeat(C) ** 2
    dense_q = MultivariateNormal(q.mean, q.covariance())
    dense_p = MultivariateNormal(prior.mean, torch.diag(prior.var))
    assert torch.allclose(kl_divergence(q, prior), torch_kl(dense_q, dense_p), atol=1e-10)
    other = build(family, random_parameters(family, 1), scale)
    assert torch.allclose(kl_divergence(q, other),
                          torch_kl(dense_q, MultivariateNormal(other.mean, other.covariance())),
                          atol=1e-9)


def test_kfac_posterior_is_a_kronecker_product_over_classes_and_scaled_features():
    scale = torch.tensor([0.5, 1.0, 2.0], dtype=DT)
    m, a_off, a_log, b_off, b_log = random_parameters("kfac", 2)
    q = build("kfac", [m, a_off, a_log, b_off, b_log], scale)
    La = a_off.tril(-1) + torch.diag(a_log.exp())
    Lb = b_off.tril(-1) + torch.diag(b_log.exp())
    B = torch.diag(scale) @ Lb @ Lb.T @ torch.diag(scale)
    assert torch.allclose(q.covariance(), kron(La @ La.T, B))
    assert torch.allclose(q.mean, (scale * m).flatten())


def test_elbo_scalings_by_hand():
    """Notes Sec. 2.1 with b = 2 points of N = 10 (B = 5 batches): ``batch`` is
    ``sum ell - KL / B``, ``mean`` is ``mean ell - KL / N``."""
    ell, kl = torch.tensor([-1.0, -2.0]), torch.tensor(3.0)
    assert scaled_elbo(ell, kl, 10, 5, "batch").item() == pytest.approx(-3.0 - 3.0 / 5)
    assert scaled_elbo(ell, kl, 10, 5, "mean").item() == pytest.approx(-1.5 - 3.0 / 10)
    assert [len(b) for b in support_batches(10, 4, torch.Generator())] == [4, 4, 2]
    assert [len(b) for b in support_batches(10, 0, torch.Generator())] == [10]


def test_the_scalings_differ_by_the_batch_size_as_a_plain_step_size():
    """``batch`` = ``b`` x ``mean``, so one plain gradient step of size ``lr`` under ``mean`` is
    one of size ``lr / b`` under ``batch``."""
    episode = toy_episode(C, 5)
    phi = torch.randn(10, D, generator=torch.Generator().manual_seed(3), dtype=DT)
    y = torch.arange(10) % C
    posteriors = []
    for scaling, lr in (("mean", 0.2), ("batch", 0.1)):
        m = BayesLastLayer(IdentityBackbone(D), way=C, elbo_scaling=scaling, batch_size=2,
                           inner_optimizer="sgd", inner_lr=lr)
        posteriors.append(m.fit(phi, y, episode, steps=3, samples=4, create_graph=False)[0])
    assert torch.allclose(posteriors[0].mean, posteriors[1].mean, atol=1e-12)
    assert torch.allclose(posteriors[0].var, posteriors[1].var, atol=1e-12)


def test_under_adam_the_scalings_give_the_same_posterior():
    """Adam is invariant to the objective's scale (up to its ``eps``), so with one batch
    (``batch`` = ``N`` x ``mean``) the two scalings reach the same belief."""
    g = torch.Generator().manual_seed(6)
    phi = torch.nn.functional.normalize(torch.randn(12, D, generator=g, dtype=DT), dim=-1)
    y, episode = torch.arange(12) % C, toy_episode(C, 6)
    beliefs = [BayesLastLayer(IdentityBackbone(D), way=C, elbo_scaling=scaling,
                              inner_optimizer="adam").fit(
        phi, y, episode, steps=20, samples=4, create_graph=False)[0]
        for scaling in ("mean", "batch")]
    assert torch.allclose(beliefs[0].mean, beliefs[1].mean, atol=1e-5)
    assert torch.allclose(beliefs[0].var, beliefs[1].var, rtol=1e-5)


def test_a_diverging_inner_loop_names_the_episode_and_the_remedy():
    phi = torch.nn.functional.normalize(torch.randn(12, D, dtype=DT), dim=-1)
    m = BayesLastLayer(IdentityBackbone(D), way=C, elbo_scaling="batch", inner_optimizer="sgd",
                       inner_lr=1e6)
    with pytest.raises(NumericalError, match="inner_lr"):
        m.fit(phi, torch.arange(12) % C, toy_episode(C, 6), steps=20, samples=4,
              create_graph=False)


def gaussian_problem(noise: float = 0.25, n: int = 30):
    g = torch.Generator().manual_seed(4)
    phi = torch.randn(n, D, generator=g, dtype=DT)
    targets = phi @ torch.randn(D, C, generator=g, dtype=DT) + noise**0.5 * torch.randn(
        n, C, generator=g, dtype=DT)

    def log_likelihood(f: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return -0.5 * ((t - f) ** 2 / noise + math.log(2 * math.pi * noise)).sum(-1)

    episode = Episode(phi, torch.arange(n) % C, phi[:2], torch.arange(2), way=C, shot=n // C,
                      info={"seed": 5})
    return phi, targets, log_likelihood, episode


def exact_posterior(phi, targets, prior_var: float, noise: float):
    """Per output ``c``: ``Lambda = I / s + Phi^T Phi / noise``, ``mu_c = Lambda^-1 Phi^T t_c /
    noise``; over ``vec(W)`` (row-major ``[C, D]``) the covariance is block diagonal."""
    lam = torch.eye(D, dtype=DT) / prior_var + phi.T @ phi / noise
    cov = torch.linalg.inv(lam)
    mean = (cov @ phi.T @ targets / noise).T
    return mean.flatten(), torch.block_diag(*[cov] * C)


def test_elbo_at_the_exact_posterior_is_the_log_evidence():
    """Conjugate limit: ``E_q[log p(t | W)] - KL(q || p) = log p(t)`` exactly when ``q`` is the
    posterior; ``log p(t) = sum_c log N(t_c | 0, s Phi Phi^T + noise I)``."""
    prior_var, noise = 2.0, 0.25
    phi, targets, log_likelihood, episode = gaussian_problem(noise)
    mean, cov = exact_posterior(phi, targets, prior_var, noise)
    from zoo.gaussians import FullGaussian

    q = FullGaussian.from_moments(mean, cov)
    m = BayesLastLayer(IdentityBackbone(D), way=C, prior="fixed", prior_var=prior_var)
    ell = m.expected_log_likelihood(q, phi, targets, episode, log_likelihood, salt=0,
                                    samples=20_000)
    elbo = ell.sum() - kl_divergence(q, m.prior(C))
    marginal = MultivariateNormal(torch.zeros(len(phi), dtype=DT),
                                  prior_var * phi @ phi.T + noise * torch.eye(len(phi), dtype=DT))
    evidence = marginal.log_prob(targets.T).sum()
    assert elbo.item() == pytest.approx(evidence.item(), abs=0.05)


def test_vi_with_a_gaussian_likelihood_converges_to_the_exact_posterior():
    """The full family by plain ascent on the summed ELBO (antithetic Sobol draws make the
    mean's gradient exact, so the mean converges exactly; the covariance to MC accuracy)."""
    prior_var, noise = 2.0, 0.25
    phi, targets, log_likelihood, episode = gaussian_problem(noise)
    mean, cov = exact_posterior(phi, targets, prior_var, noise)
    m = BayesLastLayer(IdentityBackbone(D), way=C, family="full", prior="fixed",
                       prior_var=prior_var, inner_optimizer="sgd", inner_lr=0.004,
                       elbo_scaling="batch", estimator="sobol")
    q, trace = m.fit(phi, targets, episode, steps=300, samples=256, create_graph=False,
                     log_likelihood=log_likelihood)
    assert torch.allclose(q.mean, mean, atol=1e-6)
    assert torch.allclose(q.variance(), cov.diagonal(), rtol=0.1)
    assert (q.covariance() - cov).abs().max() < 0.1 * cov.abs().max()
    assert trace[-1] > trace[0]


def test_the_inner_rule_defaults_to_plain_ascent_for_diag_and_adam_otherwise():
    rules = {family: BayesLastLayer(IdentityBackbone(D), way=C, family=family).inner_optimizer()
             for family in FAMILIES}
    assert [type(r).__name__ for r in rules.values()] == ["Ascent", "AdamAscent", "AdamAscent"]
    assert rules["diag"].lr == 0.2 and rules["kfac"].lr == 0.1


def test_adam_ascent_steps_up_by_bias_corrected_moments():
    """``p + lr (m_t / c1) / (sqrt(v_t / c2 + eps^2) + eps)`` with Adam's moments of the
    gradients so far: two steps, written out."""
    b1, b2, eps, lr = 0.9, 0.999, 1e-8, 0.1
    g1 = torch.tensor([0.5, -2.0, 0.0], dtype=torch.float64)
    g2 = torch.tensor([1.0, 0.25, 0.0], dtype=torch.float64)
    rule, p = AdamAscent(lr), torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    (q,) = rule([p], (g1,))
    (r,) = rule([q], (g2,))
    m1, v1 = (1 - b1) * g1, (1 - b2) * g1 * g1
    step1 = p + lr * (m1 / (1 - b1)) / ((v1 / (1 - b2) + eps**2).sqrt() + eps)
    m2, v2 = b1 * m1 + (1 - b1) * g2, b2 * v1 + (1 - b2) * g2 * g2
    step2 = step1 + lr * (m2 / (1 - b1**2)) / ((v2 / (1 - b2**2) + eps**2).sqrt() + eps)
    assert torch.equal(q, step1) and torch.equal(r, step2)
    assert float(q[2]) == 3.0 and 0.99 * lr < float(q[0] - p[0]) <= lr  # a first step moves ~lr


def test_pretraining_loss_is_cross_entropy_over_the_class_table():
    m = BayesLastLayer(IdentityBackbone(28 * 28, learnable=True), way=2,
                       backbone_training="pretrain", num_classes=4)
    toy = toy_episode(2, 2)
    ep = Episode(toy.support_x.flatten(1), toy.support_y, toy.query_x.flatten(1), toy.query_y,
                 way=2, shot=2, info=toy.info)
    x = torch.cat([ep.support_x, ep.query_x])
    y = torch.cat([ep.support_y, ep.query_y])
    loss = m.meta_loss(ep)
    assert m.pretraining.class_index == {"toy-0": 0, "toy-1": 1}
    expected = torch.nn.functional.cross_entropy(m.pretraining.classifier(m.backbone(x)), y)
    assert torch.allclose(loss, expected)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["full", "kfac"])
def test_conformance_other_families(family):
    """The default (diag) is checked with every method in ``tests/test_conformance.py``."""
    check_method("bayes-last-layer", family=family, steps_train=2, steps_test=2)


@pytest.mark.slow
def test_conformance_pretrained():
    check_method("bayes-last-layer", backbone_training="pretrain", steps_test=5)


def test_the_test_budget_is_the_meta_training_budget():
    """Chosen on validation episodes (benchmarks/bayes_last_layer/inner_budget.py): the belief the
    backbone was meta-learned for, not the ELBO's optimum."""
    defaults = BayesLastLayer.hyperparameters
    assert defaults["steps_test"].default == defaults["steps_train"].default == 10


@pytest.mark.parametrize("family", FAMILIES)
def test_own_uncertainty_is_the_latent_variance_of_the_weight_draws(family):
    """``extras["uncertainty"]`` is ``sum_c Var_q(phi^T w_c)``: the variance over 40,000 draws of
    the head's weights from the fitted belief, within Monte-Carlo error."""
    from zoo.families import weight_samples

    g = torch.Generator().manual_seed(0)
    support, query = torch.randn(4, 3, generator=g), torch.randn(5, 3, generator=g)
    episode = Episode(support, torch.tensor([0, 1, 0, 1]), query, torch.zeros(5, dtype=torch.long),
                      way=2, shot=2, info={"seed": 0})
    method = BayesLastLayer(IdentityBackbone(3), way=2, family=family, steps_test=3).eval()
    with torch.no_grad():
        own = method.predict(episode.unlabelled()).extras["uncertainty"].double()
        phi_s, phi_q = method.head_features(episode)
    q, _ = method.posterior(phi_s, episode)
    n = q.noise_dim * (q.batch_shape.numel() if q.batch_shape else 1)
    z = torch.randn(40_000, n, generator=torch.Generator().manual_seed(1), dtype=DT)
    with torch.no_grad():
        f = phi_q @ weight_samples(q, 2, z).mT  # [S, Q, C]
    assert own.shape == (5,)
    assert torch.allclose(own, f.var(0).sum(-1), rtol=0.03)
