"""The latent-Gaussian family: function space (a GP with the linear kernel) and weight space (a
Gaussian over a linear head's weights with the matching prior) give the same predictive; the one
kernel-matrix builder equals the plugins' former inline constructions."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from zoo.backbones import Backbone
from zoo.episode import Episode
from zoo.families.gp import GPMethod
from zoo.families.last_layer import LastLayerMethod
from zoo.gaussians import FullGaussian
from zoo.gp import DTYPE
from zoo.jitter import check_finite
from zoo.kernels import BUILTIN as KERNELS
from zoo.seeds import episode_own_seed
from zoo.testing import build_for_tests, toy_episode

D, C, N, Q = 5, 3, 12, 7


def gaussian_weight_posterior(phi: Tensor, lam: Tensor, nu: Tensor, prior_var: Tensor | float,
                              ) -> FullGaussian:
    """The per-class weight posterior (natural form, batch ``[C]``) from the prior
    ``N(0, prior_var I)`` and Gaussian sites ``exp(nu_cn f_cn - lam_cn f_cn^2 / 2)`` on
    ``f_cn = phi_n^T w_c`` (``phi [N, D]``, ``lam, nu [C, N]``): precision
    ``I / s + Phi^T diag(lam) Phi``, ``eta1 = Phi^T nu``."""
    phi, lam, nu = phi.to(DTYPE), lam.to(DTYPE), nu.to(DTYPE)
    eye = torch.eye(phi.shape[-1], dtype=DTYPE, device=phi.device)
    precision = eye / prior_var + torch.einsum("nd,cn,ne->cde", phi, lam, phi)
    U = torch.linalg.cholesky(precision)
    return FullGaussian.from_precision_tril(torch.cholesky_solve((nu @ phi)[..., None], U)[..., 0],
                                            U)


class Identity(Backbone):
    """The inputs are the features (float64), so both members see identical ``phi``."""

    feature_dim = D

    def forward(self, x: Tensor) -> Tensor:
        return x


def sites(episode: Episode) -> tuple[Tensor, Tensor]:
    """Gaussian sites per class on the support (precision, natural mean), as GP regression on
    one-vs-rest targets would give."""
    onehot = torch.nn.functional.one_hot(episode.support_y, episode.way).T.to(DTYPE)
    return 0.5 + onehot, 3 * onehot - 1


class SiteGP(GPMethod):
    name = "site-gp"

    def latent(self, episode: Episode) -> tuple[Tensor, Tensor]:
        mats = self.kernel_matrices(episode)
        return self.predictive(self.posterior(mats.Kss, *sites(episode), episode), mats)

    def meta_loss(self, episode: Episode) -> Tensor:
        raise NotImplementedError


class SiteLastLayer(LastLayerMethod):
    name = "site-last-layer"

    def __init__(self, *args: Any, prior_var: Tensor, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.prior_var = prior_var

    def weight_posterior(self, episode: Episode) -> tuple[Tensor, Tensor]:
        phi = self.features(episode.support_x)
        return gaussian_weight_posterior(phi, *sites(episode), self.prior_var)

    def meta_loss(self, episode: Episode) -> Tensor:
        raise NotImplementedError


@pytest.mark.parametrize("estimator", ["sobol[samples=64]", "gauss-hermite[nodes=5]"])
def test_linear_kernel_gp_equals_gaussian_last_layer(estimator):
    g = torch.Generator().manual_seed(0)
    episode = Episode(torch.randn(N, D, generator=g, dtype=DTYPE), torch.arange(N) % C,
                      torch.randn(Q, D, generator=g, dtype=DTYPE), torch.arange(Q) % C,
                      way=C, shot=N // C, info={"seed": 11})
    kernel = KERNELS["linear"](D, outputscale=1.7)
    gp = SiteGP(Identity(), way=C, kernel=kernel, estimator=estimator)
    prior_var = kernel.outputscale.detach().to(DTYPE)  # the kernel's own (float32) scale
    ll = SiteLastLayer(Identity(), way=C, prior_var=prior_var, estimator=estimator)
    with torch.no_grad():
        (m_gp, v_gp), (m_ll, v_ll) = gp.latent(episode), ll.latent(episode)
        assert m_gp.shape == (Q, C) and v_gp.min() > 1e-3  # N > D: K is singular, still fine
        assert torch.allclose(m_gp, m_ll, atol=1e-10, rtol=0)
        assert torch.allclose(v_gp, v_ll, atol=1e-10, rtol=0)
        seed = episode_own_seed(episode)  # predict's
        p_gp, p_ll = gp.probabilities(m_gp, v_gp, seed=seed), ll.probabilities(m_ll, v_ll, seed=seed)
        assert torch.allclose(p_gp, p_ll, atol=1e-10, rtol=0)
        assert torch.equal(gp.predict(episode).probs, p_gp.float())


def inline_labelled_kernel(method: GPMethod, episode: Episode) -> Tensor:
    """The labelled kernel matrix as dkt, ove and logistic-softmax built it inline (now from
    float64 features, as the core builds it)."""
    x = torch.cat([episode.support_x, episode.query_x])
    z = method.kernel.prepare(check_finite(method.features(x), "features", episode)).to(DTYPE)
    K = check_finite(method.kernel.gram(z, z), "kernel matrix", episode)
    return K.expand(episode.way, *K.shape[-2:])


def md_bfsc_labelled_kernel(method: GPMethod, episode: Episode) -> Tensor:
    """md-bfsc's former construction: the support-support block of an episode whose support is
    support and query together."""
    x = torch.cat([episode.support_x, episode.query_x])
    n = x.shape[0]
    z = method.kernel.prepare(check_finite(method.features(x), "features", episode)).to(DTYPE)
    K = check_finite(method.kernel.gram(z[:n], z[:n]), "kernel matrix", episode)
    return K.expand(episode.way, *K.shape[-2:]) if K.ndim == 2 else K


@pytest.mark.parametrize("name,reference", [("dkt", inline_labelled_kernel),
                                            ("ove", inline_labelled_kernel),
                                            ("logistic-softmax", inline_labelled_kernel),
                                            ("md-bfsc", md_bfsc_labelled_kernel)])
def test_one_kernel_builder_equals_each_plugins_former_inline_code(name, reference):
    episode = toy_episode(3, 2, query=2)
    method = build_for_tests(name, 3).eval()
    with torch.no_grad():
        K, y = method.labelled_kernel(episode)
        assert torch.equal(K, reference(method, episode))
        assert torch.equal(y, torch.cat([episode.support_y, episode.query_y]))
        mats = method.kernel_matrices(episode)
        n = episode.support_x.shape[0]
        assert torch.allclose(mats.Kss, K[:, :n, :n]) and torch.allclose(mats.Ksq, K[:, :n, n:])
        assert torch.allclose(mats.kqq, torch.diagonal(K[:, n:, n:], dim1=-2, dim2=-1))


class Offset(Backbone):
    """float32 features far from the origin and close to each other: their squared distances
    cancel catastrophically in float32."""

    feature_dim = D

    def forward(self, x: Tensor) -> Tensor:
        return (1e3 + 1e-2 * x.flatten(1)[:, :D]).float()


def test_kernel_matrices_are_formed_in_float64():
    episode = toy_episode(C, 2, query=2)
    method = SiteGP(Offset(), way=C, kernel=KERNELS["rbf"](D, lengthscale=0.05))
    with torch.no_grad():
        mats = method.kernel_matrices(episode)
        z = method.features(torch.cat([episode.support_x, episode.query_x])).double()
        n = episode.support_x.shape[0]
        d2 = (z[:n, None, :] - z[None, :n, :]).pow(2).sum(-1)  # direct differences, no cancellation
        reference = torch.exp(-0.5 * d2 / 0.05**2)
    assert mats.Kss.dtype == DTYPE
    assert torch.allclose(mats.Kss[0], reference, atol=1e-9), \
        float((mats.Kss[0] - reference).abs().max())


class Linear(Backbone):
    """A trainable backbone, so that the backbone's group is not empty."""

    feature_dim = D

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(D, D)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x.flatten(1)[:, :D])


def _groups(**hparams: Any) -> list[tuple[float, set[str]]]:
    method = SiteGP(Linear(), way=C, kernel=KERNELS["rbf"](D), kernel_lr=1e-4, lr=1e-3, **hparams)
    names = {id(p): n for n, p in method.named_parameters()}
    return [(g["lr"], {names[id(p)] for p in g["params"]}) for g in method.param_groups()]


def test_outputscale_lr_moves_only_the_output_scale_to_its_own_group():
    backbone = {"backbone.layer.weight", "backbone.layer.bias"}
    kernel = {"kernel.raw_outputscale", "kernel.raw_lengthscale"}
    assert _groups() == [(1e-3, backbone), (1e-4, kernel)]
    assert _groups(outputscale_lr=0.1) == [(1e-3, backbone), (1e-4, {"kernel.raw_lengthscale"}),
                                           (0.1, {"kernel.raw_outputscale"})]
