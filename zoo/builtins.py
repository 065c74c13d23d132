"""The zoo's own components, registered through the same hooks as any plugin."""

from __future__ import annotations

from pathlib import Path

from zoo import backbones, kernels, tasks
from zoo.data import DATASETS
from zoo.hookspecs import hookimpl

SUITES_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "suites"


@hookimpl
def zoo_register_backbones(register):
    for name, factory in backbones.BUILTIN.items():
        register(name, factory)


@hookimpl
def zoo_register_kernels(register):
    for name, cls in kernels.BUILTIN.items():
        register(name, cls)


@hookimpl
def zoo_register_datasets(register):
    for name, factory in DATASETS.items():
        register(name, factory)


@hookimpl
def zoo_register_suites(register):
    if SUITES_DIR.is_dir():
        for path in sorted(SUITES_DIR.glob("*.toml")):
            register(path.stem, path)


@hookimpl
def zoo_register_tasks(register):
    for name, cls in tasks.BUILTIN.items():
        register(name, cls())
