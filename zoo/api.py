"""The zoo from Python (a notebook, a script): run a suite, train and score one method, draw
episodes, read a results folder as a table.

Each function is a thin layer over the runner and does what the matching command does, with the
same results folder: :func:`bench` is ``zoo bench``, :func:`train_and_evaluate` a one-cell
``zoo bench``, :func:`load_results` reads what ``zoo report`` reads. Settings are given as Python
values (``{"ways": [5], "maml.inner_steps": 1}``), not as ``--set`` strings.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from zoo.errors import ZooError

log = logging.getLogger(__name__)


def toml_literal(value: Any) -> str:
    """``value`` written as the TOML literal that ``--set KEY=VALUE`` reads back as ``value``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_literal(v)}"
                               for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    raise ZooError(f"setting value {value!r} of type {type(value).__name__} cannot be given to a "
                   "suite; use a bool, int, float, string, list or dict")


def as_sets(settings: Mapping[str, Any] | None) -> list[str]:
    """``{"ways": [5], "maml.inner_steps": 1}`` as ``--set`` items (``["ways=[5]", ...]``)."""
    return [f"{key}={toml_literal(value)}" for key, value in (settings or {}).items()]


def bench(suite: str | Mapping[str, Any] = "quick", out: str | os.PathLike = "results/notebook",
              *, methods: Sequence[str] | None = None, settings: Mapping[str, Any] | None = None,
              device: str = "auto", workers: int = 1, executor: str = "local",
              address: str | None = None, data_dir: str | None = None, force: bool = False,
              progress: bool = False) -> Any:
    """Run a suite into the results folder ``out`` and return its table (:func:`load_results`):
    what ``zoo bench`` does (:func:`zoo.runner.run_suite`, which returns the run's outcome
    instead).

    :param suite: a registered suite's name (``zoo suites``), or a suite as a dict with the
        tables of a suite file (``{"suite": {...}, "methods": {...}}``).
    :param out: the results folder; run again with the same folder to resume (finished cells are
        skipped) or to add cells.
    :param methods: a subset of the suite's methods (``--methods``).
    :param settings: suite settings and hyper-parameters (``--set``): ``{"train_episodes": 50,
        "maml.inner_steps": 1}``.
    :param device: ``"auto"`` (CUDA when present), ``"cpu"`` or ``"cuda"``.
    :param workers: cells run at once (``--workers``).
    :param executor: ``"local"`` or ``"ray"``; ``address``: a Ray cluster's (``--address``).
    :param data_dir: where data files are (``--data-dir``).
    :param force: recompute the suite's cells (``--force``).
    :param progress: show progress bars.
    :raises ZooError: when a cell failed (after writing the report of the others): the message
        names each failed cell and its ``error.txt``; running again retries them.
    """
    from zoo.plugins import registry
    from zoo.runner.suite import suite_from_dict

    reg = registry()
    if isinstance(suite, Mapping):
        suite = suite_from_dict("notebook", suite, "the dict given to zoo.bench", registry=reg)
    return _run(suite, out, reg, methods=methods, settings=settings, device=device,
                workers=workers, executor=executor, address=address, data_dir=data_dir,
                force=force, progress=progress)


def _run(suite: Any, out: str | os.PathLike, reg: Any, *, methods: Sequence[str] | None = None,
         settings: Mapping[str, Any] | None = None, device: str = "auto", workers: int = 1,
         executor: str = "local", address: str | None = None, data_dir: str | None = None,
         force: bool = False, progress: bool = False) -> Any:
    """:func:`bench` of a suite's name or a parsed :class:`zoo.runner.Suite`, with the plugin
    registry ``reg``."""
    from zoo.plugins import task_kind
    from zoo.runner.bench import run_suite
    from zoo.runner.report import write_report

    outcome = run_suite(suite, out=Path(out), data_dir=data_dir, device=device, executor=executor,
                  address=address, workers=workers, methods=methods, sets=as_sets(settings),
                  force=force, progress=progress, registry=reg)
    if outcome.cells:
        write_report(Path(out), kinds=task_kind)
    if outcome.failed:
        raise ZooError(f"{len(outcome.failed)} cell(s) of {out} failed; run the same call again "
                       "to retry them:\n  " + "\n  ".join(
                           f"{o.label}: {o.error} ({out}/cells/{o.cell_hash}/error.txt)"
                           for o in outcome.failed))
    return load_results(out)


def train_and_evaluate(method: str, dataset: str = "glyphs", way: int = 5, shot: int = 1, *,
                       out: str | os.PathLike, test_datasets: Sequence[str] = (),
                       hparams: Mapping[str, Any] | None = None, seed: int = 0,
                       device: str = "auto", data_dir: str | None = None,
                       progress: bool = False, **settings: Any) -> Any:
    """Meta-train one classification method on ``dataset`` and score it on the test episodes of
    ``dataset`` (or of each of ``test_datasets``); return the table of those rows.

    This is a one-cell suite run by :func:`bench`: the results folder ``out`` is the same as
    ``zoo bench`` writes, so ``zoo report out`` reads it and a second call resumes.

    :param hparams: the method's hyper-parameters (``{"temperature": 5}``), checked against its
        declarations.
    :param settings: other suite settings (every key of a suite's ``[suite]`` table but
        ``task``, ``methods``, ``train_datasets``, ``test_datasets``, ``ways``, ``shots`` and
        ``seeds``, which the arguments give), e.g. ``train_episodes=200, test_episodes=100,
        val_every=50, backbone="conv4s", kernel="rbf[lengthscale=2]", query=10``.
    :raises ZooError: a setting or hyper-parameter that does not exist or is out of range,
        the message naming ``zoo.train_and_evaluate``.
    """
    from zoo.plugins import registry
    from zoo.runner.suite import suite_from_dict

    raw = {"suite": {"description": f"{method} on {dataset}, {way}-way {shot}-shot",
                     "task": "classification", "methods": [method],
                     "train_datasets": [dataset], "test_datasets": list(test_datasets),
                     "ways": [way], "shots": [shot], "seeds": [seed], **settings},
           "methods": {method: dict(hparams or {})}}
    reg = registry()
    suite = suite_from_dict("train_and_evaluate", raw,
                            f"zoo.train_and_evaluate({method!r}, {dataset!r})", registry=reg)
    return _run(suite, out, reg, device=device, data_dir=data_dir, progress=progress)


def episodes(dataset: str | Any, way: int = 5, shot: int = 1, query: int = 15, *,
             split: str = "test", seed: int = 0, data_dir: str | None = None) -> Any:
    """The episodes every method is scored on: an :class:`zoo.EpisodeSampler`, whose ``[i]`` is
    the i-th ``way``-way ``shot``-shot episode of ``split`` (the same tensors on every call and
    for every method) and which iterates over episodes without end.

    :param dataset: a registered data set (``zoo datasets``; options as ``"name[key=value]"``) or
        a loaded one.
    """
    from zoo.episode import EpisodeSampler
    from zoo.plugins import load_dataset
    from zoo.spec import parse_spec

    if isinstance(dataset, str):
        name, options = parse_spec(dataset)
        dataset = load_dataset(name, data_dir=data_dir, **options)
    return EpisodeSampler(dataset, split, way, shot, query, seed=seed)


def load_results(folder: str | os.PathLike, *, records: bool = False) -> Any:
    """A results folder's table, one row per method (or variant) and setting with the numbers of
    ``table.csv`` (seeds pooled): a pandas ``DataFrame`` when pandas is installed and
    ``records`` is false, else a list of dicts. A folder with no result to show (none finished,
    or all made by other code than is installed) raises a ``ZooError`` that says which.

    Reading results of the built-in task kinds imports neither torch nor the plugins (the task
    kinds do the summing up); a plugin's kind is taken from the process's plugin registry.
    """
    from zoo.plugins import task_kind
    from zoo.runner.collect import load_report

    report = load_report(Path(folder), task_kind)
    rows = report.rows()
    if not rows:
        # an empty table would only fail later, on its first column, without saying why
        from zoo.runner.collect import other_code_note
        why = other_code_note(report.other_code) if report.other_code else \
            "it holds no finished result yet (run a suite into it with zoo.bench or zoo bench)"
        raise ZooError(f"{folder}: no result to show: {why}")
    if records:
        return rows
    try:
        import pandas
    except ImportError:
        log.debug("pandas is not installed: load_results returns a list of dicts")
        return rows
    return pandas.DataFrame(rows)
