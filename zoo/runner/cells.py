"""Cells: a suite resolved down to hashable configurations.

A :class:`Cell` is one model trained and scored on one test data set. Its identity is the hash of
its resolved configuration (method, every hyper-parameter, data sets, backbone, kernel, the shape
its task kind gives it, seed, episode counts); two cells that differ only in the test data set or
in a scoring-only shape key (a test shot, a context size) share one training
(:attr:`Cell.train_hash`). One rule names every cell: all of its resolved configuration, the shape
flattened into it and the task kind by name, whatever their values. The method's provenance
(distribution, version, a digest of its code) is part of the identity, so a result is never
reused for other code under the same name.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any

from zoo.errors import HyperParameterError, ZooError
from zoo.hparams import resolve_hparams
from zoo.runner.suite import (
    PER_DATASET,
    Suite,
    SuiteError,
    dataset_kernel,
    missing_methods,
    select_methods,
)
from zoo.spec import parse_spec
from zoo.tasks.base import Task

if TYPE_CHECKING:
    from zoo.plugins import Registry

log = logging.getLogger(__name__)

RUN_ONLY = ("checkpoint_every", "max_bad_steps", "max_skipped_fraction")


@dataclass(frozen=True)
class Cell:
    """One model (method, hyper-parameters, training data, shape of episodes, seed) scored on one
    test data set. ``checkpoint_every``, ``max_bad_steps`` and ``max_skipped_fraction`` are not
    part of its identity.

    ``provenance`` (:meth:`zoo.plugins.Registry.provenance` of the method: plugin, distribution,
    version, code digest) is: a result made by other code under the same name is another cell.
    ``val_dataset`` (empty: the training data set) gives the validation episodes; part of the
    training's identity. So is ``lr_schedule`` (:mod:`zoo.runner.schedule`).
    """

    method: str
    hparams: dict[str, Any]
    train_dataset: str
    dataset: str
    backbone: str | None
    kernel: str | None
    seed: int
    train_episodes: int
    val_episodes: int
    val_every: int
    test_episodes: int
    task: Task = field(compare=False)
    shape: dict[str, Any] = field(default_factory=dict)
    checkpoint_every: int = 50
    max_bad_steps: int = 20
    max_skipped_fraction: float = 0.01
    variant: str = ""
    provenance: dict[str, Any] | None = None
    val_dataset: str = ""
    lr_schedule: str = "constant"

    TRAIN_KEYS = ("method", "hparams", "train_dataset", "backbone", "kernel", "seed",
                  "train_episodes", "val_episodes", "val_every", "task", "provenance",
                  "val_dataset", "lr_schedule")

    def config(self) -> dict[str, Any]:
        """The resolved configuration that names the cell: every field but the run-only ones,
        with the shape flattened into it and the task kind by name."""
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in (*RUN_ONLY, "task", "shape")}
        return out | self.shape | {"task": self.task.name}

    def train_config(self) -> dict[str, Any]:
        """The configuration that names the cell's training: the keys of
        :data:`TRAIN_KEYS` and the task kind's training shape."""
        config = self.config()
        return {k: config[k] for k in self.TRAIN_KEYS} | self.task.train_shape(self.shape)

    @cached_property
    def hash(self) -> str:
        """:func:`config_hash` of :meth:`config`; computed once (a cell is immutable)."""
        return config_hash(self.config())

    @cached_property
    def train_hash(self) -> str:
        return config_hash(self.train_config())

    @property
    def label(self) -> str:
        where = (self.dataset if self.dataset == self.train_dataset
                 else f"{self.train_dataset}->{self.dataset}")
        return (f"{row_name(self.method, self.variant)} {where} {self.task.label(self.shape)} "
                f"seed{self.seed}")

    @classmethod
    def from_config(cls, config: Mapping[str, Any], task: Task, **run: Any) -> Cell:
        """The cell a configuration names (``config.json``); keys that are not fields are shape."""
        names = {f.name for f in fields(cls)}
        base = {k: v for k, v in config.items() if k in names and k != "task"}
        shape = {k: v for k, v in config.items() if k not in names}
        return cls(**base, task=task, shape=shape, **run)


def row_name(method: str, variant: str = "") -> str:
    """The report's row for a method's cells: the method, or ``"METHOD VARIANT"``."""
    return f"{method} {variant}" if variant else method


def code_free_hash(config: Mapping[str, Any]) -> str:
    """The hash of a configuration without its ``provenance``: equal for the same cell computed by
    other code (another version of the method's plugin), so such results can be recognised."""
    return config_hash({k: v for k, v in config.items() if k != "provenance"})


def config_hash(config: Mapping[str, Any]) -> str:
    """16 hex digits of the SHA-256 of the canonical JSON of ``config``."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def expand_cells(suite: Suite, methods: Sequence[str], registry: Registry) -> list[Cell]:
    """Every cell of ``suite`` for ``methods``, in a fixed order (train data, shape, seed, method)."""
    missing = missing_methods(suite, registry)
    for m in suite.method_overrides:
        if m not in missing and m not in registry.names("methods"):
            raise SuiteError(f"{suite.where}: [methods.{m}]: no method {m!r} is installed, and "
                             "it is not one of the zoo's (zoo methods lists the installed ones)")
    cells = []
    for s in suite.part_settings():
        cells += _part_cells(suite, s, methods, registry)
    _check_kernel_tables(suite, methods)
    return list({c.hash: c for c in cells}.values())


def _check_kernel_tables(suite: Suite, methods: Sequence[str]) -> None:
    """Every key of a per-data-set kernel table names a training data set of the suite (a typo
    would silently fall back to the method's kernel)."""
    trained = {t for s in suite.part_settings() for t in s["train_datasets"]}
    known = trained | {parse_spec(t)[0] for t in trained}
    for m in methods:
        unused = sorted(set(suite.method_overrides.get(m, {}).get(PER_DATASET, {})) - known)
        if unused:
            raise SuiteError(f"{suite.where}: [methods.{m}.{PER_DATASET}] names "
                             f"{unused}, which the suite does not train on; its training data "
                             f"sets are {sorted(trained)}")


def _part_cells(suite: Suite, s: dict[str, Any], methods: Sequence[str],
                registry: Registry) -> list[Cell]:
    task = registry.get("tasks", s["task"])
    if s["methods"] not in ("*", suite.settings["methods"]):
        # a part that names its own methods (an ablation of one of them) keeps to those; the
        # suite-level list is only the default selection, which --methods replaces
        methods = [m for m in methods if m in s["methods"]]
        if not methods:
            return []
    owned = {m: set(registry.get("methods", m).all_defaults()) for m in methods}
    # a typo is a hyper-parameter that no method of the suite's own selection declares; one that
    # only the methods left out by --methods declare is simply not used by this run
    suite_methods = select_methods(suite, registry=registry)
    declared = set().union(*(registry.get("methods", m).all_defaults() for m in suite_methods))
    unknown = sorted(set(s["hparams"]) - declared)
    if unknown and not missing_methods(suite, registry):  # else they may be a missing method's
        raise SuiteError(f"{suite.where}: hparams {unknown} belong to none of the methods "
                         f"{suite_methods}")
    try:
        shapes = task.shapes(s)
    except ZooError as exc:
        raise SuiteError(f"{suite.where}: {exc}") from None
    cells = []
    for train in s["train_datasets"]:
        tests = s["test_datasets"] or [train]
        for shape in shapes:
            for seed in s["seeds"]:
                for m in methods:
                    cls = registry.get("methods", m)
                    given = {**suite.method_overrides.get(m, {}),
                             **{k: v for k, v in s["hparams"].items() if k in owned[m]}}
                    method_kernel = given.pop("kernel", None) if cls.uses_kernel else None
                    per_dataset = given.pop(PER_DATASET, {})
                    try:
                        hparams = resolve_hparams(cls, given)
                        train_episodes = task.train_episodes(s["train_episodes"], shape)
                    except (HyperParameterError, ZooError) as exc:
                        raise SuiteError(f"{suite.where}: {exc}") from None
                    if not task.supports(cls, hparams, shape):
                        log.info("suite %r: %s cannot run %s; left out", suite.name, m,
                                 task.label(shape))
                        continue
                    kernel = (dataset_kernel(per_dataset, train) or method_kernel
                              or s["kernel"] or cls.default_kernel if cls.uses_kernel else None)
                    for test in tests:
                        cells.append(Cell(
                            method=m, hparams=hparams, train_dataset=train, dataset=test,
                            backbone=s["backbone"] or cls.default_backbone, kernel=kernel,
                            seed=int(seed), train_episodes=train_episodes,
                            val_episodes=int(s["val_episodes"]), val_every=int(s["val_every"]),
                            test_episodes=int(s["test_episodes"]), task=task, shape=dict(shape),
                            checkpoint_every=int(s["checkpoint_every"]),
                            max_bad_steps=int(s["max_bad_steps"]),
                            max_skipped_fraction=float(s["max_skipped_fraction"]),
                            variant=str(s["variant"]),
                            provenance=registry.provenance("methods", m),
                            val_dataset=str(s["val_dataset"]),
                            lr_schedule=str(s["lr_schedule"])))
    return cells
