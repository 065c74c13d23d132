"""The authors' BONG code (petergchang/bong) and JAX, imported beside the zoo for the benchmark
scripts of this folder (``vs_jax.py``, ``vs_reference.py``); neither is a dependency of the zoo.

- :func:`create_env` makes a virtual environment with ``jax``, ``jaxlib`` and ``pytz`` from PyPI.
- :func:`import_reference` appends that environment's site-packages to this process's path (after
  the zoo's), installs inert stand-ins for the modules that the authors' ``bong/util.py`` imports
  for its experiment helpers only (``flax``, ``flax.linen``, ``jax_tqdm``, ``optuna``: no update
  function or sampler uses them, so none needs installing), imports JAX in float64 and the four
  update modules ``bong/src/{bong,bog,blr,bbb}.py``. Current JAX no longer has ``jax.tree_map``,
  which their agent classes call; it is pointed at ``jax.tree_util.tree_map`` (the same function
  under its current name). No algorithm of theirs is touched.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import types

STAND_INS = ("flax", "flax.linen", "jax_tqdm", "optuna")


def create_env(env: str) -> None:
    """The virtual environment ``env`` with JAX (CPU) from PyPI."""
    subprocess.run([sys.executable, "-m", "venv", env], check=True)
    subprocess.run([os.path.join(env, "bin", "pip"), "install", "-q", "jax", "jaxlib", "pytz"],
                   check=True)


class _Inert(type):
    """A class whose attributes and calls are itself: what ``bong.util``'s experiment helpers need
    from the stand-in modules at import time."""

    def __getattr__(cls, name):
        return cls

    def __call__(cls, *args, **kwargs):
        return cls


def _inert_attribute(name: str):
    if name.startswith("__"):  # a module's dunders stay absent (inspect walks sys.modules)
        raise AttributeError(name)
    return _Inert("Inert", (), {})


def install_stand_ins() -> None:
    """Inert modules under the names of :data:`STAND_INS` in ``sys.modules``."""
    for name in STAND_INS:
        module = types.ModuleType(name)
        module.__getattr__ = _inert_attribute
        sys.modules[name] = module
    sys.modules["flax"].linen = sys.modules["flax.linen"]


def import_reference(env: str, path: str):
    """``(jax, {"bong": ..., "bog": ..., "blr": ..., "bbb": ...}, states)``: JAX (float64) from the
    environment ``env`` and the authors' update modules and ``bong.src.states`` from the checkout
    ``path``. Settings that JAX reads at import (``XLA_FLAGS``) must be in ``os.environ`` before."""
    if not os.path.isdir(os.path.join(path, "bong", "src")):
        raise SystemExit(f"{path} is not a checkout of petergchang/bong (no bong/src); "
                         "git clone https://github.com/petergchang/bong DIR")
    site = glob.glob(os.path.join(env, "lib", "python*", "site-packages"))
    if not site:
        raise SystemExit(f"{env} is not a virtual environment; create it with --setup {env}")
    sys.path += site
    install_stand_ins()
    sys.path.insert(0, path)
    import jax

    jax.config.update("jax_enable_x64", True)
    if not hasattr(jax, "tree_map"):  # removed from JAX after the authors' code was written
        jax.tree_map = jax.tree_util.tree_map
    from bong.src import bbb, blr, bog, bong, states

    return jax, {"bong": bong, "bog": bog, "blr": blr, "bbb": bbb}, states
