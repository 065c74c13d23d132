"""Baseline methods of the task kinds beyond classification, registered by the core: what every
new method of a kind is compared with. Each module holds the baselines of one kind."""

from zoo.baselines.integration import MonteCarlo
from zoo.baselines.regression import ConstantGaussian, ExactGP
from zoo.baselines.sequential import (
    OnlineBayesianLinearRegression,
    OnlineLogisticRegression,
    RunningPrototypes,
)

BUILTIN = [ConstantGaussian, ExactGP, MonteCarlo, OnlineBayesianLinearRegression,
           OnlineLogisticRegression, RunningPrototypes]

__all__ = ["BUILTIN"]
