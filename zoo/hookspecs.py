"""The hooks a zoo plugin may implement.

Every hook receives a ``register`` callable and adds components with it; hooks are additive and
return nothing. Built-in components are registered through these same hooks (``zoo.builtins``).

A plugin module looks like::

    import zoo

    @zoo.hookimpl
    def zoo_register_methods(register):
        register(MyMethod)            # the name is MyMethod.name
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

PROJECT = "zoo"
DISTRIBUTION = "bayes-meta-zoo"
"""The core's distribution name on the package index (``zoo`` there is an unrelated project); the
import package, the command and the plugin host's project name are ``zoo``."""
ENTRY_POINT_GROUP = "zoo.plugins"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

Register = Callable[..., Any]


@hookspec
def zoo_register_methods(register: Register) -> None:
    """Register :class:`zoo.Method` subclasses: ``register(cls)``; the name is ``cls.name``."""


@hookspec
def zoo_register_backbones(register: Register) -> None:
    """Register backbone factories: ``register(name, factory)``.

    ``factory(in_channels, image_size, **options) -> zoo.Backbone``.
    """


@hookspec
def zoo_register_kernels(register: Register) -> None:
    """Register kernel classes: ``register(name, cls)``; ``cls(feature_dim, batch_shape, **options)``."""


@hookspec
def zoo_register_datasets(register: Register) -> None:
    """Register data set factories: ``register(name, factory)``.

    ``factory(data_dir=None, download=True, **options) -> zoo.data.FewShotDataset``.
    """


@hookspec
def zoo_register_suites(register: Register) -> None:
    """Register benchmark suites: ``register(name, path_to_toml)`` or ``register(name, dict)``."""


@hookspec
def zoo_register_estimators(register: Register) -> None:
    """Register Gaussian-expectation estimators: ``register(name, cls)``; ``cls(**options)`` is a
    :class:`zoo.expectations.Estimator`, its options those of the spec ``name[key=value,...]``."""


@hookspec
def zoo_register_tasks(register: Register) -> None:
    """Register task kinds: ``register(name, task)``, ``task`` a :class:`zoo.tasks.Task` instance.

    A method declares the kind it solves (``task = "regression"``); a suite its kind
    (``[suite] task = "regression"``); the runner dispatches sampling, scoring and reporting to it.
    """


HOOKS: dict[str, str] = {
    "methods": "zoo_register_methods",
    "backbones": "zoo_register_backbones",
    "kernels": "zoo_register_kernels",
    "datasets": "zoo_register_datasets",
    "suites": "zoo_register_suites",
    "estimators": "zoo_register_estimators",
    "tasks": "zoo_register_tasks",
}
