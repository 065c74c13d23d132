"""Running a whole suite into a results folder: check what it needs, skip finished cells, run the
rest on an executor, record each finished cell's line, and write the report."""

from __future__ import annotations

import json
import logging
import pkgutil
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from zoo.errors import UnknownNameError, ZooError
from zoo.runner.cell import DatasetCache, Outcome
from zoo.runner.cells import Cell, expand_cells
from zoo.runner.ensembles import (
    ensemble_groups,
    ensemble_units,
    run_ensemble_units,
    unit_ensemble,
)
from zoo.runner.executors import DEFAULT_THREADS, LocalExecutor, RayExecutor
from zoo.runner.provenance import SHORT, other_code
from zoo.runner.storage import Results
from zoo.runner.suite import (
    Suite,
    SuiteError,
    apply_overrides,
    is_setting,
    load_suite,
    missing_methods,
    select_methods,
)
from zoo.spec import parse_spec

if TYPE_CHECKING:
    from zoo.plugins import Registry

log = logging.getLogger(__name__)


class MissingRequirementsError(ZooError):
    """What a suite needs that is not here (data, a GPU), all of it in one message."""


@dataclass
class BenchOutcome:
    root: Path
    cells: list[Cell] = field(default_factory=list)
    skipped: int = 0
    finished: list[Outcome] = field(default_factory=list)
    failed: list[Outcome] = field(default_factory=list)


def resolve_device(device: str, remote: bool = False) -> str:
    """``auto`` -> cuda or cpu (as this machine has); an unusable choice is an error. ``remote``:
    cells run on the nodes of a Ray cluster, whose GPUs the Ray executor checks instead."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available() and not remote:
        raise ZooError(f"--device {device}: no CUDA device is available here; use --device cpu")
    if device != "cpu" and not device.startswith("cuda"):
        raise ZooError(f"--device {device!r}: choose auto, cpu or cuda")
    return device


def prepare_suite(name: str | Suite, sets: Sequence[str] = (), only: Sequence[str] | None = None,
                  *, registry: Registry) -> tuple[Suite, list[str]]:
    """The suite (a registered name, or a :class:`Suite`) with ``--set`` applied and the methods
    it will run."""
    suite = name if isinstance(name, Suite) else load_suite(name, registry)
    name = suite.name
    setting_sets = [s for s in sets if is_setting(suite, s)]
    suite = apply_overrides(suite, setting_sets, [], registry)
    methods = [] if suite.settings["entry"] else select_methods(suite, only, registry=registry)
    missing = {} if suite.settings["entry"] or only else missing_methods(suite, registry)
    if missing:
        by_distribution: dict[str, list[str]] = defaultdict(list)
        for method, distribution in missing.items():
            by_distribution[distribution].append(method)
        log.warning("suite %s: skipping methods that are not installed: %s", name, "; ".join(
            f"{', '.join(ms)} (pip install {d})" for d, ms in sorted(by_distribution.items())))
    suite = apply_overrides(suite, [s for s in sets if s not in setting_sets], methods, registry)
    if not suite.settings["entry"] and not methods:
        raise SuiteError(f"{suite.where} selects no installed method; install a method plugin "
                         "(zoo methods lists the installed ones)")
    return suite, methods


def check_requirements(suite: Suite, device: str, data_dir: str | None,
                       datasets: DatasetCache) -> None:
    """Load every data set the suite names and check the device and that each data set is of the
    suite's task kind; report everything missing."""
    missing = []
    parts = suite.part_settings()
    if any("cuda" in s["requires"] for s in parts) and not device.startswith("cuda"):
        missing.append("a CUDA GPU (this suite is sized for one; run it on a GPU machine with "
                       "--device cuda)" if not torch.cuda.is_available() else
                       "--device cuda (a GPU is here, but --device selects the CPU)")
    names = dict.fromkeys(n for s in parts for n in [*s["train_datasets"], *s["test_datasets"]])
    known = datasets.registry.names("datasets")
    task = datasets.registry.get("tasks", suite.settings["task"])
    for name in names:
        base, _ = parse_spec(name)
        if base not in known:
            missing.append(f"data set {base!r} is not registered (install the plugin that "
                           f"provides it); registered: {', '.join(known)}")
            continue
        try:  # no download for a suite that cannot run here anyway
            task.check_data(datasets.get(name, download=not missing), name)
        except ZooError as exc:
            missing.append(f"data set {name!r}: {exc}")
    if missing:
        where = f" (--data-dir {data_dir})" if data_dir else ""
        raise MissingRequirementsError(f"suite {suite.name!r} cannot start{where}; missing:\n  - "
                                       + "\n  - ".join(missing))


def check_cells_build(cells: Sequence[Cell], datasets: DatasetCache) -> None:
    """Build the model of every training of ``cells`` once (on the CPU, its RNG left as it was),
    so that an unknown or impossible backbone, kernel or estimator, or an option one of them
    refuses, stops the suite before its first cell, naming the cell, instead of failing inside
    each cell after others ran. Trainings that differ only in their seed build alike: one each."""
    from zoo.runner.train import build_for_cell

    built: set[str] = set()
    for cell in cells:
        key = json.dumps({k: v for k, v in cell.train_config().items() if k != "seed"},
                         sort_keys=True, default=str)
        if key in built:
            continue
        built.add(key)
        try:
            build_for_cell(cell, datasets.get(cell.train_dataset), "cpu", datasets.registry)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:
            what = str(exc) if isinstance(exc, ZooError) else f"{type(exc).__name__}: {exc}"
            parts = [f"backbone {cell.backbone!r}" if cell.backbone else "",
                     f"kernel {cell.kernel!r}" if cell.kernel else ""]
            raise SuiteError(f"cell {cell.label} cannot be built "
                             f"({', '.join(filter(None, parts)) or 'its hyper-parameters'}): "
                             f"{what}; no cell was run. Fix the setting (zoo plugins -v lists "
                             "every registered name, zoo methods --json the hyper-parameters)"
                             ) from None


def check_cells_episodes(cells: Sequence[Cell], datasets: DatasetCache) -> None:
    """Make every cell's episode getters (training, validation and test) without drawing an
    episode, so that a shape a split cannot give (a 30-way cell on a 10-class test set) stops the
    suite before its first cell, naming every such cell, instead of failing after its training."""
    from zoo.runner.train import has_split

    problems, seen = [], set()
    for cell in cells:
        key = json.dumps([cell.train_dataset, cell.val_dataset, cell.dataset, cell.shape],
                         sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        task = cell.task
        try:
            train_data, val_data = datasets.training_data(cell)
            val_data = train_data if val_data is None else val_data
            if cell.train_episodes > 0:
                task.episodes(train_data, "train", cell.shape, cell.seed, training=True)
                if cell.val_episodes > 0 and has_split(val_data, "val"):
                    task.episodes(val_data, "val", cell.shape, cell.seed, training=False)
            test_data = datasets.get(cell.dataset)
            task.check_data(test_data, cell.dataset)
            task.check_compatible(train_data, test_data, cell.method)
            task.test_episodes(test_data, cell.shape, cell.seed, cell.test_episodes,
                               datasets.auxiliary(cell))
        except ZooError as exc:
            problems.append(f"{cell.label}: {exc}")
    if problems:
        raise SuiteError(f"{len(problems)} cell(s) cannot draw their episodes; no cell was run. "
                         "Change the setting named below (--set) or the cell's data set:\n  - "
                         + "\n  - ".join(problems))


def run_entry(suite: Suite, out: Path, data_dir: str | None, device: str) -> Path:
    """A suite that runs a plugin-provided experiment function instead of cells."""
    spec = suite.settings["entry"]
    try:
        function = pkgutil.resolve_name(spec)  # "module:function"
    except (ImportError, AttributeError, ValueError) as exc:
        raise SuiteError(f"suite {suite.name!r}: entry {spec!r} cannot be loaded ({exc}); is the "
                         "plugin that provides it installed?") from exc
    results = Results.open(out)
    with results.writer():
        results.save_suite(suite.to_json())
        target = out / "experiments" / suite.name
        target.mkdir(parents=True, exist_ok=True)
        function(target, data_dir, device, dict(suite.entry_settings))
    return target


def _code(result: dict[str, Any]) -> str:
    """What code made ``result``, and why it is not the code installed now."""
    p = result["config"].get("provenance") or {}
    made = (f"{p.get('distribution')} {p.get('version')}, code {str(p.get('digest'))[:SHORT]}"
            if p else "code of unknown provenance")
    return f"{made}: {other_code(p) or 'recorded otherwise than the installed code'}"


def run_suite(name: str | Suite = "quick", *, out: Path, data_dir: str | None = None,
              device: str = "auto", executor: str = "local", address: str | None = None,
              workers: int = 1, methods: Sequence[str] | None = None, sets: Sequence[str] = (),
              force: bool = False, progress: bool = True, registry: Registry | None = None,
              threads: int | str = DEFAULT_THREADS,
              tensorboard: Path | None = None) -> BenchOutcome:
    """Run suite ``name`` into ``out``; finished cells are skipped, unfinished ones resumed.
    ``threads``: intra-op threads per unit (``"auto"``: the cores shared among ``workers``), which
    each result records. ``tensorboard``: a folder to write each training's curve into
    (:mod:`zoo.runner.tensorboard`). ``registry``: the plugin registry (default: this
    process's, :func:`zoo.plugins.registry`: this is the bench entry, with the command line and
    :mod:`zoo.testing` the only code that fetches it)."""
    if executor not in ("local", "ray"):
        raise UnknownNameError("executor", executor, ["local", "ray"])
    if registry is None:
        from zoo.plugins import registry as process_registry

        registry = process_registry()
    device = resolve_device(device, remote=executor == "ray" and address is not None)
    if tensorboard is not None:
        from zoo.runner import tensorboard as board

        board.check_available()
    suite, method_names = prepare_suite(name, sets, methods, registry=registry)
    if suite.settings["entry"]:
        run_entry(suite, out, data_dir, device)
        return BenchOutcome(out)
    cells = expand_cells(suite, method_names, registry)
    # Ray tasks load their own data sets: the driver checks them on the CPU
    datasets = DatasetCache(data_dir, "cpu" if executor == "ray" else device, registry)
    check_requirements(suite, device, data_dir, datasets)
    if not cells:
        raise SuiteError(f"{suite.where} gives no cell to run for {', '.join(method_names)} "
                         "(no method supports its shapes, or a list setting is empty)")
    check_cells_build(cells, datasets)
    check_cells_episodes(cells, datasets)
    results = Results.open(out, replace_older=force)
    with results.writer():
        results.sync_results()
        stale = results.superseded(c.config() for c in cells)
        if force:
            for cell in cells:
                results.remove_cell(cell.hash, cell.train_hash)
            for r in stale:
                old = Cell.from_config(r["config"], registry.get("tasks", r.get("task", "classification")))
                results.remove_cell(r["config_hash"], old.train_hash)
        elif stale:
            made_by = sorted({f"{r['method']} ({_code(r)})" for r in stale})
            log.warning("%s: %d finished cell(s) of suite %s were made by other code than is "
                        "installed now: %s. They are not reused (their cells run again) and the "
                        "report shows only the results of the installed code; rerun with --force "
                        "to delete the old ones.", out, len(stale), suite.name, "; ".join(made_by))
        results.save_suite(suite.to_json())
        outcome = BenchOutcome(out, cells)
        todo = [c for c in cells if not results.is_done(c.hash)]
        outcome.skipped = len(cells) - len(todo)
        units: dict[str, list[Cell]] = defaultdict(list)
        for cell in todo:
            units[cell.train_hash].append(cell)
        log.info("suite %s: %d cells (%d done before), %d trainings, %s, device %s, into %s",
                 suite.name, len(cells), outcome.skipped, len(units), executor, device, out)
        bar = tqdm(total=len(cells), initial=outcome.skipped, desc=f"suite {suite.name}", unit="cell",
                   disable=not progress, file=sys.stderr)
        started = time.perf_counter()

        by_hash = {c.hash: c for c in cells}
        boarded: set[str] = set()

        def on_done(unit_outcomes: list[Outcome]) -> None:
            for o in unit_outcomes:
                if o.result is not None:
                    results.add_result(o.result)
                    cell = by_hash[o.cell_hash]
                    if tensorboard is not None and cell.train_hash not in boarded:
                        boarded.add(cell.train_hash)
                        board.write_training(tensorboard, f"{cell.method}/{cell.train_hash[:12]}",
                                             results.cell_dir(o.cell_hash) / "training.json")
                    outcome.finished.append(o)
                    task = registry.get("tasks", o.result.get("task", "classification"))
                    line = f"done   {o.label}: {task.view.done_line(o.result)}"
                else:
                    outcome.failed.append(o)
                    line = f"FAILED {o.label}: {o.error} (cells/{o.cell_hash}/error.txt)"
                bar.update(1)
                tqdm.write(line, file=sys.stderr)

        if executor == "ray":
            runner: Any = RayExecutor(out, data_dir, device, workers, address, threads)
        else:
            runner = LocalExecutor(out, data_dir, device, workers, progress, datasets, threads,
                                   registry=registry)
        try:
            runner.run(list(units.values()), on_done)
            groups = ensemble_groups(cells)
            if groups:  # after every member, as units of their own (in parallel, like trainings)
                pending = []
                for unit in ensemble_units(groups):
                    cell = unit_ensemble(unit)
                    by_hash[cell.hash] = cell
                    if results.is_done(cell.hash):
                        outcome.skipped += 1
                    else:
                        pending.append(unit)
                bar.total += len(pending)
                bar.refresh()
                runner.run(pending, on_done, work=run_ensemble_units)
        finally:
            bar.close()
        log.info("suite %s: %d cells finished, %d failed, %d skipped in %.0f s", suite.name,
                 len(outcome.finished), len(outcome.failed), outcome.skipped,
                 time.perf_counter() - started)
    return outcome
