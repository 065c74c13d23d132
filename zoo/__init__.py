"""zoo: Bayesian few-shot and meta-learning methods side by side, on identical episodes.

The public API
--------------
What a plugin, a script or a user may import is exactly the names in ``__all__`` of ``zoo`` and of
the entry points listed in :data:`PUBLIC_MODULES`:

- ``zoo``: writing and registering a method (:class:`Method` for classification and
  :class:`BaseMethod` under every kind's base, :class:`Prediction`,
  :class:`HParam`, :data:`hookimpl`, :func:`build_method`), episodes, the seeds of an episode's
  random draws, the errors the zoo raises, component specs and atomic JSON files, and the Python
  API for notebooks and scripts (:func:`bench`, :func:`train_and_evaluate`, :func:`episodes`,
  :func:`load_results`, from :mod:`zoo.api`);
- ``zoo.families``: the bases of the method families (GP, last layer, inner loop, pre-trained);
- ``zoo.inference``: the algebra of latent Gaussian models those families share (site
  posteriors that never invert the kernel matrix, kernel matrices by feature factor, the counted
  jitter policy, Polya-Gamma augmentation, variational expectations and the ELBO);
- ``zoo.gaussians``: Gaussian beliefs over parameter vectors; ``zoo.kernels``: covariance
  functions; ``zoo.backbones``: feature extractors;
- ``zoo.tasks``: the task kinds, their episodes, predictions and method bases;
- ``zoo.data``: data sets; ``zoo.metrics``: accuracy intervals and calibration;
- ``zoo.runner``: suites, cells, running a suite and reporting its results;
- ``zoo.testing``: the conformance checks and fixtures for a plugin's tests.

Every other module, and every name not in an ``__all__``, is internal: it may move or change
without notice (the entry points re-export from wherever it lives). Core modules import each other
from their homes; plugins import only from the public API, which a test checks for every plugin in
this repository.

The names of ``zoo`` are imported when first used (PEP 562), so that commands which only read
results (``zoo report``) do not import torch: it takes ~2 s and ~650 MB before anything else runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zoo._lazy import exports

if TYPE_CHECKING:
    from zoo.episode import Episode, EpisodeSampler
    from zoo.errors import (
        DataMissingError,
        EpisodeError,
        HyperParameterError,
        NumericalError,
        ZooError,
    )
    from zoo.hookspecs import hookimpl
    from zoo.hparams import HParam
    from zoo.io import atomic_write_json
    from zoo.jitter import check_finite
    from zoo.method import BaseMethod, Method, build_method
    from zoo.plugins import Registry, load_dataset, registry
    from zoo.polyagamma import device_generator
    from zoo.seeds import coordinate_seed, draw_seed, episode_generator, episode_own_seed, hash_seed
    from zoo.spec import parse_spec

__version__ = "0.1.0"

PUBLIC_MODULES = ("zoo", "zoo.backbones", "zoo.data", "zoo.families", "zoo.gaussians",
                  "zoo.inference", "zoo.kernels", "zoo.metrics", "zoo.runner", "zoo.tasks",
                  "zoo.testing")

_HOMES = {
    # a method and its registration
    "BaseMethod": "zoo.method", "Method": "zoo.method", "Prediction": "zoo.method", "HParam": "zoo.hparams",
    "hookimpl": "zoo.hookspecs", "build_method": "zoo.method",
    # episodes and the seeds of their random draws
    "Episode": "zoo.episode", "EpisodeSampler": "zoo.episode",
    "episode_generator": "zoo.seeds", "draw_seed": "zoo.seeds", "episode_own_seed": "zoo.seeds",
    "coordinate_seed": "zoo.seeds", "hash_seed": "zoo.seeds",
    "device_generator": "zoo.polyagamma",
    # errors
    "ZooError": "zoo.errors", "EpisodeError": "zoo.errors", "DataMissingError": "zoo.errors",
    "HyperParameterError": "zoo.errors", "NumericalError": "zoo.errors",
    "check_finite": "zoo.jitter",
    # components by name, files
    "parse_spec": "zoo.spec", "load_dataset": "zoo.plugins", "atomic_write_json": "zoo.io",
    # the plugin registry (what build_method looks names up in): the process's, and its type
    "registry": "zoo.plugins", "Registry": "zoo.plugins",
    # the Python API sits above the runner: named here for users and imported on first use only,
    # so the layers below it (which import zoo) never load it
    "bench": "zoo.api", "train_and_evaluate": "zoo.api", "episodes": "zoo.api",
    "load_results": "zoo.api",
}

__all__ = ["BaseMethod", "DataMissingError", "Episode", "EpisodeError", "EpisodeSampler", "HParam",
           "HyperParameterError", "Method", "NumericalError", "Prediction", "Registry", "ZooError",
           "atomic_write_json", "bench", "build_method", "check_finite", "coordinate_seed",
           "device_generator", "draw_seed", "episode_generator", "episode_own_seed", "episodes",
           "hash_seed", "hookimpl", "load_dataset", "load_results", "parse_spec", "registry",
           "train_and_evaluate"]

__getattr__, __dir__ = exports(globals(), _HOMES)
