"""The weight-space family with :mod:`zoo.gaussians` beliefs: marginals of a belief over
``vec(W)`` equal those of the same belief held per class, and averaging ``softmax(W phi)`` over
weight draws estimates the same probabilities as the marginals' expectation step."""

from __future__ import annotations

import torch

from zoo.episode import Episode
from zoo.families.last_layer import LastLayerMethod, head_rows, linear_gaussian_marginals, weight_samples
from zoo.gaussians import FullGaussian
from zoo.gp import DTYPE
from zoo.seeds import draw_seed
from zoo.testing import IdentityBackbone

C, D, Q = 3, 4, 5


def per_class_belief(seed: int = 0) -> FullGaussian:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(C, D, D + 2, generator=g, dtype=DTYPE)
    return FullGaussian.from_moments(torch.randn(C, D, generator=g, dtype=DTYPE),
                                     X @ X.mT / D + 0.1 * torch.eye(D, dtype=DTYPE))


def test_head_rows_give_the_logits():
    g = torch.Generator().manual_seed(1)
    phi, W = torch.randn(Q, D, generator=g), torch.randn(C, D, generator=g)
    assert torch.allclose(head_rows(phi, C) @ W.flatten(), phi @ W.T)


def test_marginals_per_class_and_over_vec_w_agree():
    q = per_class_belief()
    whole = FullGaussian.from_moments(q.mean.flatten(), torch.block_diag(*q.covariance()))
    phi = torch.randn(Q, D, generator=torch.Generator().manual_seed(2), dtype=DTYPE)
    (m1, v1), (m2, v2) = linear_gaussian_marginals(phi, q, C), linear_gaussian_marginals(phi, whole, C)
    assert torch.allclose(m1, m2) and torch.allclose(v1, v2)
    ref = torch.einsum("qd,cde,qe->qc", phi, q.covariance(), phi)
    assert torch.allclose(v1, ref)


class Fixed(LastLayerMethod):
    name = "fixed-belief"

    def weight_posterior(self, episode: Episode) -> FullGaussian:
        return per_class_belief()

    def meta_loss(self, episode: Episode) -> torch.Tensor:
        raise NotImplementedError


def test_weight_draws_and_marginals_estimate_the_same_probabilities():
    g = torch.Generator().manual_seed(3)
    phi = torch.randn(Q, D, generator=g, dtype=DTYPE)
    episode = Episode(phi, torch.arange(Q) % C, phi, torch.arange(Q) % C, way=C, shot=1,
                      info={"seed": 4})
    m = Fixed(IdentityBackbone(D), way=C, estimator="mc[samples=20000]")
    q = m.weight_posterior(episode)
    by_weights = m.weight_probabilities(phi, q, episode, salt=1, samples=20000)
    mean, var = m.latent(episode)
    by_marginals = m.probabilities(mean, var, seed=draw_seed(episode, 2))
    assert torch.allclose(by_weights, by_marginals, atol=0.01)
    W = weight_samples(q, C, torch.zeros(1, C * D, dtype=DTYPE))
    assert torch.equal(W[0], q.mean)
