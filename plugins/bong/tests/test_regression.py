"""``bong`` on regression streams: the Gaussian likelihood, its exact conjugate case and its
predictive."""

import pytest
import torch
from zoo_bong.method import Bong

from zoo import HyperParameterError
from zoo.data import load_diabetes_stream
from zoo.testing import check_task, registry


@pytest.mark.parametrize("hparams", [
    {"network": "linear", "family": "fc", "noise_var": 0.5},
    {"network": "mlp", "hidden": 4, "family": "dlr", "rank": 2, "predictive": "lin-mc",
     "predictive_samples": 4},
    {"network": "mlp", "hidden": 4, "family": "dg", "curvature": "mc-hess", "samples": 3,
     "predictive": "mc", "predictive_samples": 4},
])
def test_bong_conforms_on_a_regression_stream(hparams):
    check_task("sequential", "bong", "diabetes-stream", stream_length=20, eval_steps=[0, 20],
               hparams=hparams)


def test_bong_lin_hess_fc_on_a_linear_gaussian_model_is_recursive_bayesian_linear_regression():
    """With a linear network and the Gaussian likelihood, LIN-HESS is the exact Hessian and the
    FC natural step is the Kalman update: BONG's belief and predictive equal ``online-blr``'s after
    every example (the same prior ``N(0, v I)`` over ``[w, b]``, the same noise)."""
    data = load_diabetes_stream()
    bong = Bong(dim=10, classes=0, network="linear", family="fc", curvature="lin-hess",
                prior_var=0.7, noise_var=0.3)
    bong.theta0.zero_()  # nn.Linear's parameters are [w, b]: online-blr's features [x, 1]
    blr = registry().get("methods", "online-blr")(dim=10, classes=0, prior_var=0.7, noise_var=0.3)
    state, reference = bong.init(), blr.init()
    held = data.x[data.held_out]
    for i in data.pool[torch.randperm(len(data.pool), generator=torch.Generator().manual_seed(1))][:40]:
        state, reference = bong.update(state, data.x[i], data.y[i]), blr.update(reference, data.x[i],
                                                                               data.y[i])
        q = state.belief.gaussian
        assert torch.allclose(q.mean, reference[0], rtol=0, atol=1e-10)
        assert torch.allclose(q.covariance(), reference[1], rtol=0, atol=1e-10)
    for (mean, var), (m, v) in zip([bong.predict(state, held)], [blr.predict(reference, held)]):
        assert torch.allclose(mean, m, atol=1e-10) and torch.allclose(var, torch.full_like(v, 0.3))
    # the linearised predictive of a linear model is the exact one, up to Monte Carlo error
    bong.hparams["predictive"], bong.hparams["predictive_samples"] = "lin-mc", 256
    mean, var = bong.predict(state, held)
    assert torch.allclose(mean, m, atol=0.05) and torch.allclose(var, v, rtol=0.25)


def test_the_plugin_predictive_has_the_noise_variance_and_the_network_mean():
    data = load_diabetes_stream()
    torch.manual_seed(0)
    bong = Bong(dim=10, classes=0, network="mlp", hidden=3, noise_var=0.25)
    state = bong.update(bong.init(), data.x[0], data.y[0])
    mean, var = bong.predict(state, data.x[:7])
    assert mean.shape == var.shape == (7,)
    assert torch.equal(var, torch.full((7,), 0.25, dtype=var.dtype))
    assert torch.allclose(mean, bong._f(state.belief.mu, data.x[:7].double())[:, 0])


def test_a_network_that_does_not_fit_the_inputs_is_refused():
    with pytest.raises(HyperParameterError, match="'bong'.*square images.*network=mlp"):
        Bong(dim=10, classes=0)
    with pytest.raises(HyperParameterError, match="noise_var"):
        Bong(dim=10, classes=0, network="linear", noise_var=0.0)
