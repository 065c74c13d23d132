import math

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal
from zoo_ove import OVE, Pairs

from zoo import Episode
from zoo.backbones import Backbone
from zoo.gp import SitePosterior
from zoo.kernels import RBFKernel
from zoo.polyagamma import augmented_log_marginal
from zoo.testing import check_method


class Identity(Backbone):
    feature_dim = 1

    def forward(self, x):
        return x


def tiny():
    """2 classes, 3 support points on a line; one query."""
    sx = torch.tensor([[-1.0], [-0.2], [0.9]])
    return Episode(sx, torch.tensor([0, 0, 1]), torch.tensor([[0.3]]), torch.tensor([1]),
                   way=2, shot=1, info={"seed": 5})


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


def test_gibbs_matches_the_exact_posterior_by_numerical_integration():
    ep = tiny()
    method = OVE(Identity(), way=2, kernel=RBFKernel(1, lengthscale=0.8, outputscale=2.0),
                 chains=2000)
    K = method.kernel_matrices(ep).Kss.detach()
    pairs = Pairs(ep.support_y, 2)
    _, psi, _ = method.gibbs(K, pairs, 25, ep, torch.Generator().manual_seed(0))
    mean, cov = exact_psi_moments(pairs.prior_cov(K).numpy())
    se = np.sqrt(np.diag(cov) / psi.shape[0])
    assert np.all(np.abs(psi.mean(0).numpy() - mean) < 4 * se), (psi.mean(0), mean, se)
    emp_var = psi.var(0).numpy()
    assert np.all(np.abs(emp_var - np.diag(cov)) < 0.1 * np.diag(cov)), (emp_var, np.diag(cov))


@pytest.mark.parametrize("loss", ["ml", "pl"])
def test_losses_train_the_kernel_and_predict_sums_to_one(loss):
    ep = tiny()
    method = OVE(Identity(), way=2, kernel=RBFKernel(1), loss=loss, chains=8)
    value = method.meta_loss(ep)
    value.backward()
    assert torch.isfinite(value) and method.kernel.raw_lengthscale.grad is not None
    method.eval()
    with torch.no_grad():
        pred = method.predict(ep)
    assert torch.allclose(pred.probs.sum(-1), torch.ones(1))
    assert len(pred.extras["inner_objective"]) == 50


def test_unknown_loss_is_an_error():
    with pytest.raises(ValueError, match="loss must be"):
        OVE(Identity(), way=2, kernel=RBFKernel(1), loss="elbo")


def test_conformance():
    check_method("ove", settings=((2, 1), (5, 5)))


@pytest.mark.slow
def test_conformance_20_way():
    """M = N (C - 1) = 2660 pairwise differences: the dense B = I + S K_psi S dominates."""
    check_method("ove", settings=((20, 5),), chains=2, test_steps=2)
