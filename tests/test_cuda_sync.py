"""On a GPU the inner loops never wait for the device: ``torch.cuda.set_sync_debug_mode("error")``
turns every host synchronisation inside them into an error. Skipped without CUDA."""

import pytest
import torch
import torch.nn.functional as F

from zoo.expectations import build_estimator
from zoo.families.latent_gaussian import ESTIMATORS
from zoo.gp import DTYPE
from zoo.gram import FeatureGram
from zoo.jitter import JitterPolicy
from zoo.variational import SoftmaxLikelihood

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _inputs(route: str):
    g = torch.Generator(device="cuda").manual_seed(0)
    C, n, d = 5, 40, 8
    z = F.normalize(torch.randn(n, d, generator=g, device="cuda", dtype=DTYPE), dim=-1)
    K = FeatureGram.of(z).expand(C) if route == "features" else (z @ z.T).expand(C, n, n)
    onehot = F.one_hot(torch.arange(n, device="cuda") % C, C).to(DTYPE)
    rule = build_estimator("sobol", ESTIMATORS, samples=64).rule(C, seed=1, device="cuda")
    return K, SoftmaxLikelihood(onehot, rule)


@cuda
@pytest.mark.parametrize("route", ["dense", "features"])
def test_mirror_descent_never_synchronises_inside_its_loop(route):
    from zoo_md_bfsc.inference import mirror_descent

    K, likelihood = _inputs(route)
    jitter = JitterPolicy()
    mirror_descent(K, likelihood, 2, 0.5, jitter=jitter)  # warm-up (kernels, allocator)
    torch.cuda.synchronize()
    with jitter.deferred():  # the loop's checks wait for this exit: one synchronisation, after
        torch.cuda.set_sync_debug_mode("error")
        try:
            result = mirror_descent(K, likelihood, 10, 0.5, jitter=jitter)
            mean = result.posterior.mean
        except RuntimeError as exc:  # a synchronising call inside the loop
            pytest.fail(f"host synchronisation inside the mirror-descent loop: {exc}")
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(mean).all()


@cuda
def test_deferred_checks_still_raise_at_the_end():
    from zoo.errors import NumericalError

    jitter = JitterPolicy()
    bad = torch.full((3, 3), float("nan"), device="cuda", dtype=DTYPE)
    with pytest.raises(NumericalError, match="could not be factorised"), jitter.deferred():
        jitter.cholesky_pd(bad, "B")
