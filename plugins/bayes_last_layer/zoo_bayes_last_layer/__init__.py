"""A Bayesian last layer by variational inference (diagonal, full or K-FAC Gaussian over the
linear head's weights, fitted per episode on the support) as a zoo plugin: method
``bayes-last-layer``; suite ``bll-variants`` (its variants one factor at a time)."""

from __future__ import annotations

from pathlib import Path

import zoo
from zoo_bayes_last_layer.method import BayesLastLayer

__all__ = ["BayesLastLayer"]

SUITE = Path(__file__).resolve().parent / "variants.toml"


@zoo.hookimpl
def zoo_register_methods(register):
    register(BayesLastLayer)


@zoo.hookimpl
def zoo_register_suites(register):
    register("bll-variants", SUITE)
