"""The integration baseline: plain Monte Carlo, the sample mean of ``f`` with its standard error
``s / sqrt(n)``; every control-variate method is compared with it at the same samples."""

from __future__ import annotations

import math

from zoo.tasks.integration import IntegralEstimate, IntegrationProblem
from zoo.tasks.methods import IntegrationMethod


class MonteCarlo(IntegrationMethod):
    name = "mc"

    def estimate(self, problem: IntegrationProblem) -> IntegralEstimate:
        fx = problem.fx.double()
        return IntegralEstimate(float(fx.mean()), float(fx.std(unbiased=True)) / math.sqrt(len(fx)))
