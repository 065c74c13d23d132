"""Every registered regression method, whichever plugin provides it, passes
:func:`zoo.testing.check_regression_method`."""

import pytest

from zoo.plugins import registry
from zoo.testing import check_regression_method

METHODS = sorted(n for n, cls in registry().items("methods").items() if cls.task == "regression")
CHEAP = {"gmm-np": {"test_trng_steps": 3, "predict_samples": 16, "trng_samples": 16}}
"""Settings that keep a method's check to seconds (GMM-NP fits a mixture per prediction and per
bound: 1,000 TRNG steps by default); the check is about shapes, seeding and the bound order."""


@pytest.mark.parametrize("name", METHODS)
def test_regression_method_conforms(name):
    check_regression_method(name, **CHEAP.get(name, {}))
