"""Every registered classification method, whichever plugin provides it, passes the same checks
(zoo.testing.check_method): probabilities [Q, way] summing to one, deterministic predictions for a
fixed episode, a finite meta-loss that reaches the backbone, at 2-way 1-shot and 20-way 5-shot."""

import pytest

from zoo.plugins import registry
from zoo.testing import check_method

METHODS = sorted(n for n, cls in registry().items("methods").items()
                 if cls.task == "classification")


@pytest.mark.parametrize("name", METHODS)
def test_method_conforms(name):
    check_method(name)
