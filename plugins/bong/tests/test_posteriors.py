"""Cross-checks with the ``posteriors`` library (an optional dependency of the zoo, in its
``dev`` extra): its diagonal extended Kalman filter is BONG-LIN-EF-DG.

``posteriors.ekf.diag_fisher`` linearises the log-likelihood of each observation at the mean and
replaces its Hessian by the diagonal empirical Fisher ``-g^2``, then completes the square:
``sigma'^-2 = sigma^-2 + lr g^2``, ``mu' = mu + lr sigma'^2 g``. At ``lr = 1`` this is the dg family's
natural step with the LIN-EF curvature (``g``, ``G = -g g^T``, whose diagonal is ``-g^2``).
"""

import warnings

import pytest
import torch
from zoo_bong.beliefs import FullNatural, prior_belief
from zoo_bong.curvature import linearised
from zoo_bong.method import Bong

from zoo.data import load_diabetes_stream

with warnings.catch_warnings():  # tensordict's notice about posteriors' dataclass defaults
    warnings.simplefilter("ignore", FutureWarning)
    posteriors = pytest.importorskip("posteriors")


def _stream(stream: str, steps: int = 12):
    """``(dim, classes, [(x, y), ...])``: diabetes-stream's first examples, or a random 3-class
    stream of 6-d inputs."""
    if stream == "diabetes-stream":
        data = load_diabetes_stream()
        return data.dim, data.classes, list(zip(data.x[:steps], data.y[:steps]))
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(steps, 6, generator=generator)
    return 6, 3, list(zip(x, torch.randint(0, 3, (steps,), generator=generator)))


@pytest.mark.parametrize("stream", ["diabetes-stream", "classes"])
def test_posteriors_diagonal_ekf_is_bong_lin_ef_dg(stream):
    dim, classes, examples = _stream(stream)
    regression = classes == 0
    torch.manual_seed(0)
    bong = Bong(dim=dim, classes=classes, network="mlp", hidden=5, rule="bong",
                curvature="lin-ef", family="dg", prior_var=0.2, noise_var=0.4)

    def log_likelihood(theta, batch):  # per example of the batch, as posteriors asks
        x, y = batch
        f = bong._f(theta, x)
        if regression:
            return bong.likelihood.log_prob(f, y.double()[:, None]), f
        return torch.log_softmax(f, -1).gather(1, y[:, None])[:, 0], f

    transform = posteriors.ekf.diag_fisher.build(log_likelihood, lr=1.0, init_sds=0.2 ** 0.5,
                                                 per_sample=True)
    reference = transform.init(bong.theta0.clone())
    state = bong.init()
    for x, y in examples:
        state = bong.update(state, x, y)
        reference, _ = transform.update(reference, (x[None], y[None]))
        assert torch.allclose(state.belief.mu, reference.params, rtol=1e-12, atol=1e-12)
        assert torch.allclose(state.belief.gaussian.var, reference.sd_diag.square(), rtol=1e-12,
                              atol=0)


def test_posteriors_dense_ekf_lowers_the_precision_by_the_empirical_fisher():
    """``posteriors.ekf.dense_fisher`` (0.1.3) forms the new precision as ``Sigma^-1 - lr F``
    with ``F = g g^T`` the (positive semi-definite) empirical Fisher: the sign of the curvature
    is the opposite of its diagonal filter's and of BONG-LIN-EF-FC's ``Sigma^-1 + g g^T``. One
    step on a linear-Gaussian model: its update is the FC natural step with ``G = +g g^T``."""
    data = load_diabetes_stream()
    torch.manual_seed(0)
    bong = Bong(dim=10, classes=0, network="linear", curvature="lin-ef", family="fc",
                prior_var=0.01, noise_var=2.0)

    def log_likelihood(theta, batch):
        x, y = batch
        f = bong._f(theta, x)
        return bong.likelihood.log_prob(f, y.double()[:, None]), f

    transform = posteriors.ekf.dense_fisher.build(log_likelihood, lr=1.0, init_cov=0.01,
                                                  per_sample=True)
    x, y = data.x[3], data.y[3]
    reference, _ = transform.update(transform.init(bong.theta0.clone()), (x[None], y[None]))
    ours = bong.update(bong.init(), x, y).belief
    curv = linearised(bong.f_one, bong.likelihood, bong.theta0, x.double(), y.double().reshape(1),
                      hessian=False)
    prior = prior_belief("fc", bong.theta0, 0.01)
    flipped_precision = prior.gaussian.precision() + curv.dense()  # Sigma^-1 - g g^T
    flipped = FullNatural.make(bong.theta0 + torch.linalg.solve(flipped_precision, curv.g),
                               flipped_precision)
    assert torch.allclose(reference.cov, flipped.gaussian.covariance(), atol=1e-10)
    assert torch.allclose(reference.params, flipped.mu, atol=1e-10)
    assert torch.allclose(ours.gaussian.precision(), prior.gaussian.precision() - curv.dense(),
                          atol=1e-10)
    assert not torch.allclose(reference.cov, ours.gaussian.covariance(), atol=1e-4)
