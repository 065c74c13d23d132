"""One unit of work: the cells that share a training (one model, several test data sets); and a
group of units run one after another with one flush to the disk for all of them.

The unit trains (or resumes, or loads) the model once, then scores each pending cell and writes
its folder. The ``done`` markers of a group's trainings and cells are written last, after one
flush of the group's files to the disk (:func:`zoo.io.sync_to_disk`): a flush costs about as much
as a small cell's work, so a suite of many small cells groups its units
(:mod:`zoo.runner.executors`). An
exception in a cell becomes its ``error.txt`` (the cell is shown as failed and retried on the
next run); it never becomes a result.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from zoo.ensemble import Recorded
from zoo.errors import ZooError
from zoo.io import atomic_save, atomic_write_json, atomic_write_text, sync_to_disk, write_marker
from zoo.runner.cells import Cell
from zoo.runner.evaluate import evaluate
from zoo.runner.provenance import environment
from zoo.runner.storage import PREDICTIONS, Results, link_or_copy, records_digest
from zoo.runner.train import train_model
from zoo.seeds import seed_everything
from zoo.spec import parse_spec

if TYPE_CHECKING:
    from zoo.plugins import Registry

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What happened to one cell: ``result`` (its results line) or ``error`` (a message)."""

    cell_hash: str
    label: str
    result: dict[str, Any] | None = None
    error: str | None = None


class DatasetCache:
    """Data sets loaded once per process and moved to the device once."""

    def __init__(self, data_dir: str | None, device: str, registry: Registry):
        self.data_dir, self.device, self.registry = data_dir, device, registry
        self._loaded: dict[str, Any] = {}

    def get(self, name: str, download: bool = True) -> Any:
        if name not in self._loaded:
            base, options = parse_spec(name)
            factory = self.registry.get("datasets", base)
            try:
                dataset = factory(data_dir=self.data_dir, download=download, **options)
            except TypeError as exc:
                raise ZooError(f"data set {name!r}: {exc}; see `zoo datasets` for its "
                               "factory's options") from exc
            self._loaded[name] = dataset.to(self.device)
        return self._loaded[name]

    def auxiliary(self, cell: Cell) -> dict[str, Any]:
        """The data sets the cell's test episodes also draw on, by name (each checked as data of
        the cell's kind)."""
        out = {}
        for name in cell.task.auxiliary_datasets(cell.shape):
            out[name] = self.get(name)
            cell.task.check_data(out[name], name)
        return out

    def training_data(self, cell: Cell) -> tuple[Any, Any]:
        """The data sets that train ``cell``: its training set and, when the cell names a
        ``val_dataset``, that set (checked compatible), else ``None`` (validate on the training
        set's own validation split)."""
        train_data = self.get(cell.train_dataset)
        cell.task.check_data(train_data, cell.train_dataset)
        if not cell.val_dataset:
            return train_data, None
        val_data = self.get(cell.val_dataset)
        cell.task.check_data(val_data, cell.val_dataset)
        cell.task.check_compatible(train_data, val_data, cell.method)
        return train_data, val_data


def run_unit(cells: Sequence[Cell], root: Path, data_dir: str | None, device: str,
             threads: int = 0, progress: bool = False,
             datasets: DatasetCache | None = None, *, registry: Registry) -> list[Outcome]:
    """Train the shared model of ``cells`` and score every cell not yet done. ``registry``: the
    plugin registry (a worker process loads its own)."""
    return run_units([cells], root, data_dir, device, threads, progress, datasets,
                     registry=registry)


def run_units(units: Sequence[Sequence[Cell]], root: Path, data_dir: str | None, device: str,
              threads: int = 0, progress: bool = False,
              datasets: DatasetCache | None = None, *, registry: Registry) -> list[Outcome]:
    """:func:`run_unit` for each of ``units`` in turn, then one flush of the results folder to
    the disk and the ``done`` markers of every training and cell that finished."""
    if threads > 0:
        torch.set_num_threads(threads)
    if device.startswith("cuda"):
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    results = Results(root)
    datasets = datasets or DatasetCache(data_dir, device, registry)
    env = environment(device, registry)
    env_text = json.dumps(env, indent=2, sort_keys=True, default=str) + "\n"
    markers: list[Path] = []  # `done` files, written after the flush
    outcomes = [o for cells in units for o in _run_one(cells, results, datasets, device, env,
                                                       env_text, progress, registry, markers)]
    if markers:  # the group's files on the disk, then their `done` markers: one flush a group
        sync_to_disk(root)
        for path in markers:
            write_marker(path)
    return outcomes


def _run_one(cells: Sequence[Cell], results: Results, datasets: DatasetCache, device: str,
             env: dict[str, Any], env_text: str, progress: bool, registry: Any,
             markers: list[Path]) -> list[Outcome]:
    """One unit; the paths of the ``done`` markers it earned are appended to ``markers``."""
    pending = [c for c in cells if not results.is_done(c.hash)]
    if not pending:
        return []
    for cell in pending:
        folder = results.cell_dir(cell.hash)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(folder / "config.json", cell.config())
        atomic_write_text(folder / "env.json", env_text)
    first = pending[0]
    train_dir = results.train_dir(first.train_hash)
    try:
        seed_everything(first.seed)
        train_data, val_data = datasets.training_data(first)
        trained = train_model(first, train_dir, train_data, device, registry, progress,
                              val_data=val_data, markers=markers)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        message = _describe(exc)
        if train_dir.exists():
            atomic_write_text(train_dir / "error.txt", message)
        for cell in pending:
            atomic_write_text(results.cell_dir(cell.hash) / "error.txt", message)
        return [Outcome(c.hash, c.label, error=_first_line(message)) for c in pending]

    outcomes = []
    for cell in pending:
        folder = results.cell_dir(cell.hash)
        try:
            result = _score(cell, folder, trained, train_data, datasets, device, env, progress,
                            train_dir)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:
            message = _describe(exc)
            atomic_write_text(folder / "error.txt", message)
            outcomes.append(Outcome(cell.hash, cell.label, error=_first_line(message)))
        else:
            outcomes.append(Outcome(cell.hash, cell.label, result=result))
    markers += [results.cell_dir(o.cell_hash) / "done" for o in outcomes if o.result is not None]
    return outcomes


def _score(cell: Cell, folder: Path, trained: Any, train_data: Any,
           datasets: DatasetCache, device: str, env: dict[str, Any], progress: bool,
           train_dir: Path) -> dict[str, Any]:
    task = cell.task
    test_data = datasets.get(cell.dataset)
    task.check_data(test_data, cell.dataset)
    task.check_compatible(train_data, test_data, cell.method)
    # a cell whose seeds make an ensemble keeps its predictions (when made in one pass): the
    # ensemble scored on these episodes takes them instead of asking this model again
    recorded = (Recorded(trained.method) if cell.shape.get("ensemble")
                and not (folder / "episodes.jsonl").exists() else None)
    (folder / PREDICTIONS).unlink(missing_ok=True)  # a resumed pass's would be partial
    seed_everything(cell.seed)
    records = evaluate(task, recorded or trained.method, cell.method, test_data,
                       shape=cell.shape, seed=cell.seed, count=cell.test_episodes,
                       temperature=trained.temperature, records_path=folder / "episodes.jsonl",
                       progress=progress, label=cell.label, cell=cell.hash,
                       auxiliary=datasets.auxiliary(cell))
    if recorded is not None:
        atomic_save({"probs": [p.cpu() for p in recorded.probs]}, folder / PREDICTIONS)
    result = result_line(cell, folder, records, trained, env) | objective_names(trained.method)
    link_or_copy(train_dir / "model.pt", folder / "model.pt")
    link_or_copy(train_dir / "training.json", folder / "training.json")
    atomic_write_json(folder / "result.json", result)
    (folder / "error.txt").unlink(missing_ok=True)
    return result


def result_line(cell: Cell, folder: Path, records: list[dict[str, Any]], trained: Any,
                env: dict[str, Any]) -> dict[str, Any]:
    """A scored cell's line of ``results.jsonl``: what it is, the task kind's summary of its
    records (written in ``folder``), and how its model was trained (``trained.info``), with the
    environment."""
    task, info = cell.task, trained.info
    result = {
        "method": cell.method, "task": task.name, "dataset": cell.dataset,
        "train_dataset": cell.train_dataset, "backbone": cell.backbone, "kernel": cell.kernel,
        **cell.shape, "seed": cell.seed, "train_episodes": cell.train_episodes,
        **task.summarise(records), "temperature": trained.temperature,
        "train_seconds": info["train_seconds"], "val_seconds": info.get("val_seconds"),
        task.selection_key: info[task.selection_key],
        "selection": info["selection"], "skipped_steps": info["skipped_steps"],
        "training_steps": info.get("training_steps"),
        "counters": trained.method.counters(), "hparams": dict(trained.method.hparams),
        "device": env["device"], "threads": env["threads"], "versions": env["versions"],
        "git_commit": env["git_commit"], "config_hash": cell.hash, "config": cell.config(),
        "provenance": cell.provenance,
        "records_sha256": records_digest(folder / "episodes.jsonl"),
    }
    if cell.variant:
        result["variant"] = cell.variant
    return result


def objective_names(method: Any) -> dict[str, Any]:
    """What the method's meta-loss and inner objective are, where it names them (the report
    draws differently named losses on separate axes, each objective with its direction)."""
    out: dict[str, Any] = {}
    if getattr(method, "meta_loss_name", ""):
        out["meta_loss_name"] = method.meta_loss_name
    if getattr(method, "inner_objective_name", ""):
        out["inner_objective_name"] = method.inner_objective_name
        out["inner_objective_better"] = method.inner_objective_better
    return out


def _describe(exc: BaseException) -> str:
    head = str(exc) if isinstance(exc, ZooError) else f"{type(exc).__name__}: {exc}"
    return head + "\n\n" + "".join(traceback.format_exception(exc))


def _first_line(message: str) -> str:
    return message.splitlines()[0] if message else "unknown error"
