"""A Bayesian last layer by variational inference (diagonal, full or K-FAC Gaussian over the
linear head's weights, fitted per episode on the support) as a zoo plugin: method
``bayes-last-layer``."""

from __future__ import annotations

import zoo
from zoo_bayes_last_layer.method import BayesLastLayer

__all__ = ["BayesLastLayer"]


@zoo.hookimpl
def zoo_register_methods(register):
    register(BayesLastLayer)
