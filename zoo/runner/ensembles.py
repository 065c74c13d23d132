"""Ensembles of a cell's trained seeds, scored without retraining (suite setting ``ensemble``).

The cells of a suite whose shape asks for an ensemble of ``M`` are grouped by everything but
their seed; the first ``M`` seeds of a group (in order) are the members. The ensemble (the
average of the members' class probabilities, :class:`zoo.ensemble.Ensemble`) is scored on each
member's own test episodes, as a cell of its own: the member's configuration with the variant
``"ensemble of seeds A,B,C"`` (its own row in the report, the members named) and the members in
its shape. So the report's paired differences between the ensemble's row and the method's are
taken on the same episodes, seed by seed: the ensemble against each member on that member's
episodes. Its temperature is fitted on validation episodes of that seed, as a member's is; its
training time is the members' summed. An ensemble row's "seeds" are the members whose test
episodes it was scored on (one model, several sets of episodes). Members that are not all
finished leave their ensemble out, with a log line.

Each pass over episodes (validation, test) is made member by member (:func:`by_member`): every
member predicts as in a pass of its own, from the same seed, and the ensemble averages what they
predicted. So the member whose episodes they are gives the predictions its own cell made, which
that cell kept (``predictions.pt``) and the ensemble takes instead of asking again: the same
numbers, a third less prediction work for three members. An ensemble's time per episode is its
members' (the kept ones as measured in their cell) and the average's. An interrupted ensemble
cell is scored again from its first episode.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from zoo.ensemble import Ensemble, Recorded, Replayed
from zoo.io import atomic_write_json, atomic_write_text, json_line, sync_to_disk, write_marker
from zoo.runner.cell import DatasetCache, Outcome, _describe, _first_line, result_line
from zoo.runner.cells import Cell, config_hash
from zoo.runner.evaluate import evaluate
from zoo.runner.provenance import environment
from zoo.runner.storage import PREDICTIONS, Results, write_jsonl
from zoo.runner.train import TrainedModel, has_split, train_model, validate
from zoo.seeds import seed_everything

if TYPE_CHECKING:
    from zoo.plugins import Registry

log = logging.getLogger(__name__)


def ensemble_groups(cells: Sequence[Cell]) -> list[list[Cell]]:
    """The members of each ensemble the cells ask for: per group of cells equal but for the
    seed and whose shape has ``ensemble = M``, the cells of its first ``M`` seeds."""
    groups: dict[str, list[Cell]] = defaultdict(list)
    for cell in cells:
        if cell.shape.get("ensemble"):
            groups[config_hash({k: v for k, v in cell.config().items() if k != "seed"})].append(cell)
    out = []
    for group in groups.values():
        size = int(group[0].shape["ensemble"])
        members = sorted(group, key=lambda c: c.seed)[:size]
        if len(members) == size:
            out.append(members)
    return out


def ensemble_cell(members: Sequence[Cell], seed: int) -> Cell:
    """The cell of the ensemble of ``members`` scored on the test episodes of ``seed``."""
    seeds = [m.seed for m in members]
    base = next(m for m in members if m.seed == seed)
    label = f"ensemble of seeds {','.join(map(str, seeds))}"
    return replace(base, variant=f"{base.variant} {label}".strip(),
                   shape={**base.shape, "members": seeds})


def ensemble_units(groups: Sequence[Sequence[Cell]]) -> list[list[Cell]]:
    """One unit of work per ensemble cell, for the executor to run in parallel: the members of
    its group, the member whose test episodes it is scored on first (then the others in seed
    order)."""
    return [[m, *(o for o in group if o is not m)] for group in groups for m in group]


def unit_ensemble(unit: Sequence[Cell]) -> Cell:
    """The ensemble cell a unit of :func:`ensemble_units` scores."""
    return ensemble_cell(sorted(unit, key=lambda c: c.seed), unit[0].seed)


def run_ensemble_units(units: Sequence[Sequence[Cell]], root: Path, data_dir: str | None,
                       device: str, threads: int = 0, progress: bool = False,
                       datasets: DatasetCache | None = None, *, registry: Registry
                       ) -> list[Outcome]:
    """Score the ensemble cell of each unit of :func:`ensemble_units` not yet done (the
    executor's work, as :func:`zoo.runner.cell.run_units` is for trainings); their ``done``
    markers are written after one flush to the disk."""
    if threads > 0:
        torch.set_num_threads(threads)
    results = Results(root)
    datasets = datasets or DatasetCache(data_dir, device, registry)
    env = environment(device, registry)
    env_text = json.dumps(env, indent=2, sort_keys=True, default=str) + "\n"
    outcomes: list[Outcome] = []
    for unit in units:
        members, cell = sorted(unit, key=lambda c: c.seed), unit_ensemble(unit)
        if results.is_done(cell.hash):
            continue
        unfinished = [m.label for m in members if not results.is_done(m.hash)]
        if unfinished:
            log.warning("%s left out: member cell(s) %s did not finish", cell.label,
                        ", ".join(unfinished))
            continue
        _start(cell, results, env_text)
        try:
            trainings = _load(members, results, datasets, device, registry)
            result = _score(cell, members, trainings, results, datasets, env, device, progress)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # a member's model that cannot be loaded fails its ensemble
            message = _describe(exc)
            atomic_write_text(results.cell_dir(cell.hash) / "error.txt", message)
            outcomes.append(Outcome(cell.hash, cell.label, error=_first_line(message)))
        else:
            outcomes.append(Outcome(cell.hash, cell.label, result=result))
    done = [o for o in outcomes if o.result is not None]
    if done:
        sync_to_disk(results.root)
        for o in done:
            write_marker(results.cell_dir(o.cell_hash) / "done")
    return outcomes


def _start(cell: Cell, results: Results, env_text: str) -> None:
    folder = results.cell_dir(cell.hash)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / "config.json", cell.config())
    atomic_write_text(folder / "env.json", env_text)


def _load(members: Sequence[Cell], results: Results, datasets: DatasetCache, device: str,
          registry: Any) -> list[TrainedModel]:
    trainings = []
    for cell in members:
        train_data, val_data = datasets.training_data(cell)
        trainings.append(train_model(cell, results.train_dir(cell.train_hash), train_data, device,
                                     registry, val_data=val_data))
    return trainings


def by_member(models: Sequence[torch.nn.Module], run: Callable[[torch.nn.Module], Any],
              given: Mapping[int, Sequence[torch.Tensor]] | None = None) -> tuple[Any, list[Any]]:
    """``run`` (a pass over episodes that seeds the RNG first) for each of ``models`` in turn,
    its predictions recorded (or, for the index of a member in ``given``, the probabilities it
    already gave in that pass), then for the ensemble of the recorded members. So each member's
    predictions are those of its own pass, whatever the others draw from the RNG, and those
    ``given`` are the same numbers. Returns the ensemble's pass and each member's (``None`` for
    those given)."""
    given = given or {}
    probs, passes = [], []
    for j, model in enumerate(models):
        if j in given:
            probs.append(given[j])
            passes.append(None)
            continue
        recorded = Recorded(model)
        passes.append(run(recorded))
        probs.append(recorded.probs)
    replayed = [Replayed(p, f"member {j} of the ensemble") for j, p in enumerate(probs)]
    out = run(Ensemble(replayed))
    for member in replayed:
        member.finished()
    return out, passes


def _given(members: Sequence[Cell], seed: int, results: Results, device: str
           ) -> tuple[dict[int, list[torch.Tensor]], dict[int, list[dict[str, Any]]]]:
    """The test predictions (and records) a member's own cell kept on the episodes of ``seed``
    (its own), by the member's index; none where its cell did not keep them."""
    for j, member in enumerate(members):
        path = results.cell_dir(member.hash) / PREDICTIONS
        if member.seed == seed and path.exists():
            probs = torch.load(path, map_location=device, weights_only=True)["probs"]
            return {j: probs}, {j: results.episodes(member.hash)}
    return {}, {}


def _score(cell: Cell, members: Sequence[Cell], trainings: Sequence[TrainedModel],
           results: Results, datasets: DatasetCache, env: dict[str, Any], device: str,
           progress: bool) -> dict[str, Any]:
    task = cell.task
    train_data, val_data = datasets.training_data(cell)
    test_data = datasets.get(cell.dataset)
    task.check_data(test_data, cell.dataset)
    task.check_compatible(train_data, test_data, cell.method)
    auxiliary = datasets.auxiliary(cell)
    val_data = val_data if val_data is not None else train_data
    models = [t.method.eval() for t in trainings]
    selection, temperature = None, 1.0  # nothing to validate on: the members' probabilities
    if has_split(val_data, "val") and cell.val_episodes > 0:
        def val_pass(method: torch.nn.Module) -> tuple[float, dict[str, Any]]:
            seed_everything(cell.seed)
            with torch.no_grad():
                return validate(method, cell, val_data)

        (selection, payload), _ = by_member(models, val_pass)
        temperature = task.calibrate(payload | {"what": cell.label})
    folder = results.cell_dir(cell.hash)
    path = folder / "episodes.jsonl"
    path.unlink(missing_ok=True)  # scored in one pass: the members' passes are not resumed

    def test_pass(method: torch.nn.Module) -> list[dict[str, Any]]:
        ensemble = isinstance(method, Ensemble)
        seed_everything(cell.seed)
        return evaluate(task, method, cell.method, test_data, shape=cell.shape, seed=cell.seed,
                        count=cell.test_episodes, temperature=temperature,
                        records_path=path if ensemble else None, progress=progress,
                        label=cell.label, cell=cell.hash if ensemble else "",
                        auxiliary=auxiliary)

    given, given_records = _given(members, cell.seed, results, device)
    records, passes = by_member(models, test_pass, given)
    member_records = [given_records.get(j, p) for j, p in enumerate(passes)]
    for i, record in enumerate(records):  # its time: the members' predictions and the average
        record["seconds"] += sum(m[i]["seconds"] for m in member_records)
    write_jsonl(path, [json_line(r) for r in records])
    ensemble = Ensemble(models)
    info = {"train_seconds": sum(t.info["train_seconds"] for t in trainings),
            "val_seconds": sum(t.info.get("val_seconds") or 0.0 for t in trainings),
            task.selection_key: selection, "selection": "ensemble of the members' selected models",
            "skipped_steps": sum(t.info["skipped_steps"] for t in trainings),
            "training_steps": sum(t.info.get("training_steps") or 0 for t in trainings)}
    result = result_line(cell, folder, records, TrainedModel(ensemble, temperature, info), env)
    result["members"] = list(cell.shape["members"])
    atomic_write_json(folder / "result.json", result)
    (folder / "error.txt").unlink(missing_ok=True)
    return result
