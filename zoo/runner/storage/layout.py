"""What a results folder may hold, and the read-only check of a folder against it.

::

    DIR/zoo-results.json        marks the folder as ours (format version)
    DIR/writer.lock, writer.json  the lock of the one process writing the folder, and who it is
    DIR/results.jsonl           one line per finished cell (the results contract)
    DIR/suites/<suite>.json     the resolved suite (settings, overrides, published references)
    DIR/train/<train-hash>/     config.json, checkpoint.pt, best.pt, model.pt, training.json, done
    DIR/cells/<cell-hash>/      config.json, env.json, model.pt, training.json, episodes.jsonl,
                                predictions.pt (a cell whose seeds make an ensemble),
                                result.json, done (written last) or error.txt
    DIR/report/                 tables (md, csv, json, tex) and figures
    DIR/experiments/<suite>/    what an ``entry`` suite writes
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from zoo.errors import ZooError
from zoo.runner.cells import config_hash
from zoo.runner.storage.jsonl import ResultsFolderError, read_json, read_jsonl

VERSION = 3
"""The results format. Version 2 names every cell by its whole resolved configuration (version 1
left some keys out where they had their default value), so a version-1 folder's hashes name no
cell of this zoo. Version 3 adds the zoo core's code to a cell's identity, the cell's hash to
each of its episode records and the digest of its records to its result (so a record file or a
result copied from another cell is recognised)."""
FORMAT = {"format": "zoo-results", "version": VERSION}
MARKER = "zoo-results.json"
LOCK, WRITER = "writer.lock", "writer.json"
TOP_LEVEL = {MARKER, LOCK, WRITER, "results.jsonl", "suites", "train", "cells", "report",
             "experiments"}
PREDICTIONS = "predictions.pt"
"""A cell's class probabilities of its test episodes, in the order they were asked for (kept by
a cell whose suite asks for an ensemble of its seeds; :mod:`zoo.runner.ensembles` reads them)."""
CELL_FILES = {"config.json", "env.json", "model.pt", "training.json", "episodes.jsonl",
              PREDICTIONS, "result.json", "done", "error.txt"}
TRAIN_FILES = {"config.json", "checkpoint.pt", "best.pt", "model.pt", "training.json", "done",
               "error.txt"}
RUN_KINDS = (("train", TRAIN_FILES), ("cells", CELL_FILES))
READ = ("config.json", "result.json", "training.json", "env.json", "episodes.jsonl")
"""The files of a run folder that are read, in the order a folder is checked."""
KEPT = {"cells": frozenset({"training.json", "episodes.jsonl"})}
"""The files whose content a reader keeps (the report's records); the rest are only checked."""
HASH_RE = re.compile(r"^[0-9a-f]{16}$")
TMP_RE = re.compile(r"^\..+\.[A-Za-z0-9_]+\.tmp$")  # zoo.io's temp files left by a kill
SHARED_PREFIX = ".zoo-shared-"
SHARED_RE = re.compile(r"^\.zoo-shared-[0-9a-f]{32}$")
"""The marker a Ray driver leaves in the folder while it runs (:mod:`zoo.runner.executors`):
made by the folder's writer, so one found when no writer holds the lock is stale (a killed
driver's), and the next writer removes it (:func:`zoo.runner.storage.lock.writer_lock`)."""


class OldResultsFolderError(ZooError):
    """A results folder written in an older format; nothing was changed."""


def is_older(root: Path) -> bool:
    """Whether ``root``'s marker names an older format than :data:`VERSION`."""
    try:
        content = read_json(root / MARKER)
    except ResultsFolderError:
        return False
    return (isinstance(content, dict) and content.get("format") == FORMAT["format"]
            and isinstance(content.get("version"), int) and content["version"] < VERSION)


def names(folder: str | os.PathLike) -> list[str]:
    """The sorted names in ``folder`` except zoo.io temp files left behind by a killed write
    and Ray drivers' markers (:data:`SHARED_RE`).
    A symbolic link is refused (:class:`ResultsFolderError`): a write through it would leave the
    results folder (and a cell linked in from elsewhere is not this folder's)."""
    found = []
    with os.scandir(folder) as listing:
        for entry in listing:
            if entry.name.startswith(".") and (TMP_RE.match(entry.name)
                                               or SHARED_RE.match(entry.name)):
                continue
            if entry.is_symlink():
                raise ResultsFolderError(Path(entry.path), _linked(entry.path))
            found.append(entry.name)
    return sorted(found)


def _linked(path: str) -> str:
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return (f"is a symbolic link{target}; a results folder holds only its own files and the "
            "zoo never writes through a link. Replace the link with a copy of what it points "
            "to, or remove it")


def entries(folder: Path) -> Iterator[Path]:
    """The paths of :func:`names` of ``folder`` (none if it is not a folder)."""
    if folder.is_dir():
        for name in names(folder):
            yield folder / name


def check_marker(root: Path) -> None:
    """Raise unless ``root``'s marker says the current format; an older format is named as such,
    with what to do."""
    marker = root / MARKER
    content = read_json(marker)
    if is_older(root):
        raise OldResultsFolderError(
            f"{root} is a results folder of format version {content['version']}, written by an "
            f"older zoo; this zoo writes version {VERSION}, which names cells by other hashes, so "
            "none of its cells can be reused or reported. Run the suite into a new folder "
            "(another --out), or add --force to delete its cells and run them again into this "
            "one; the zoo that wrote it still reports it")
    if content != FORMAT:
        raise ResultsFolderError(marker, f"unexpected content; expected {FORMAT}")


def check_top_level(root: Path) -> None:
    """Raise :class:`ResultsFolderError` for the first top-level entry that is not ours, or that
    is a symbolic link (there, or among the report's and experiments' files)."""
    for path in entries(root):
        if path.name not in TOP_LEVEL:
            raise ResultsFolderError(path, "is not part of a zoo results folder")
    for folder in ("report", "experiments"):
        for path, _dirs, _files in os.walk(root / folder):
            names(path)  # raises for a link among its files and folders (walk does not follow)


def check_suites(root: Path) -> None:
    """Raise :class:`ResultsFolderError` for the first suite record that is not one."""
    for path in entries(root / "suites"):
        if path.suffix != ".json" or not isinstance(read_json(path), dict):
            raise ResultsFolderError(path, "is not a suite record")


def check_runs(root: Path, keep: dict[tuple[str, str], Any] | None = None
               ) -> dict[str, dict[str, list[str]]]:
    """Check every run folder (trainings, then cells, each in name order): its name, that it holds
    only files the runner writes, and that each file of :data:`READ` is readable with a config
    matching the folder's hash. Raise :class:`ResultsFolderError` for the first problem; return
    the files of each run folder by kind and name. With ``keep``, the :data:`KEPT` records read
    go there by (run folder, file). A folder without its config.json (created, killed before the
    config was written) is harmless, and not read."""
    listing: dict[str, dict[str, list[str]]] = {}
    for kind, allowed in RUN_KINDS:
        folder = os.path.join(root, kind)
        files = listing[kind] = {}
        kept = KEPT.get(kind, frozenset()) if keep is not None else frozenset()
        for name in names(folder) if os.path.isdir(folder) else []:
            run = os.path.join(folder, name)
            if not HASH_RE.match(name) or not os.path.isdir(run):
                raise ResultsFolderError(Path(run), f"is not a {kind} directory (16 hex digits)")
            listed = files[name] = names(run)
            for file in listed:
                if file not in allowed:
                    raise ResultsFolderError(Path(run, file), "is not a file the runner writes")
            if "config.json" not in listed:
                continue
            if kind == "cells" and "done" in listed:
                for file in ("result.json", "episodes.jsonl"):
                    if file not in listed:
                        raise ResultsFolderError(
                            Path(run, file), "is missing, though the cell is marked done; delete "
                            "the cell's folder to compute the cell again")
            result = None
            for file in READ:
                if file not in listed:
                    continue
                path = os.path.join(run, file)  # strings, not paths: ~8,000 at 1,400 cells
                content = read_jsonl(path) if file.endswith(".jsonl") else read_json(path)
                if file == "config.json":
                    problem = _config_problem(content, name, kind)
                elif file == "result.json" and kind == "cells":
                    result, problem = content, _result_problem(content, name)
                elif file == "episodes.jsonl":
                    problem = _records_problem(content, name, path, result)
                else:
                    problem = None
                if problem is not None:
                    raise ResultsFolderError(Path(path), problem)
                if file in kept:
                    keep[(name, file)] = content  # type: ignore[index]
    return listing


def records_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of an ``episodes.jsonl`` as it is on the disk (its result records it)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _result_problem(result: Any, name: str) -> str | None:
    """What is wrong with the result.json of cell ``name`` (one copied from another cell), or None."""
    if not isinstance(result, dict) or not isinstance(result.get("config_hash"), str):
        return "is not a cell's result (no config_hash)"
    if result["config_hash"] != name:
        return (f"is the result of cell {result['config_hash']}, not of the cell it is in (copied "
                "from another cell?); delete this cell's folder to compute it again")
    return None


def _records_problem(records: list[dict[str, Any]], name: str, path: str,
                     result: dict[str, Any] | None) -> str | None:
    """What is wrong with the episode records of cell ``name``: a record of another cell (each
    names its cell), episodes out of order or missing (each has its index, from 0), or records
    other than those its result was computed from (their digest); None if nothing."""
    for number, record in enumerate(records, 1):
        if record.get("cell") != name:
            return (f"line {number} is a record of cell {record.get('cell')}, not of the cell it "
                    "is in (copied from another cell?); delete this cell's folder to compute it "
                    "again")
        if record.get("index") != number - 1:
            return (f"line {number} is the record of episode {record.get('index')}, not of episode "
                    f"{number - 1}; delete this cell's folder to compute it again")
    if result is not None and result.get("records_sha256") != records_digest(path):
        return ("is not the records the cell's result.json was computed from (changed since); "
                "delete this cell's folder to compute it again")
    return None


def _config_problem(config: Any, name: str, kind: str) -> str | None:
    """What is wrong with the config.json of run folder ``name``, or None."""
    if not isinstance(config, dict):
        return "is not a configuration object"
    missing = {"method", "hparams", "train_dataset", "seed"} - set(config)
    if missing:
        return f"is not a {kind} configuration (no {', '.join(sorted(missing))})"
    if config_hash(config) != name:
        return "does not match the hash its folder is named by (edited by hand?)"
    return None
