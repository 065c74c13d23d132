import math

import numpy as np
import pytest
import torch
import zoo_ove
from scipy.stats import multivariate_normal
from torch import Tensor
from zoo_ove import OVE, Pairs
from zoo_ove.weights import ClassWeights

from zoo import Episode
from zoo.inference import FeatureGram, SitePosterior, augmented_log_marginal, dense, prior_draws
from zoo.kernels import RBFKernel
from zoo.testing import IdentityBackbone, check_algebra_routes, check_method, line_episode


def class_conditional(method: OVE, K: Tensor, f: Tensor, w: Tensor, y: Tensor, c: int,
                      episode: Episode) -> SitePosterior:
    """``p(f_c | f_{-c}, w, y)`` as Gaussian sites on the ``n`` points, every chain at once;
    ``f``: ``[R, C, n]``, ``w``: ``[R, n, C]`` (zero at each point's own label): one class of
    the blocked sweep at a time."""
    lam = method.conditional_precisions(w, y)[..., c, :]
    return SitePosterior(K[c], lam, method.conditional_means(f, w, y, c), method.jitter, episode.id)


def exact_psi_moments(K_psi: np.ndarray, points: int = 81, half_width: float = 7.0):
    """Posterior mean and covariance of psi under N(0, K_psi) prod sigmoid(psi), on a grid."""
    sd = np.sqrt(np.diag(K_psi))
    axes = [np.linspace(-half_width * s, half_width * s, points) for s in sd]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(sd))
    logw = multivariate_normal(np.zeros(len(sd)), K_psi).logpdf(grid)
    logw = logw - np.logaddexp(0, -grid).sum(-1)
    w = np.exp(logw - logw.max())
    w /= w.sum()
    mean = w @ grid
    cov = (grid - mean).T @ ((grid - mean) * w[:, None])
    return mean, cov


def test_pairs_give_a_psd_difference_covariance_equal_to_A_K_At():
    y, C, n = torch.tensor([0, 2, 1, 2]), 3, 4
    K = torch.randn(C, n, n, dtype=torch.float64)
    K = K @ K.transpose(-1, -2)
    pairs = Pairs(y, C)
    A = torch.zeros(len(pairs.point), C * n, dtype=torch.float64)
    rows = torch.arange(len(pairs.point))
    A[rows, pairs.label * n + pairs.point] = 1
    A[rows, pairs.other * n + pairs.point] = -1
    assert torch.allclose(pairs.prior_cov(K), A @ torch.block_diag(*K) @ A.T)
    f = torch.randn(C, n, dtype=torch.float64)
    assert torch.allclose(pairs.apply(f), A @ f.reshape(-1))
    Ksq = torch.randn(C, n, 5, dtype=torch.float64)
    cross = pairs.cross_cov(Ksq)  # Cov(A f, f_c(query)) = A [block column c]
    for c in range(C):
        col = torch.zeros(C * n, 5, dtype=torch.float64)
        col[c * n:(c + 1) * n] = Ksq[c]
        assert torch.allclose(cross[c], A @ col)


def test_augmented_marginal_is_the_authors_gaussian_form():
    K = torch.tensor([[2.0, 0.5, 0.1], [0.5, 1.0, 0.3], [0.1, 0.3, 1.5]], dtype=torch.float64)
    w = torch.tensor([0.3, 1.2, 0.05], dtype=torch.float64)
    kappa = torch.full((3,), 0.5, dtype=torch.float64)
    ours = float(augmented_log_marginal(SitePosterior(K, w, kappa), 1.0, kappa))
    z = (kappa / w).numpy()
    theirs = (multivariate_normal(np.zeros(3), K.numpy() + np.diag(1 / w.numpy())).logpdf(z)
              + 1.5 * math.log(2 * math.pi) - 0.5 * np.log(w.numpy()).sum()
              + 0.5 * (kappa.numpy() ** 2 / w.numpy()).sum() - 3 * math.log(2))
    assert ours == pytest.approx(theirs, rel=1e-12)


def check_chain_moments(ep: Episode, sampler: str, points: int, chains: int, steps: int) -> None:
    """The chains' ``psi`` after ``steps`` Gibbs steps against the exact posterior moments."""
    method = OVE(IdentityBackbone(1), way=ep.way, kernel=RBFKernel(1, lengthscale=0.8, outputscale=2.0),
                 chains=chains, sampler=sampler)
    K = method.kernel_matrices(ep).Kss.detach()
    _, psi, _, _ = method.gibbs(K, ep.support_y, steps, ep, torch.Generator().manual_seed(0))
    mean, cov = exact_psi_moments(Pairs(ep.support_y, ep.way).prior_cov(K).numpy(), points)
    se = np.sqrt(np.diag(cov) / psi.shape[0])
    assert np.all(np.abs(psi.mean(0).numpy() - mean) < 4 * se), (psi.mean(0), mean, se)
    emp_var = psi.var(0).numpy()
    assert np.all(np.abs(emp_var - np.diag(cov)) < 0.1 * np.diag(cov)), (emp_var, np.diag(cov))


@pytest.mark.parametrize("sampler", ["blocked", "joint"])
def test_gibbs_matches_the_exact_posterior_by_numerical_integration(sampler):
    check_chain_moments(line_episode(), sampler, points=81, chains=2000, steps=25)


@pytest.mark.parametrize("sampler", ["blocked", "joint"])
def test_gibbs_matches_the_exact_posterior_with_three_classes(sampler):
    """3 classes, 2 points: each class conditional of the blocked sampler has sites from two
    other classes (and class 2 has no point of its own), which 2 classes cannot show."""
    ep = Episode(torch.tensor([[-0.7], [0.6]]), torch.tensor([0, 1]), torch.tensor([[0.0]]),
                 torch.tensor([2]), way=3, shot=1, info={"seed": 3})
    check_chain_moments(ep, sampler, points=41, chains=3000, steps=25)


def test_blocked_conditional_is_the_conditional_of_the_joint():
    """The site form of ``f_c | f_{-c}, w`` equals the Gaussian conditional of the joint
    ``f | w`` (precision ``P = K^-1 + A^T W A``, natural mean ``A^T kappa``) for every class."""
    y, C, n = torch.tensor([0, 2, 1, 2]), 3, 4
    g = torch.Generator().manual_seed(0)
    X = torch.randn(C, n, n + 2, generator=g, dtype=torch.float64)
    K = X @ X.transpose(-1, -2)
    pairs = Pairs(y, C)
    M = len(pairs.point)
    w = torch.rand(1, M, generator=g, dtype=torch.float64) + 0.1
    f = torch.randn(1, C, n, generator=g, dtype=torch.float64)
    A = torch.zeros(M, C * n, dtype=torch.float64)
    A[torch.arange(M), pairs.label * n + pairs.point] = 1
    A[torch.arange(M), pairs.other * n + pairs.point] = -1
    P = torch.linalg.inv(torch.block_diag(*K)) + A.T @ torch.diag(w[0]) @ A
    h = A.T @ torch.full((M,), 0.5, dtype=torch.float64)
    method = OVE(IdentityBackbone(1), way=C, kernel=RBFKernel(1), chains=1)
    for c in range(C):
        blk = torch.zeros(C * n, dtype=torch.bool)
        blk[c * n:(c + 1) * n] = True
        cov = torch.linalg.inv(P[blk][:, blk])
        mean = cov @ (h[blk] - P[blk][:, ~blk] @ f[0].reshape(-1)[~blk])
        post = class_conditional(method, K, f, pairs.dense(w, C, n), y, c, line_episode())
        assert torch.allclose(post.mean[0], mean, atol=1e-8)
        assert torch.allclose(post.cov[0], cov, atol=1e-8)


def test_pullback_is_the_adjoint_of_the_difference_covariance():
    y, C, n = torch.tensor([0, 2, 1, 2, 0]), 3, 5
    pairs = Pairs(y, C)
    K = torch.randn(C, n, n, dtype=torch.float64, requires_grad=True)
    G = torch.randn(len(pairs.point), len(pairs.point), dtype=torch.float64)
    (autograd,) = torch.autograd.grad((pairs.prior_cov(K) * G).sum(), K)
    assert torch.allclose(pairs.pullback(G, C, n), autograd)


def test_ml_gradient_in_closed_form_equals_autograd_through_the_cholesky():
    y, C, n = torch.tensor([0, 2, 1, 2, 0, 1]), 3, 6
    pairs = Pairs(y, C)
    g = torch.Generator().manual_seed(1)
    X = torch.randn(n, 4, generator=g, dtype=torch.float64)
    scale = torch.tensor([0.7, 1.3, 1.0], dtype=torch.float64, requires_grad=True)
    w = torch.rand(3, len(pairs.point), generator=g, dtype=torch.float64) + 0.05
    method = OVE(IdentityBackbone(1), way=C, kernel=RBFKernel(1))
    ep = line_episode()

    def K_of(scale):
        return scale[:, None, None] * (X @ X.T + 0.1 * torch.eye(n, dtype=torch.float64))

    ours = method.mean_log_marginal(K_of(scale), pairs, w, ep)
    (grad,) = torch.autograd.grad(ours, scale)
    kappa = torch.full_like(w, 0.5)
    reference = augmented_log_marginal(SitePosterior(pairs.prior_cov(K_of(scale)), w, kappa), 1.0,
                                       kappa).mean()
    (expected,) = torch.autograd.grad(reference, scale)
    assert float(ours.detach()) == pytest.approx(float(reference.detach()), rel=1e-12)
    assert torch.allclose(grad, expected, rtol=1e-8)


@pytest.mark.parametrize("loss", ["ml", "pl"])
def test_losses_train_the_kernel_and_predict_sums_to_one(loss):
    ep = line_episode()
    method = OVE(IdentityBackbone(1), way=2, kernel=RBFKernel(1), loss=loss, chains=8)
    value = method.meta_loss(ep)
    value.backward()
    assert torch.isfinite(value) and method.kernel.raw_lengthscale.grad is not None
    method.eval()
    with torch.no_grad():
        pred = method.predict(ep)
    assert torch.allclose(pred.probs.sum(-1), torch.ones(1))
    assert len(pred.extras["inner_objective"]) == 50


def test_unknown_loss_or_sampler_is_an_error():
    with pytest.raises(ValueError, match="loss='elbo' is not allowed; it must be one of 'ml', 'pl'"):
        OVE(IdentityBackbone(1), way=2, kernel=RBFKernel(1), loss="elbo")
    with pytest.raises(ValueError, match="sampler='hmc' is not allowed"):
        OVE(IdentityBackbone(1), way=2, kernel=RBFKernel(1), sampler="hmc")


def test_conformance():
    check_method("ove", settings=((2, 1), (5, 5)))


@pytest.mark.slow
def test_conformance_20_way():
    """M = N (C - 1) = 2660 pairwise differences in training: the ML loss's one ``M x M``
    factorisation per chain dominates (the Gibbs steps are class-blocked, ``N x N``)."""
    check_method("ove", settings=((20, 5),), chains=2, test_steps=2)


@pytest.mark.parametrize(("loss", "sampler"), [("ml", "blocked"), ("pl", "blocked"),
                                               ("ml", "joint")])
def test_feature_route_equals_dense_route(monkeypatch, loss, sampler):
    """The Gibbs sweeps and the pair-space algebra (predictive, ML objective, joint sampler) on
    the feature route; the chains start from the same prior draws (the route's own draws,
    ``Phi w``, are exact too but use the generator differently)."""
    monkeypatch.setattr(zoo_ove, "prior_draws", lambda K, n, g: prior_draws(dense(K), n, g))
    check_algebra_routes(OVE, "query_probs", loss=loss, test_steps=3, chains=2,
                         pg_sampler="torch", sampler=sampler)


def _factors(scale: float, shared: bool):
    g = torch.Generator().manual_seed(5)
    C, n, Q, D = 3, 7, 4, 2
    phi = torch.randn(n + Q, D, generator=g, dtype=torch.float64) * scale
    phi[1] = phi[0]  # duplicated point: K singular beyond rank D as well
    phi = phi if shared else phi * torch.tensor([1.0, 1.7, 0.6], dtype=torch.float64)[:, None, None]
    phi = phi.requires_grad_()
    y = torch.tensor([0, 2, 1, 2, 0, 1, 1])
    return phi, y, C, n


@pytest.mark.parametrize("shared", [True, False])
def test_pair_factor_reproduces_the_difference_covariances(shared):
    phi, y, C, n = _factors(1.0, shared)
    pairs = Pairs(y, C)
    full = phi.expand(C, *phi.shape[-2:])
    K = full @ full.mT
    Psi = pairs.factor(phi[..., :n, :], C)
    assert torch.allclose(Psi @ Psi.T, pairs.prior_cov(K[:, :n, :n]), atol=1e-12)
    R = pairs.query_factor(phi[..., n:, :], C)
    cross = pairs.cross_cov(K[:, :n, n:])
    assert torch.allclose(Psi @ R.T, cross.permute(1, 2, 0).reshape(len(pairs.point), -1),
                          atol=1e-12)


@pytest.mark.parametrize(("scale", "chunk"), [(1.0, None), (1e-3, None), (1.0, 1)])
def test_pair_space_feature_route_equals_the_dense_route(monkeypatch, scale, chunk):
    """Class scores (joint predictive per query) and the ML objective with its gradient, in the
    class weights (a factor shared by the classes: ``ClassWeights``, assembled without pairs) and
    through Woodbury on ``Psi`` (one factor per class, here equal copies), against the dense
    ``M x M`` algebra and the closed-form gradient, to 1e-8 in float64 on a singular kernel
    (rank 2 < 7 points, a duplicated point, a tiny scale); ``chunk``: the weight route one
    chain at a time, checkpointed. The weights invert ``A`` by Cholesky (``weights``) or through
    its arrow structure (``arrow``: Woodbury on the block-diagonal part), and the predictive
    takes the blocks of ``A^-1`` or the arrow's pieces without it (``direct``); forced here."""
    if chunk:
        monkeypatch.setattr(zoo_ove.weights, "CHAIN_ELEMENTS", chunk)
    results = {}
    for route in ("dense", "pairs", "weights", "arrow", "direct"):
        monkeypatch.setattr(zoo_ove.weights, "arrow_pays", lambda *_, r=route: r != "weights")
        monkeypatch.setattr(zoo_ove.weights, "arrow_predictive_pays",
                            lambda *_, r=route: r == "direct")
        phi, y, C, n = _factors(scale, shared=True)
        pairs = Pairs(y, C)
        g = torch.Generator().manual_seed(6)
        w = torch.rand(3, len(pairs.point), generator=g, dtype=torch.float64) + 0.05
        method = OVE(IdentityBackbone(2), way=C, kernel=RBFKernel(2),
                     algebra="dense" if route == "dense" else "features")
        left, right = phi[:n], phi[n:]
        if route == "pairs":  # one (equal) factor per class: no shared outer products
            left, right = (t.expand(C, *t.shape).clone() for t in (left, right))
        gram = FeatureGram.of(left).expand(C)
        Kss = dense(gram) if route == "dense" else gram
        Ksq = FeatureGram(left, right).expand(C)
        Ksq = dense(Ksq) if route == "dense" else Ksq
        kqq = phi[n:].pow(2).sum(-1).expand(C, -1)
        K_psi = method.pair_gram(Kss, pairs)
        kind = {"dense": torch.Tensor, "pairs": FeatureGram}.get(route, ClassWeights)
        assert isinstance(K_psi, kind)
        post = method.posterior(K_psi, w, torch.full_like(w, 0.5), line_episode())
        scores = method.class_log_scores(post, pairs, Ksq, kqq)
        ml = method.mean_log_marginal(Kss, pairs, w, line_episode())
        (grad,) = torch.autograd.grad(scores.sum() + ml, phi)
        results[route] = scores.detach(), ml.detach(), grad
    for route in ("pairs", "weights", "arrow", "direct"):
        for a, b in zip(results[route], results["dense"], strict=True):
            assert torch.allclose(a, b, atol=1e-8 * b.abs().max().clamp_min(1))


def test_weight_posterior_moments_equal_the_pair_space_posterior():
    """The weight-space posterior pushed to the pairs, ``Psi mu`` and ``Psi A^-1 Psi^T``,
    equals the dense pair-space ``SitePosterior``'s mean and covariance to 1e-8 (float64,
    5 classes, points in random label order, 2 chains), and ``log p(y | w)`` its augmented
    marginal."""
    g = torch.Generator().manual_seed(11)
    C, n, D = 5, 13, 3
    phi = torch.randn(n, D, generator=g, dtype=torch.float64)
    y = torch.randperm(n, generator=g) % C
    pairs = Pairs(y, C)
    w = torch.rand(2, len(pairs.point), generator=g, dtype=torch.float64) + 0.01
    kappa = torch.full_like(w, 0.5)
    dense_post = SitePosterior(pairs.prior_cov((phi @ phi.T).expand(C, n, n)), w, kappa)
    method = OVE(IdentityBackbone(D), way=C, kernel=RBFKernel(D), algebra="features")
    prior = method.pair_gram(FeatureGram.of(phi).expand(C), pairs)
    post = method.posterior(prior, w, kappa, line_episode())
    inverse, mu, _ = post.moments(post.w)
    Psi = pairs.factor(phi, C)
    cov = Psi @ inverse @ Psi.T
    assert torch.allclose(mu @ Psi.T, dense_post.mean, atol=1e-8)
    assert torch.allclose(cov, dense_post.cov, atol=1e-8)
    assert torch.allclose(post.mean_log_marginal(),
                          augmented_log_marginal(dense_post, 1.0, kappa).mean(), atol=1e-8)


@pytest.mark.parametrize(("C", "n", "D", "scale"), [(5, 13, 3, 1.0), (4, 4, 16, 1.0),
                                                    (6, 6, 10, 30.0), (3, 9, 2, 1e-4)])
def test_arrow_inverse_and_log_determinant_equal_the_dense_ones(monkeypatch, C, n, D, scale):
    """``A^-1``, ``mu`` and ``log|A|`` through the arrow structure (Woodbury on the block-diagonal
    part with the indefinite capacitance) equal ``torch.linalg.inv`` / ``slogdet`` of the
    assembled ``A`` and the Cholesky route to 1e-10 relative, in float64: points in random label
    order, a duplicated point, pair weights from 1e-6 to 10, feature scales from 1e-4 to 30 (``A``
    from nearly ``I`` to condition ~1e6); and the rule picks the arrow only with few points."""
    from zoo_ove.weights import WeightPosterior, arrow_pays

    from zoo.inference import JitterPolicy, packed_outer

    g = torch.Generator().manual_seed(C * 100 + n)
    phi = torch.randn(n, D, generator=g, dtype=torch.float64) * scale
    phi[1] = phi[0]
    y = torch.randperm(n, generator=g) % C
    w = 10 ** (torch.rand(3, n, C, generator=g, dtype=torch.float64) * 7 - 6)
    w = w * (1 - torch.nn.functional.one_hot(y, C).double())  # no pair with the own label
    prior = ClassWeights(phi, packed_outer(phi), y, C)
    post = WeightPosterior(prior, w, JitterPolicy())
    A = prior.precision(w)
    assert torch.linalg.cond(A).max() > (1e5 if scale > 1 else 1)
    inverse, logdet = post._arrow_moments(w)
    scale_of = torch.linalg.inv(A).abs().max()
    assert torch.allclose(inverse, torch.linalg.inv(A), atol=1e-10 * scale_of, rtol=0)
    assert torch.allclose(logdet, torch.linalg.slogdet(A).logabsdet, atol=1e-10, rtol=1e-12)
    chol = torch.linalg.cholesky(A)
    mu = torch.cholesky_solve(prior.natural_mean().expand(3, -1)[..., None], chol)[..., 0]
    _, mu_post, logdet_post = post.moments(w)
    assert torch.allclose(mu_post, mu, atol=1e-10 * mu.abs().max(), rtol=0)
    assert torch.allclose(logdet_post, logdet, atol=1e-10, rtol=1e-12)
    assert arrow_pays(1 * 50, 50, 64) and arrow_pays(5 * 20, 20, 64)
    assert not arrow_pays(20 * 50, 50, 64) and not arrow_pays(13, 5, 3)
    # the predictive without A^-1: the same moments as through the blocks of A^-1
    phi_q = torch.randn(4, D, generator=g, dtype=torch.float64) * scale
    kqq = phi_q.pow(2).sum(-1).expand(C, -1)
    monkeypatch.setattr(zoo_ove.weights, "arrow_predictive_pays", lambda *_: False)
    mean, cov = post.predictive(phi_q, kqq)  # through the blocks of A^-1
    mean_d, cov_d = post._arrow_predictive(w, phi_q)
    assert torch.allclose(mean_d, mean, atol=1e-10 * mean.abs().max(), rtol=0)
    assert torch.allclose(cov_d, cov, atol=1e-10 * cov.abs().max(), rtol=0)


def test_lu_factor_of_a_batch_is_right_on_two_threads():
    """The capacitance's LU, a batch of 280 x 280 matrices (20-way 5-shot's ``2 N``) on two
    threads: torch's batched CPU call gives wrong pivots there (pytorch/pytorch#142815); the
    batch factorised one matrix at a time solves it."""
    from zoo_ove.weights import lu_factor

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        g = torch.Generator().manual_seed(0)
        K = torch.randn(3, 280, 280, generator=g, dtype=torch.float64)
        K = K + K.mT
        b = torch.randn(3, 280, 2, generator=g, dtype=torch.float64)
        LU, pivots = lu_factor(K)
        assert (pivots >= 1).all()
        x = torch.linalg.lu_solve(LU, pivots, b)
        assert torch.allclose(K @ x, b, atol=1e-9)
    finally:
        torch.set_num_threads(threads)


def test_predictive_quadrature_equals_monte_carlo_on_the_joint_predictive():
    """Class scores ``sum_{c' != c} E[log sigmoid(f_c - f_c')]`` by the method's Gauss-Hermite
    rule on each pairwise difference, against Monte Carlo on the joint Gaussian predictive of
    the query's class functions computed independently (dense algebra of psi = A f)."""
    y, C, n, Q = torch.tensor([0, 2, 1, 2, 0, 1]), 3, 6, 2
    pairs = Pairs(y, C)
    g = torch.Generator().manual_seed(3)
    X = torch.randn(n + Q, 2, generator=g, dtype=torch.float64)
    full = torch.exp(-0.5 * torch.cdist(X, X).pow(2)) + 1e-6 * torch.eye(n + Q, dtype=torch.float64)
    scales = torch.tensor([1.0, 1.5, 0.7], dtype=torch.float64)
    Kall = scales[:, None, None] * full  # [C, n + Q, n + Q]
    Kss, Ksq, kqq = Kall[:, :n, :n], Kall[:, :n, n:], torch.diagonal(Kall[:, n:, n:], dim1=-2,
                                                                    dim2=-1)
    w = torch.rand(1, len(pairs.point), generator=g, dtype=torch.float64) + 0.2
    kappa = torch.full_like(w, 0.5)
    method = OVE(IdentityBackbone(1), way=C, kernel=RBFKernel(1))
    post = SitePosterior(pairs.prior_cov(Kss), w, kappa)
    ours = method.class_log_scores(post, pairs, Ksq, kqq)[0]  # [Q, C]

    # independent: psi | w ~ N(S kappa, S), S = (K_psi^-1 + W)^-1; f_q | psi by conditioning
    Kpsi = pairs.prior_cov(Kss).numpy()
    S = np.linalg.inv(np.linalg.inv(Kpsi) + np.diag(w[0].numpy()))
    m = S @ kappa[0].numpy()
    cross = pairs.cross_cov(Ksq).permute(1, 2, 0).reshape(len(pairs.point), Q * C).numpy()
    prior_q = np.kron(np.eye(Q), np.zeros((C, C)))
    for q in range(Q):
        for c in range(C):
            prior_q[q * C + c, q * C + c] = float(kqq[c, q])
    A = np.linalg.solve(Kpsi, cross)
    mean = A.T @ m
    cov = prior_q - cross.T @ A + A.T @ S @ A
    rng = np.random.default_rng(0)
    f = rng.multivariate_normal(mean, cov, size=400_000).reshape(-1, Q, C)
    diff = f[..., :, None] - f[..., None, :]
    logsig = -np.logaddexp(0, -diff)
    logsig[..., np.arange(C), np.arange(C)] = 0
    mc = logsig.sum(-1).mean(0)
    assert np.allclose(ours.numpy(), mc, atol=5e-3), (ours, mc)


@pytest.mark.parametrize("route", ["dense", "features"])
def test_sweep_draws_from_each_class_conditional(route):
    """The sweep factorises every class's conditional precision at once and draws with the
    current natural means (``SitePosterior.draw``): the same draw as the class conditional's
    own Matheron sample from the same prior draw and noise, to 1e-8 in float64, with a
    singular kernel (rank 3 < 9 points) on either route."""
    g = torch.Generator().manual_seed(2)
    C, n, D, R = 4, 9, 3, 2
    phi = torch.randn(n, D, generator=g, dtype=torch.float64)
    y = torch.randperm(n, generator=g) % C
    pairs = Pairs(y, C)
    gram = FeatureGram.of(phi).expand(C)
    K = gram if route == "features" else dense(gram)
    w = pairs.dense(torch.rand(R, len(pairs.point), generator=g, dtype=torch.float64), C, n)
    f = torch.randn(R, C, n, generator=g, dtype=torch.float64)
    prior = prior_draws(dense(gram), R, g)
    noise = torch.randn(R, C, n, generator=g, dtype=torch.float64)
    method = OVE(IdentityBackbone(D), way=C, kernel=RBFKernel(D))
    swept = method._sweep(K, f, w, y, prior, noise, line_episode())
    expected = f.clone()
    for c in range(C):
        post = class_conditional(method, dense(gram), expected, w, y, c, line_episode())
        expected[:, c] = post.sample(prior[:, c], noise[:, c])
    assert torch.allclose(swept, expected, atol=1e-8)


def test_predictive_quadrature_in_blocks_of_queries_changes_no_number(monkeypatch):
    """The predictive's quadrature is formed a few queries at a time (50-way episodes need tens
    of GB at once); the blocks give the unblocked scores exactly, with and without gradients, and
    checkpointed (training) the same meta-gradient."""
    g = torch.Generator().manual_seed(0)
    ep = Episode(torch.randn(6, 1, generator=g), torch.tensor([0, 1, 2, 0, 1, 2]),
                 torch.randn(5, 1, generator=g), torch.tensor([0, 1, 2, 0, 1]), way=3, shot=2,
                 info={"seed": 5})
    method = OVE(IdentityBackbone(1), way=3, kernel=RBFKernel(1), chains=4)
    method.eval()
    with torch.no_grad():
        whole = method.predict(ep).probs
    loss_whole = OVE(IdentityBackbone(1), way=3, kernel=RBFKernel(1), loss="pl", chains=4)
    value = loss_whole.meta_loss(ep)
    grads = torch.autograd.grad(value, list(loss_whole.parameters()))
    monkeypatch.setattr(zoo_ove, "QUADRATURE_ELEMENTS", 1)  # one query per block
    with torch.no_grad():
        blocked = method.predict(ep).probs
    assert torch.equal(whole, blocked)
    value_blocked = loss_whole.meta_loss(ep)  # blocks checkpointed: the same gradient
    assert torch.equal(value, value_blocked)
    for a, b in zip(grads, torch.autograd.grad(value_blocked, list(loss_whole.parameters())),
                    strict=True):
        assert torch.allclose(a, b, rtol=1e-12, atol=0)


def test_blocked_quadrature_harvests_each_integral_once(monkeypatch):
    """A harvesting ``meta-cv`` estimator has state: its blocks are not checkpointed, so the
    backward pass neither harvests the integrals again nor steps the meta-CV twice."""
    g = torch.Generator().manual_seed(0)
    ep = Episode(torch.randn(6, 1, generator=g), torch.tensor([0, 1, 2, 0, 1, 2]),
                 torch.randn(5, 1, generator=g), torch.tensor([0, 1, 2, 0, 1]), way=3, shot=2,
                 info={"seed": 5})

    def harvested(elements: int) -> int:
        monkeypatch.setattr(zoo_ove, "QUADRATURE_ELEMENTS", elements)
        torch.manual_seed(0)
        method = OVE(IdentityBackbone(1), way=3, kernel=RBFKernel(1), loss="pl", chains=4,
                     estimator="meta-cv[samples=8,width=4,meta_batch=2]")
        method.meta_loss(ep).backward()
        return method.estimator_state.harvested

    whole = harvested(2**24)
    assert whole > 0 and harvested(1) == whole  # one query per block


def _random_episode(way: int, shot: int, query: int, dim: int, seed: int) -> Episode:
    g = torch.Generator().manual_seed(seed)
    return Episode(torch.randn(way * shot, dim, generator=g, dtype=torch.float64),
                   torch.arange(way).repeat_interleave(shot),
                   torch.randn(way * query, dim, generator=g, dtype=torch.float64),
                   torch.arange(way).repeat_interleave(query), way=way, shot=shot,
                   info={"seed": seed})


@pytest.mark.parametrize(("kernel", "algebra", "loss"), [
    ("rbf", "dense", "ml"), ("rbf", "dense", "pl"), ("cosine", "features", "ml"),
    ("cosine", "features", "pl"), ("cosine", "auto", "pl")])
def test_chains_in_blocks_equal_one_batch(monkeypatch, kernel, algebra, loss):
    """Conditioning on the chains' last ``w`` a few chains at a time (:data:`PAIR_ELEMENTS`: the
    pair space's ``M x M`` factors and ``M x Q C`` whitened cross-covariances, or the class
    weights' query blocks, per block of chains) gives one batch's predictive probabilities,
    meta-loss and meta-gradients to 1e-8 in float64 on random episodes (6-way 2-shot, 4
    features: a singular cosine kernel); here one chain per block."""
    from zoo.kernels import BUILTIN

    episode = _random_episode(6, 2, 2, 4, seed=7)
    results = []
    for elements in (zoo_ove.PAIR_ELEMENTS, 1):
        monkeypatch.setattr(zoo_ove, "PAIR_ELEMENTS", elements)
        torch.manual_seed(0)
        method = OVE(IdentityBackbone(4, learnable=True), way=6, kernel=BUILTIN[kernel](4),
                     algebra=algebra, loss=loss, chains=5, test_steps=3, train_steps=2).double()
        method.eval()
        with torch.no_grad():
            probs = method.predict(episode).probs
        method.train()
        value = method.meta_loss(episode)
        value.backward()
        results.append((probs.double(), value.detach(),
                        torch.cat([p.grad.flatten() for p in method.parameters()
                                   if p.grad is not None])))
    for a, b in zip(*results, strict=True):
        assert torch.allclose(a, b, rtol=0, atol=1e-8 * b.abs().max().clamp_min(1))


def test_class_scores_once_per_pair_equal_the_ordered_pairs():
    """The scores from each unordered pair's expectation (the reverse pair by ``log sigmoid(-d) =
    log sigmoid(d) - d``) equal Gauss-Hermite on every ordered pair ``sum_{c' != c}
    E[log sigmoid(f_c - f_c')]``, to 1e-12 in float64 (4 classes, 3 queries, 2 chains, a
    random joint predictive per query)."""
    g = torch.Generator().manual_seed(4)
    C, Q, R, D = 4, 3, 2, 3
    phi = torch.randn(5, D, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 3, 1])
    pairs = Pairs(y, C)
    w = torch.rand(R, len(pairs.point), generator=g, dtype=torch.float64) + 0.1
    phi_q = torch.randn(Q, D, generator=g, dtype=torch.float64)
    method = OVE(IdentityBackbone(D), way=C, kernel=RBFKernel(D), algebra="features")
    prior = method.pair_gram(FeatureGram.of(phi).expand(C), pairs)
    post = method.posterior(prior, w, torch.full_like(w, 0.5), line_episode())
    kqq = phi_q.pow(2).sum(-1).expand(C, -1)
    ours = method.class_log_scores(post, pairs, FeatureGram(phi, phi_q).expand(C), kqq)
    mean, cov = post.predictive(phi_q, kqq)
    var = torch.diagonal(cov, dim1=-2, dim2=-1)
    d_mean = mean[..., :, None] - mean[..., None, :]
    d_var = var[..., :, None] + var[..., None, :] - 2 * cov
    t, wt = np.polynomial.hermite_e.hermegauss(method.hparams["quadrature"])
    t, wt = torch.from_numpy(t), torch.from_numpy(wt / wt.sum())
    f = d_mean[..., None] + d_var.clamp_min(0).sqrt()[..., None] * t
    expected = (torch.nn.functional.logsigmoid(f) * wt).sum(-1)
    expected = expected.masked_fill(torch.eye(C, dtype=torch.bool), 0).sum(-1)
    assert torch.allclose(ours, expected, rtol=0, atol=1e-12)


def test_pair_space_route_by_the_predictive_cost():
    """The class weights are taken where they are cheaper for the predictive although the pair
    space is smaller than the weights (50-way 1-shot, 15 queries per class: ``M = 2,450`` pairs
    whitening 37,500 class functions against ``C D = 3,200`` weights), and not at the quick
    suite's sizes (5-way, 1 and 5 shots, 15 queries per class), whose numbers stay those of
    the dense pair space. A cosine kernel on 64 features then takes the feature route for the
    support even with fewer points than features. Through the arrow structure of ``A`` (2 N =
    100 or 40 against C D = 3,200 or 1,280) the weights also pay for 50-way 1-shot's ML count
    (no queries) and for 20-way 1-shot's predictive (380 pairs)."""
    assert OVE.weights_pay(2450, 50, 64, 750 * 50)
    assert OVE.weights_pay(2450, 50, 64)  # no queries: the ML objective's count
    assert OVE.weights_pay(380, 20, 64, 300 * 20)
    assert not OVE.weights_pay(5 * 4, 5, 64, 75 * 5)
    assert not OVE.weights_pay(25 * 4, 5, 64, 75 * 5)
    from zoo.kernels import CosineKernel
    method = OVE(IdentityBackbone(64), way=50, kernel=CosineKernel(64))
    assert method.route(50, 64, _random_episode(50, 1, 15, 1, seed=0)) == "features"
    assert method.route(5, 64, _random_episode(5, 1, 15, 1, seed=0)) == "dense"


# -- predictive = samples: the query functions given the chains' Gibbs states of f -------------


def _per_class_prior(C: int, n: int, Q: int, seed: int, scales=(1.0, 2.5, 0.6)):
    """Per-class RBF priors with different output scales (a predictive that used another class's
    ``K`` would be wrong) on 1-D points: ``Kss`` ``[C, n, n]``, ``Ksq`` ``[C, n, Q]``, ``kqq``
    ``[C, Q]`` and the whole ``[C, n + Q, n + Q]``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.linspace(-1.5, 1.5, n + Q, dtype=torch.float64)[torch.randperm(n + Q, generator=g)]
    base = torch.exp(-0.5 * (x[:, None] - x[None, :]).pow(2) / 0.8**2)
    full = torch.tensor(scales[:C], dtype=torch.float64)[:, None, None] * base
    return full[:, :n, :n], full[:, :n, n:], torch.diagonal(full[:, n:, n:], dim1=-2, dim2=-1), full


def test_state_predictive_is_the_dense_gaussian_conditional():
    """``f_*c | f_c`` (``state_predictive``) against conditioning the dense joint Gaussian of
    every class's support and query functions (block-diagonal over classes) on all of ``f``:
    per-class output scales (a wrong class's ``K`` fails), dense RBF route; and on the feature
    route with one factor per class and more points than features (a singular ``K_c``: the
    reference uses the pseudo-inverse). The observation's ``sigma^2`` (the policy's 1e-8
    relative jitter) moves the mean by about ``sigma^2 / lambda_min(K_c)`` relative, 4e-6 for
    the RBF priors here: tolerance 2e-5."""
    C, n, Q, S = 3, 5, 4, 2
    method = OVE(IdentityBackbone(1), way=C, kernel=RBFKernel(1), predictive="samples")
    ep = line_episode()
    g = torch.Generator().manual_seed(8)

    def reference(full: Tensor, f: Tensor) -> tuple[Tensor, Tensor]:
        joint = torch.block_diag(*full).numpy()  # [C (n + Q)] ordered class by class
        sup = np.concatenate([np.arange(c * (n + Q), c * (n + Q) + n) for c in range(C)])
        qry = np.concatenate([np.arange(c * (n + Q) + n, (c + 1) * (n + Q)) for c in range(C)])
        gain = joint[np.ix_(qry, sup)] @ np.linalg.pinv(joint[np.ix_(sup, sup)], hermitian=True,
                                                        rcond=1e-10)
        mean = f.reshape(S, -1).numpy() @ gain.T  # [S, C Q]
        cov = joint[np.ix_(qry, qry)] - gain @ joint[np.ix_(sup, qry)]
        return (torch.from_numpy(mean).reshape(S, C, Q).transpose(-1, -2),
                torch.from_numpy(np.diag(cov).copy()).reshape(C, Q).T.expand(S, Q, C))

    Kss, Ksq, kqq, full = _per_class_prior(C, n, Q, seed=1)
    f = prior_draws(Kss, S, g)  # [S, C, n], in the range of each K_c
    mean, var = method.state_predictive(Kss, f, Ksq, kqq, ep)
    ref_mean, ref_var = reference(full, f)
    assert torch.allclose(mean, ref_mean, atol=2e-5) and torch.allclose(var, ref_var, atol=2e-5)

    D = 2  # one factor per class, rank 2 < 5 support points
    phi = torch.randn(C, n + Q, D, generator=g, dtype=torch.float64)
    full = phi @ phi.mT
    f = prior_draws(full[:, :n, :n], S, g)
    mean, var = method.state_predictive(FeatureGram.of(phi[:, :n]), f,
                                        FeatureGram(phi[:, :n], phi[:, n:]),
                                        torch.diagonal(full[:, n:, n:], dim1=-2, dim2=-1), ep)
    ref_mean, ref_var = reference(full, f)
    assert torch.allclose(mean, ref_mean, atol=2e-5) and torch.allclose(var, ref_var, atol=2e-5)


def test_samples_and_conditional_estimate_the_same_query_posterior():
    """Both predictives are Rao-Blackwellised estimators of ``p(f_* | y)``: over 3,000 chains
    (3 classes with per-class output scales, 4 support points, 3 queries, 30 Gibbs steps), the
    chains' mean of each query function's predictive mean and second moment (``m^2 + v``) given
    the last ``w`` (joint pair-space algebra) and given the last ``f`` (per-class conditional)
    agree within 4.5 standard errors of their paired per-chain differences. The same test
    rejects the variance without its explained term (``k_**`` alone) and the mean from another
    class's ``K``: both formulas are tested, not only the sampler."""
    C, n, Q, R = 3, 4, 3, 3000
    Kss, Ksq, kqq, _ = _per_class_prior(C, n, Q, seed=2)
    y = torch.tensor([0, 1, 2, 1])
    ep = Episode(torch.zeros(n, 1), y, torch.zeros(Q, 1), torch.zeros(Q, dtype=torch.long), way=C,
                 shot=1, info={"seed": 0})
    method = OVE(IdentityBackbone(1), way=C, kernel=RBFKernel(1), chains=R, predictive="samples")
    pairs = Pairs(y, C)
    w, _, _, f = method.gibbs(Kss, y, 30, ep, torch.Generator().manual_seed(3), keep=1)
    post = method.posterior(method.pair_gram(Kss, pairs), w, torch.full_like(w, 0.5), ep)
    m_w, cov_w = method.joint_predictive(post, pairs, Ksq, kqq)
    v_w = torch.diagonal(cov_w, dim1=-2, dim2=-1)

    def disagreement(m_f: Tensor, v_f: Tensor) -> float:
        """The largest paired difference of the moments, in standard errors."""
        worst = 0.0
        for a, b in ((m_w, m_f), (m_w**2 + v_w, m_f**2 + v_f)):
            d = a - b  # [R, Q, C], independent over chains
            z = d.mean(0).abs() / (d.std(0) / math.sqrt(R))
            worst = max(worst, float(z.max()))
        return worst

    m_f, v_f = method.state_predictive(Kss, f, Ksq, kqq, ep)
    assert disagreement(m_f, v_f) < 4.5
    assert disagreement(m_f, kqq.T.expand_as(v_f)) > 4.5  # k_** without - K_*c K_c^-1 K_c*
    shifted = torch.roll(torch.arange(C), 1)
    m_wrong, v_wrong = method.state_predictive(Kss[shifted], f, Ksq[shifted], kqq[shifted], ep)
    assert disagreement(m_wrong, v_wrong) > 4.5


def test_samples_keep_the_last_states_and_predict_probabilities():
    """``keep`` states of each chain, state-major, the last one the chains' final ``f`` (its
    pairwise differences are the returned ``psi``); with ``steps < keep`` the prior draw is
    among them; the predictive's probabilities sum to one."""
    ep = _random_episode(3, 2, 2, 2, seed=4)
    method = OVE(IdentityBackbone(2), way=3, kernel=RBFKernel(2), chains=4,
                 predictive="samples", keep=3, test_steps=5)
    K = method.kernel_matrices(ep).Kss
    _, psi, _, f = method.gibbs(K, ep.support_y, 5, ep, torch.Generator().manual_seed(0), keep=3)
    assert f.shape == (3 * 4, 3, 6)
    assert torch.allclose(Pairs(ep.support_y, 3).apply(f[-4:]), psi)
    _, _, _, f = method.gibbs(K, ep.support_y, 1, ep, torch.Generator().manual_seed(0), keep=3)
    assert f.shape == (2 * 4, 3, 6)
    method.eval()
    with torch.no_grad():
        probs = method.predict(ep).probs
    assert probs.shape == (6, 3)
    assert torch.allclose(probs.double().sum(-1), torch.ones(6, dtype=torch.float64), atol=1e-6)


def test_samples_pl_meta_gradient_equals_an_independent_implementation():
    """``loss = pl`` with ``predictive = samples``: value and meta-gradient (backbone scale,
    lengthscale, output scale) against plain dense algebra on the same Gibbs states (per class
    ``(K_c + sigma^2 I)^-1`` by ``torch.linalg.solve``, Gauss-Hermite on every ordered pair by
    numpy's nodes, softmax, mean over states), in float64 to 1e-6 of the value and of the
    largest gradient: the site form ``alpha = nu - S B^-1 S K nu`` with site precisions ``1 /
    sigma^2`` rounds to about ``eps lambda_max / sigma^2`` (1e-16 x 1e8 x n) relative (the
    differences shrink in proportion to ``sigma^2`` when it is raised). With ``f`` held fixed the
    mean ``K_*c K_c^-1 f_c`` does not depend on the output scale, so its gradient, from the
    variances alone, is small."""
    ep = _random_episode(3, 2, 2, 2, seed=6)
    method = OVE(IdentityBackbone(2, learnable=True), way=3, kernel=RBFKernel(2), chains=3,
                 loss="pl", predictive="samples", keep=2, train_steps=3).double()
    value = method.meta_loss(ep)
    ours = torch.autograd.grad(value, list(method.parameters()))

    mats = method.kernel_matrices(ep)
    from zoo import episode_generator
    *_, f = method.gibbs(mats.Kss, ep.support_y, 3, ep, episode_generator(ep), keep=2)
    Kss, Ksq, kqq = dense(mats.Kss), dense(mats.Ksq), mats.kqq
    C, n = Kss.shape[:2]
    sigma2 = 1e-8 * torch.diagonal(Kss, dim1=-2, dim2=-1).detach().mean()
    A = Kss + sigma2 * torch.eye(n, dtype=torch.float64)
    mean = torch.stack([Ksq[c].T @ torch.linalg.solve(A[c], f[:, c].T) for c in range(C)])
    var = torch.stack([kqq[c] - (Ksq[c] * torch.linalg.solve(A[c], Ksq[c])).sum(0)
                       for c in range(C)])  # [C, Q]
    mean = mean.permute(2, 1, 0)  # [S, Q, C]
    t, wt = np.polynomial.hermite_e.hermegauss(method.hparams["quadrature"])
    t, wt = torch.from_numpy(t), torch.from_numpy(wt / wt.sum())
    d_mean = mean[..., :, None] - mean[..., None, :]
    d_sd = (var.T[:, :, None] + var.T[:, None, :]).sqrt()
    logsig = (torch.nn.functional.logsigmoid(d_mean[..., None] + d_sd[..., None] * t) * wt).sum(-1)
    scores = logsig.masked_fill(torch.eye(C, dtype=torch.bool), 0).sum(-1)
    probs = torch.softmax(scores, -1).mean(0)
    expected = -probs.gather(1, ep.query_y[:, None]).log().mean()
    theirs = torch.autograd.grad(expected, list(method.parameters()))
    assert float(value.detach()) == pytest.approx(float(expected.detach()), rel=1e-6)
    for a, b in zip(ours, theirs, strict=True):
        assert torch.allclose(a, b, rtol=0, atol=1e-6 * max(t.abs().max() for t in theirs))


def test_bad_predictive_settings_are_errors():
    from zoo import HyperParameterError

    with pytest.raises(HyperParameterError, match="predictive='mean' is not allowed; it must be "
                       "one of 'conditional', 'samples'"):
        OVE(IdentityBackbone(1), way=2, kernel=RBFKernel(1), predictive="mean")
    with pytest.raises(HyperParameterError, match="predictive='samples' conditions on the Gibbs "
                       "states of the support functions f, which sampler='joint' does not draw"):
        OVE(IdentityBackbone(1), way=2, kernel=RBFKernel(1), predictive="samples", sampler="joint")
    with pytest.raises(HyperParameterError, match="keep=3 averages Gibbs states of f, which only "
                       "predictive='samples' uses"):
        OVE(IdentityBackbone(1), way=2, kernel=RBFKernel(1), keep=3)
    with pytest.raises(HyperParameterError, match="keep=0 is not allowed"):
        OVE(IdentityBackbone(1), way=2, kernel=RBFKernel(1), predictive="samples", keep=0)


def test_conformance_samples():
    check_method("ove", settings=((2, 1), (5, 5)), predictive="samples", keep=2)


def test_conditional_scores_are_the_average_of_the_state_scores_given_w():
    """Tower property: ``f_*`` depends on ``w`` only through ``f``, so ``conditional``'s class
    scores given ``w`` (joint pair-space algebra) are the average over ``f ~ p(f | w)`` of
    ``samples``' class scores given ``f`` (``state_predictive``, ``pair_scores``). 20,000 exact
    draws of ``f | w`` (precision ``K^-1 + A^T W A``, natural mean ``A^T kappa``, dense, 3
    classes with per-class output scales) agree within 4.5 standard errors of their spread; the
    state variance without its explained term does not."""
    C, n, Q, S = 3, 4, 3, 20_000
    Kss, Ksq, kqq, _ = _per_class_prior(C, n, Q, seed=5)
    y = torch.tensor([0, 1, 2, 1])
    pairs = Pairs(y, C)
    M = len(pairs.point)
    g = torch.Generator().manual_seed(9)
    w = torch.rand(1, M, generator=g, dtype=torch.float64) + 0.2
    method = OVE(IdentityBackbone(1), way=C, kernel=RBFKernel(1), predictive="samples")
    ep = line_episode()
    post = method.posterior(method.pair_gram(Kss, pairs), w, torch.full_like(w, 0.5), ep)
    expected = method.class_log_scores(post, pairs, Ksq, kqq)[0]  # [Q, C]

    A = torch.zeros(M, C * n, dtype=torch.float64)
    A[torch.arange(M), pairs.label * n + pairs.point] = 1
    A[torch.arange(M), pairs.other * n + pairs.point] = -1
    P = torch.linalg.inv(torch.block_diag(*Kss)) + A.T @ torch.diag(w[0]) @ A
    cov = torch.linalg.inv(P)
    mean = cov @ (A.T @ torch.full((M,), 0.5, dtype=torch.float64))
    L = torch.linalg.cholesky(0.5 * (cov + cov.T))
    f = (mean + torch.randn(S, C * n, generator=g, dtype=torch.float64) @ L.T).reshape(S, C, n)
    a, b = torch.triu_indices(C, C, 1)

    def worst(m_f: Tensor, v_f: Tensor) -> float:
        scores = method.pair_scores(m_f, v_f[..., a] + v_f[..., b])  # [S, Q, C]
        se = scores.std(0) / math.sqrt(S)
        return float(((scores.mean(0) - expected).abs() / se).max())

    m_f, v_f = method.state_predictive(Kss, f, Ksq, kqq, ep)
    assert worst(m_f, v_f) < 4.5
    assert worst(m_f, kqq.T.expand_as(v_f)) > 4.5


def test_pair_variances_sum_to_the_centred_trace():
    """``sum_{c < c'} Var(f_c - f_c') = C tr(S) - 1^T S 1``, and each is ``u^T S u`` for ``u = e_c
    - e_c'``."""
    from zoo_ove import pair_variances

    g = torch.Generator().manual_seed(0)
    A = torch.randn(2, 3, 4, 4, generator=g, dtype=torch.float64)
    S = A @ A.transpose(-1, -2)
    v = pair_variances(S)
    assert torch.allclose(v.sum(-1), 4 * torch.diagonal(S, dim1=-2, dim2=-1).sum(-1) - S.sum((-1, -2)))
    a, b = torch.triu_indices(4, 4, 1)
    u = torch.eye(4, dtype=torch.float64)[a] - torch.eye(4, dtype=torch.float64)[b]  # [6, 4]
    assert torch.allclose(v, torch.einsum("pi,...ij,pj->...p", u, S, u))


@pytest.mark.parametrize("predictive", ["conditional", "samples"])
def test_own_uncertainty_is_the_prior_far_from_the_support_and_lower_at_it(predictive):
    """A query far from every support point (RBF kernel ~ 0) keeps the prior's variance of each
    difference, ``2 k(x, x)``, summed over the ``C (C - 1) / 2`` pairs; one on a support point has
    less."""
    support = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    episode = Episode(support, torch.arange(3), torch.tensor([[0.0, 0.0], [40.0, 40.0]]),
                      torch.zeros(2, dtype=torch.long), way=3, shot=1, info={"seed": 0})
    method = OVE(IdentityBackbone(2), way=3, kernel=RBFKernel(2), chains=4, test_steps=5,
                 predictive=predictive).eval()
    with torch.no_grad():
        own = method.predict(episode.unlabelled()).extras["uncertainty"]
        prior = 3 * 2 * float(method.kernel(torch.zeros(1, 2), torch.zeros(1, 2)).squeeze())
    assert own.shape == (2,) and float(own[1]) == pytest.approx(prior, rel=1e-5)
    assert float(own[0]) < 0.9 * prior
