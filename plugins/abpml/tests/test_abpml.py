"""Correctness of ABPML (Sun et al., AISTATS 2021): the prototype maths, the ProtoNet limit, the
inner loop, the meta-gradient, conformance and way transfer."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from zoo_abpml import ABPML
from zoo_abpml.prototypes import aggregate, kl_diagonal, log_density, task_prior_kl
from zoo_protonet import ProtoNet

from zoo import Episode, HyperParameterError
from zoo.testing import (
    IdentityBackbone,
    TanhBackbone,
    build_for_tests,
    tiny_episode,
    toy_episode,
)

D = torch.float64


def gaussians(n: int, p: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, p, generator=g, dtype=D),
            0.1 + torch.rand(n, p, generator=g, dtype=D))


def tiny(**hparams) -> ABPML:
    torch.manual_seed(0)
    hp = {"inner_lr": 0.3, "inner_steps": 2, "test_inner_steps": 2, "embedding_dim": 2, **hparams}
    return ABPML(TanhBackbone(), way=2, **hp).double()


# -- the prototype maths ---------------------------------------------------------------------------

def test_harmonic_mean_of_identical_gaussians_is_that_gaussian():
    mu, var = gaussians(1)
    mean, cvar = aggregate(mu.expand(4, -1), var.expand(4, -1), torch.zeros(4, dtype=torch.long), 1)
    assert torch.allclose(mean, mu) and torch.allclose(cvar, var)


def test_one_shot_aggregation_returns_its_input():
    mu, var = gaussians(3)
    for aggregation in ("harmonic", "mean"):
        mean, cvar = aggregate(mu, var, torch.arange(3), 3, aggregation)
        assert torch.allclose(mean, mu) and torch.allclose(cvar, var)


def test_harmonic_mean_is_precision_weighted_and_does_not_shrink_with_the_shot():
    mu = torch.tensor([[0.0], [3.0]], dtype=D)
    var = torch.tensor([[1.0], [2.0]], dtype=D)
    mean, cvar = aggregate(mu, var, torch.zeros(2, dtype=torch.long), 1)
    # precisions 1 and 1/2: mean (0 + 3/2) / (3/2) = 1; variance (mean precision 3/4)^-1 = 4/3
    assert torch.allclose(mean, torch.tensor([[1.0]], dtype=D))
    assert torch.allclose(cvar, torch.tensor([[4 / 3]], dtype=D))


def test_diagonal_kl_equals_torch_distributions():
    (m1, v1), (m2, v2) = gaussians(4, seed=1), gaussians(4, seed=2)
    normal = torch.distributions.Normal
    expected = torch.distributions.kl_divergence(normal(m1, v1.sqrt()), normal(m2, v2.sqrt()))
    assert torch.allclose(kl_diagonal(m1, v1, m2, v2), expected.sum(-1))


def test_log_density_equals_torch_distributions():
    x, _ = gaussians(5, seed=3)
    mean, var = gaussians(2, seed=4)
    expected = torch.distributions.Normal(mean, var.sqrt()).log_prob(x[:, None]).sum(-1)
    assert torch.allclose(log_density(x, mean, var), expected)


def test_task_prior_kl_uses_the_support_points_or_the_union_prior_at_one_shot():
    mu, var = gaussians(6, seed=5)
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    mean, cvar = aggregate(mu, var, y, 3)
    by_hand = torch.stack([kl_diagonal(mean[y[n]], cvar[y[n]], mu[n], var[n]) for n in range(6)])
    assert torch.allclose(task_prior_kl(mu, var, y, mean, cvar), by_hand.mean())
    one = torch.arange(3)
    mean1, cvar1 = aggregate(mu[:3], var[:3], one, 3)
    union_mean = (mu[:3] / var[:3]).sum(0) / var[:3].reciprocal().sum(0)
    union_var = 3 / var[:3].reciprocal().sum(0)
    expected = kl_diagonal(mean1, cvar1, union_mean, union_var).mean()
    value = task_prior_kl(mu[:3], var[:3], one, mean1, cvar1)
    assert torch.allclose(value, expected) and value > 0


def test_variance_stays_between_b_and_w_plus_b():
    torch.manual_seed(0)
    m = ABPML(IdentityBackbone(4), way=2, embedding_dim=3)
    with torch.no_grad():
        m.embedding.w.fill_(-0.7)
        m.embedding.b.fill_(-0.2)
        _, var = m.embedding(1e3 * torch.randn(200, 4))
    assert var.min() >= 0.2 - 1e-7 and var.max() <= 0.9 + 1e-7
    assert var.min() < 0.21 and var.max() > 0.89  # both ends are reached


def test_init_w_and_b_set_the_variance_range_at_the_start():
    m = ABPML(IdentityBackbone(4), way=2, embedding_dim=3, init_w=2.0, init_b=0.5)
    assert (m.embedding.w.item(), m.embedding.b.item()) == (2.0, 0.5)
    _, var = m.embedding(torch.randn(50, 4))
    assert var.min() >= 0.5 and var.max() <= 2.5


# -- the method ------------------------------------------------------------------------------------

class MeanHead(nn.Module):
    """The mean half of an ABPML embedding, as a backbone for ProtoNet."""

    def __init__(self, embedding: nn.Module):
        super().__init__()
        self.embedding = embedding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.embedding(x)[0]


def test_constant_variance_gives_protonet_on_the_same_embedding():
    """With w = 0 and |b| = 1/2, log N(mu(x); mu_c, b I) = -||mu(x) - mu_c||^2 + const."""
    m, ep = tiny(test_inner_steps=0).eval(), tiny_episode()
    with torch.no_grad():
        m.embedding.w.zero_()
        m.embedding.b.fill_(0.5)
        probs = m.predict(ep).probs
        proto = ProtoNet(MeanHead(m.embedding), way=2).predict(ep).probs
    assert torch.allclose(probs, proto)


def test_support_order_invariance_and_relabelling_equivariance():
    m, ep = tiny().eval(), tiny_episode()
    probs = m.predict(ep).probs
    order = torch.tensor([3, 1, 0, 2])
    shuffled = Episode(ep.support_x[order], ep.support_y[order], ep.query_x, ep.query_y,
                       way=2, shot=2, info=ep.info)
    assert torch.allclose(m.predict(shuffled).probs, probs)
    swap = torch.tensor([1, 0])
    relabelled = Episode(ep.support_x, swap[ep.support_y], ep.query_x, swap[ep.query_y],
                         way=2, shot=2, info=ep.info)
    assert torch.allclose(m.predict(relabelled).probs, probs[:, swap])


def test_zero_inner_lr_is_the_unadapted_loss():
    m, ep = tiny(inner_lr=0.0), tiny_episode()
    expected = torch.nn.functional.cross_entropy(m.logits(m.embedding, ep), ep.query_y)
    assert torch.allclose(m.meta_loss(ep), expected)


def test_one_shot_union_prior_path_gives_a_finite_loss():
    m = build_for_tests("abpml", 5)
    assert torch.isfinite(m.meta_loss(toy_episode(5, 1)))


@pytest.mark.parametrize("first_order", [False, True])
def test_meta_gradient_equals_finite_differences_only_when_second_order(first_order):
    m, ep = tiny(first_order=first_order), tiny_episode()
    params = [p for p in m.parameters() if p.requires_grad]
    grads = torch.autograd.grad(m.meta_loss(ep), params)
    g = torch.Generator().manual_seed(1)
    direction = [torch.randn(p.shape, generator=g, dtype=D) for p in params]
    analytic = sum((gr * d).sum() for gr, d in zip(grads, direction))
    eps = 1e-6

    def loss_at(sign: float) -> float:
        with torch.no_grad():
            for p, d in zip(params, direction):
                p.add_(sign * eps * d)
        value = m.meta_loss(ep).item()
        with torch.no_grad():
            for p, d in zip(params, direction):
                p.sub_(sign * eps * d)
        return value

    numeric = (loss_at(1.0) - loss_at(-1.0)) / (2 * eps)
    close = abs(float(analytic) - numeric) < 1e-6 * max(1.0, abs(numeric))
    assert close is not first_order, (float(analytic), numeric)


def test_ablation_variants_and_their_checks():
    ep = toy_episode(3, 2)
    losses = {(kl, agg): build_for_tests("abpml", 3, kl=kl, aggregation=agg).meta_loss(ep).item()
              for kl in (True, False) for agg in ("harmonic", "mean")}
    assert len(set(losses.values())) == 4
    with pytest.raises(HyperParameterError, match="aggregation"):
        build_for_tests("abpml", 3, aggregation="median")


def test_protocol_defaults_come_from_the_appendix_and_given_values_win():
    omniglot = build_for_tests("abpml", 5).hparams
    assert (omniglot["inner_steps"], omniglot["inner_lr"], omniglot["meta_batch"]) == (1, 0.1, 32)
    natural = build_for_tests("abpml", 5, protocol="miniimagenet", meta_batch=2).hparams
    assert (natural["inner_steps"], natural["test_inner_steps"], natural["inner_lr"],
            natural["meta_batch"]) == (5, 5, 0.01, 2)


def test_a_model_trained_five_way_scores_twenty_way_episodes():
    torch.manual_seed(0)
    m = build_for_tests("abpml", 5, meta_batch=1)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    for i in range(3):
        opt.zero_grad()
        m.meta_loss(toy_episode(5, 1, seed=i)).backward()
        opt.step()
    m.eval()
    ep = toy_episode(20, 5, query=3)
    probs = m.predict(ep).probs
    assert probs.shape == (60, 20)
    assert torch.allclose(probs.sum(-1), torch.ones(60), atol=1e-5)
    assert (probs.argmax(1) == ep.query_y).float().mean() > 3 / 20  # well above chance, 1/20
