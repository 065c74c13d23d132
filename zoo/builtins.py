"""The zoo's own components, registered through the same hooks as any plugin: backbones,
kernels, data sets (image sets, and the generated function, integrand and stream families of the
other task kinds), suites, the task kinds, and the baselines of the kinds beyond classification."""

from __future__ import annotations

from pathlib import Path

from zoo import backbones, baselines, kernels, stein_kernels, tasks
from zoo.control_variates import methods as cv_methods
from zoo.data import DATASETS
from zoo.data.completion import load_digits_completion, load_mnist_completion
from zoo.data.functions import load_affine_sinusoid, load_gp_rbf, load_sinusoid
from zoo.data.integrands import (
    load_borehole,
    load_bvp,
    load_gaussian_cosine,
    load_genz_oscillatory,
    load_south,
    load_step,
)
from zoo.data.optimisation import load_branin, load_forrester, load_hartmann3
from zoo.data.streams import load_diabetes_stream, load_digits_stream, load_mnist_stream
from zoo.families.latent_gaussian import ESTIMATORS
from zoo.hookspecs import hookimpl

GENERATED = {"sinusoid": load_sinusoid, "gp-rbf": load_gp_rbf,
             "affine-sinusoid": load_affine_sinusoid, "forrester": load_forrester,
             "branin": load_branin, "hartmann3": load_hartmann3,
             "digits-completion": load_digits_completion, "mnist-completion": load_mnist_completion,
             "gaussian-cosine": load_gaussian_cosine, "genz-oscillatory": load_genz_oscillatory,
             "south": load_south, "step": load_step, "borehole": load_borehole, "bvp": load_bvp,
             "digits-stream": load_digits_stream, "mnist-stream": load_mnist_stream,
             "diabetes-stream": load_diabetes_stream}

SUITES_DIR = Path(__file__).resolve().parent / "suites"
"""The built-in suites' TOML files: package data, so that they ship inside the wheel."""


@hookimpl
def zoo_register_backbones(register):
    for name, factory in backbones.BUILTIN.items():
        register(name, factory)


@hookimpl
def zoo_register_kernels(register):
    for name, cls in {**kernels.BUILTIN, "preconditioned-rbf": stein_kernels.PreconditionedRBFKernel
                      }.items():
        register(name, cls)


@hookimpl
def zoo_register_estimators(register):
    for name, cls in ESTIMATORS.items():
        register(name, cls)


@hookimpl
def zoo_register_datasets(register):
    for name, factory in {**DATASETS, **GENERATED}.items():
        register(name, factory)


@hookimpl
def zoo_register_methods(register):
    for cls in [*baselines.BUILTIN, *cv_methods.METHODS]:
        register(cls)


@hookimpl
def zoo_register_suites(register):
    for path in sorted(SUITES_DIR.glob("*.toml")):
        register(path.stem, path)


@hookimpl
def zoo_register_tasks(register):
    for name, cls in tasks.BUILTIN.items():
        register(name, cls())
