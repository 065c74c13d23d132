"""Every registered regression method, whichever plugin provides it, passes
:func:`zoo.testing.check_regression_method`."""

import pytest

from zoo.plugins import registry
from zoo.testing import check_regression_method

METHODS = sorted(n for n, cls in registry().items("methods").items() if cls.task == "regression")


@pytest.mark.parametrize("name", METHODS)
def test_regression_method_conforms(name):
    check_regression_method(name)
