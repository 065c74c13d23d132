"""Neural processes for the zoo's regression tasks, the baselines of GMM-NP (Volpp et al., ICLR
2023, Table 1): ``ma-np``, ``ba-np``, ``anp``, ``bnp``, ``banp``, one skeleton
(:class:`~zoo_neural_processes.model.NeuralProcess`) configured by hyper-parameters."""

from __future__ import annotations

import zoo
from zoo_neural_processes.model import (
    METHODS,
    AttentiveNP,
    BayesianAggregationNP,
    BootstrapAttentiveNP,
    BootstrapNP,
    MeanAggregationNP,
    NeuralProcess,
)

__all__ = ["AttentiveNP", "BayesianAggregationNP", "BootstrapAttentiveNP", "BootstrapNP",
           "MeanAggregationNP", "NeuralProcess"]


@zoo.hookimpl
def zoo_register_methods(register):
    for cls in METHODS:
        register(cls)
