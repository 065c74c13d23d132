"""MD-BFSC (Ke, Cao & Zhou, "Accelerating Convergence in Bayesian Few-Shot Classification",
ICML 2024) as a zoo plugin: methods ``md-bfsc`` and ``gd-bfsc`` and the ``md-convergence`` suite."""

from __future__ import annotations

from pathlib import Path

import zoo
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
