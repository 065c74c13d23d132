"""MD-BFSC (Ke, Cao & Zhou, "Accelerating Convergence in Bayesian Few-Shot Classification",
ICML 2024) as a zoo plugin: methods ``md-bfsc`` and ``gd-bfsc``; suites ``md-convergence`` and
the hyper-parameter study ``md-hparams`` / ``md-hparams-paper``."""

from __future__ import annotations

from pathlib import Path

import zoo
from zoo_md_bfsc import hparams
from zoo_md_bfsc.method import GDBFSC, MDBFSC

__all__ = ["GDBFSC", "MDBFSC"]

SUITE = Path(__file__).resolve().parent / "md-convergence.toml"


@zoo.hookimpl
def zoo_register_methods(register):
    register(MDBFSC)
    register(GDBFSC)


@zoo.hookimpl
def zoo_register_suites(register):
    register("md-convergence", SUITE)
    register("md-hparams", hparams.SUITE)
    register("md-hparams-paper", hparams.paper_suite())
