"""The core's variational algebra (:mod:`zoo.variational`): softmax expectations and their
hand-written backward, the mean-parameter gradient, the posteriors' KL; each against autograd
of an exact (quadrature) expectation or a closed form."""

from __future__ import annotations

import torch
from torch.distributions import MultivariateNormal

from zoo.expectations import GaussHermiteEstimator, standard_normal_draws
from zoo.gaussians import DiagonalGaussian
from zoo.gp import DTYPE
from zoo.testing import exact_expected_log_softmax, softmax_marginals
from zoo.variational import (
    FullGaussianPosterior,
    SoftmaxLikelihood,
    WhitenedPosterior,
    mean_parameter_gradient,
    softmax_draw_moments,
)


def test_expected_gradients_match_autograd_of_an_exact_expectation():
    onehot, mean, var = softmax_marginals()
    m, v = mean.clone().requires_grad_(), var.clone().requires_grad_()
    exact = exact_expected_log_softmax(onehot, m, v)
    dm, dv = torch.autograd.grad(exact.sum(), (m, v))
    est = SoftmaxLikelihood(onehot, standard_normal_draws(2**14, 3, seed=3)).expectations(mean, var)
    assert torch.allclose(est.ell, exact.detach(), atol=1e-4)
    assert torch.allclose(est.g_m, dm, atol=1e-3)
    assert torch.allclose(est.g_v, dv, atol=1e-3)  # Price: 1/2 E[s^2 - s]
    assert dv.abs().min() > 1e-2  # the check is not vacuous


def test_float32_draw_moments_agree_with_float64_log_softmax():
    onehot, mean, var = softmax_marginals(N=6, C=4)
    z = standard_normal_draws(256, 4, seed=5)
    lse, s, s2 = softmax_draw_moments(mean, var, z.float())
    f = mean[:, None, :] + var.sqrt()[:, None, :] * z
    logp = torch.log_softmax(f, -1)
    assert lse.dtype == DTYPE
    assert torch.allclose(lse, torch.logsumexp(f, -1).mean(-1), atol=1e-5)
    assert torch.allclose(s, logp.exp().mean(-2), atol=1e-6)
    assert torch.allclose(s2, logp.exp().pow(2).mean(-2), atol=1e-6)


def test_draw_moments_backward_matches_autograd_of_the_plain_formula():
    """The hand-written backward (recomputes the per-draw softmax) against gradcheck in float64
    and against autograd through ``logsumexp``/``softmax`` with float32 draws."""
    _, mean, var = softmax_marginals(N=5, C=4, seed=2)
    m, v = mean.clone().requires_grad_(), (0.2 + var).requires_grad_()
    z = standard_normal_draws(64, 4, seed=4)
    assert torch.autograd.gradcheck(lambda a, b: softmax_draw_moments(a, b, z), (m, v))
    w = [torch.randn(5, dtype=DTYPE), torch.randn(5, 4, dtype=DTYPE), torch.randn(5, 4, dtype=DTYPE)]

    def plain(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        f = a[:, None, :] + b.sqrt()[:, None, :] * z
        s = torch.softmax(f, -1)
        return torch.logsumexp(f, -1).mean(-1), s.mean(-2), s.pow(2).mean(-2)

    def grads(fn) -> tuple[torch.Tensor, ...]:
        out = fn(m, v)
        return torch.autograd.grad(sum((o * wi).sum() for o, wi in zip(out, w)), (m, v))

    ours = grads(lambda a, b: softmax_draw_moments(a, b, z.float()))
    for g, ref in zip(ours, grads(plain)):
        assert torch.allclose(g, ref, atol=1e-5)


def test_softmax_hessian_diagonal_is_s_squared_minus_s():
    f = torch.tensor([0.3, -1.2, 0.8], dtype=DTYPE)
    H = torch.autograd.functional.hessian(lambda x: torch.log_softmax(x, -1)[1], f)
    s = torch.softmax(f, -1)
    assert torch.allclose(torch.diagonal(H), s * s - s, atol=1e-12)


def test_mean_parameter_gradient_is_the_papers_not_the_public_codes():
    onehot, mean, var = softmax_marginals()
    mu1 = mean.clone().requires_grad_()
    mu2 = (var + mean**2).clone().requires_grad_()
    ell = exact_expected_log_softmax(onehot, mu1, mu2 - mu1**2)
    d1, d2 = torch.autograd.grad(ell.sum(), (mu1, mu2))
    m, v = mean.clone().requires_grad_(), var.clone().requires_grad_()
    g_m, g_v = torch.autograd.grad(exact_expected_log_softmax(onehot, m, v).sum(), (m, v))
    ours = mean_parameter_gradient(mean, g_m, g_v)
    assert torch.allclose(ours[0], d1, atol=1e-10) and torch.allclose(ours[1], d2, atol=1e-10)
    public_code = g_m - 2 * g_m * g_v
    assert (public_code - d1).abs().max() > 0.1


def _problem(n: int, batch: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(batch, n, n, generator=g, dtype=DTYPE)
    K = a @ a.mT / n + 0.1 * torch.eye(n, dtype=DTYPE)
    b = torch.randn(batch, n, n, generator=g, dtype=DTYPE)
    S = b @ b.mT / n + 0.05 * torch.eye(n, dtype=DTYPE)
    return K, torch.linalg.cholesky(K), torch.randn(batch, n, generator=g, dtype=DTYPE), S


def test_kl_to_prior_is_the_gaussian_families_kl_bit_for_bit_as_before():
    """Both posteriors take their KL from :func:`zoo.gaussians.kl_divergence`; the values equal
    the closed forms the module used to hold, to the last bit (so the GP classifiers' ELBO traces
    are unchanged), and ``torch.distributions``' KL to rounding."""
    for n, batch, seed in ((3, 1, 0), (17, 5, 1), (64, 2, 2)):
        K, LK, m, S = _problem(n, batch, seed)
        LS = torch.linalg.cholesky(S)
        post = FullGaussianPosterior(K, m, S, LK)
        A = torch.linalg.solve_triangular(LK, LS, upper=False)
        b = torch.linalg.solve_triangular(LK, m[..., None], upper=False)[..., 0]
        logdet = 2 * (torch.diagonal(LK, dim1=-2, dim2=-1).log()
                      - torch.diagonal(LS, dim1=-2, dim2=-1).log()).sum(-1)
        before = 0.5 * (A.pow(2).sum((-2, -1)) + b.pow(2).sum(-1) - n + logdet)
        assert torch.equal(post.kl_to_prior(), before)
        reference = torch.distributions.kl_divergence(MultivariateNormal(m, S),
                                                      MultivariateNormal(torch.zeros_like(m), K))
        assert torch.allclose(post.kl_to_prior(), reference, rtol=1e-9)

        white = WhitenedPosterior(LK, m, S)
        before = 0.5 * (torch.diagonal(S, dim1=-2, dim2=-1).sum(-1) + m.pow(2).sum(-1) - n
                        - 2 * torch.diagonal(LS, dim1=-2, dim2=-1).log().sum(-1))
        assert torch.equal(white.kl_to_prior(), before)
        reference = torch.distributions.kl_divergence(
            MultivariateNormal(m, S), MultivariateNormal(torch.zeros_like(m), torch.eye(n, dtype=DTYPE)))
        assert torch.allclose(white.kl_to_prior(), reference, rtol=1e-9)


def test_univariate_parameterisations_round_trip():
    m, v = torch.tensor([0.3, -2.0]), torch.tensor([0.5, 4.0])
    q = DiagonalGaussian(m, v)
    e1, e2 = q.natural()
    assert torch.allclose(e1, m / v) and torch.allclose(e2, -0.5 / v)
    back = DiagonalGaussian.from_natural(e1, e2)
    assert torch.allclose(back.mean, m) and torch.allclose(back.var, v)
    mu1, mu2 = q.mean_parameters()
    assert torch.allclose(mu2, v + m**2)
    back = DiagonalGaussian.from_mean_parameters(mu1, mu2)
    assert torch.allclose(back.mean, m) and torch.allclose(back.var, v)


def test_weighted_rule_draw_moments_and_backward_match_the_generic_path():
    """With a Gauss-Hermite rule (weights) the fused moments and their backward equal the
    estimator's generic weighted average and autograd through it, and the likelihood's
    expectations match autograd of the quadrature expected log-likelihood."""
    onehot, mean, var = softmax_marginals(N=3, C=3, seed=4)
    rule = GaussHermiteEstimator(nodes=8).rule(3)
    m, v = mean.clone().requires_grad_(), var.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: softmax_draw_moments(a, b, rule), (m, v))
    ours = softmax_draw_moments(m, v, rule)
    ref = (rule.expect(lambda f: torch.logsumexp(f, -1), m, v),
           rule.expect(lambda f: torch.softmax(f, -1), m, v),
           rule.expect(lambda f: torch.softmax(f, -1).pow(2), m, v))
    for a, b in zip(ours, ref):
        assert torch.allclose(a, b, atol=1e-12)
    e = SoftmaxLikelihood(onehot, rule, dtype=DTYPE).expectations(mean, var)
    ell = rule.expect(lambda f: (torch.log_softmax(f, -1) * onehot[:, None, :]).sum(-1), m, v)
    dm, dv = torch.autograd.grad(ell.sum(), (m, v))
    assert torch.allclose(e.ell, ell.detach(), atol=1e-12)
    assert torch.allclose(e.g_m, dm, atol=1e-12)  # Bonnet holds rule by rule
    assert torch.allclose(e.g_v, dv, atol=1e-5)  # Price only up to the quadrature error


def test_draw_moments_in_blocks_of_any_layout_equal_the_plain_formula(monkeypatch):
    """Block by block of points (several blocks here), from transposed views and with a leading
    batch axis, the moments and their backward equal the one-shot formula in float64 to 1e-12:
    blocking and layout change only the order of float32 rounding, not the mathematics."""
    import zoo.variational as variational

    monkeypatch.setattr(variational, "CHUNK_ELEMENTS", 3 * 4 * 32)  # 3 points per block
    g = torch.Generator().manual_seed(7)
    mean_t = torch.randn(2, 4, 11, generator=g, dtype=DTYPE).requires_grad_()  # [R, C, N]
    var_t = (0.1 + torch.rand(2, 4, 11, generator=g, dtype=DTYPE)).requires_grad_()
    z = standard_normal_draws(32, 4, seed=6)
    w = [torch.randn(2, 11, generator=g, dtype=DTYPE), torch.randn(2, 11, 4, generator=g,
                                                                    dtype=DTYPE),
         torch.randn(2, 11, 4, generator=g, dtype=DTYPE)]

    def plain(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        f = a[..., None, :] + b.sqrt()[..., None, :] * z
        s = torch.softmax(f, -1)
        return torch.logsumexp(f, -1).mean(-1), s.mean(-2), s.pow(2).mean(-2)

    results = []
    for fn in (lambda a, b: softmax_draw_moments(a, b, z), plain):
        out = fn(mean_t.transpose(-1, -2), var_t.transpose(-1, -2))
        results.append((out, torch.autograd.grad(sum((o * wi).sum() for o, wi in zip(out, w)),
                                                 (mean_t, var_t))))
    (ours, ours_grad), (ref, ref_grad) = results
    for a, b in zip((*ours, *ours_grad), (*ref, *ref_grad)):
        assert a.shape == b.shape
        assert torch.allclose(a, b, atol=1e-12)
