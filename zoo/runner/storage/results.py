"""A results folder (:mod:`zoo.runner.storage.layout`): opened only after a read-only check, then
its cells' and trainings' paths and states, and its ``results.jsonl``. Every write goes through
:mod:`zoo.io` (temp file + rename) or, for a results line, one append."""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from zoo.errors import ZooError
from zoo.io import atomic_write_json, atomic_write_text, before_write
from zoo.runner.cells import code_free_hash, config_hash
from zoo.runner.storage.jsonl import (
    ResultsFolderError,
    append_line,
    read_appended,
    read_json,
    read_jsonl,
)
from zoo.runner.storage.layout import (
    FORMAT,
    LOCK,
    MARKER,
    WRITER,
    check_marker,
    check_runs,
    check_suites,
    check_top_level,
    entries,
    is_older,
    names,
)
from zoo.runner.storage.lock import writer_lock

log = logging.getLogger(__name__)


class Results:
    """A validated results folder."""

    def __init__(self, root: Path, keep_records: bool = False):
        self.root = Path(root)
        self._hashes: set[str] | None = None  # of results.jsonl's lines, once read by a writer
        # (cell hash, file name) -> episodes.jsonl's records or training.json's content, as the
        # validation parsed them (``keep_records``)
        self._records: dict[tuple[str, str], Any] | None = {} if keep_records else None
        self._lines: list[dict[str, Any]] | None = None  # results.jsonl, likewise
        self._listing: dict[str, dict[str, list[str]]] = {}  # run_files, likewise

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def open(cls, root: str | os.PathLike, create: bool = True, keep_records: bool = False,
             replace_older: bool = False) -> Results:
        """Validate ``root`` (read only); create it (and its marker) only if it passes. A folder
        of an older format is refused (:class:`~.layout.OldResultsFolderError`), or with
        ``replace_older`` (``zoo bench --force``) emptied of what it holds and marked anew. With
        ``keep_records`` the cells' episode records and training records parsed by the
        validation are kept for :meth:`episodes` and :meth:`training`, and results.jsonl's lines
        for :meth:`results` (a report reads each file once, not twice); for readers only, as what
        is kept does not follow later writes."""
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise ResultsFolderError(root, "is a file, not a results folder")
        present = sorted(root.iterdir()) if root.is_dir() else []
        if present and not (root / MARKER).exists():
            raise ResultsFolderError(
                present[0], f"{root} is not a zoo results folder (no {MARKER}) but holds this "
                f"and {len(present) - 1} other entries" if len(present) > 1 else
                f"{root} is not a zoo results folder (no {MARKER}) but holds this",
                "Give the folder a `zoo bench --out` wrote, or a new or empty folder to run into "
                "(nothing here is the zoo's to move or delete)")
        if not present and not create:
            raise ZooError(f"{root} holds no results; run `zoo bench --out {root}` first")
        if present and replace_older and is_older(root):
            with writer_lock(root):
                for path in entries(root):
                    if path.name not in (LOCK, WRITER):
                        shutil.rmtree(path) if path.is_dir() else path.unlink()
                atomic_write_json(root / MARKER, FORMAT)
        results = cls(root, keep_records)
        if present:
            results.validate()
        else:
            atomic_write_json(root / MARKER, FORMAT)
        return results

    def validate(self) -> None:
        """Raise :class:`ResultsFolderError` naming the first corrupt or foreign file."""
        check_marker(self.root)
        check_top_level(self.root)
        if (self.root / "results.jsonl").exists():
            lines, torn = read_appended(self.root / "results.jsonl")
            if torn:
                log.warning("%s: its last line was cut short (a write stopped by a full disk or "
                            "a crash); the cells' own result.json files stand in for it%s",
                            self.root / "results.jsonl", "" if self._records is not None else
                            ", and the next run rewrites it from them")
            for line in lines:
                if not isinstance(line.get("config_hash"), str):
                    raise ResultsFolderError(self.root / "results.jsonl", "a line has no config_hash")
            if self._records is not None:
                self._lines = lines
        check_suites(self.root)
        listing = check_runs(self.root, self._records)
        if self._records is not None:
            self._listing = listing

    def run_files(self, kind: str) -> dict[str, list[str]]:
        """The files in each run folder of ``kind`` (``"cells"``, ``"train"``) by folder name:
        as the validation listed them for a reader (``keep_records``), else listed now."""
        if kind in self._listing:
            return self._listing[kind]
        folder = self.root / kind
        return {path.name: names(path) for path in entries(folder) if path.is_dir()}

    @contextmanager
    def writer(self) -> Iterator[Results]:
        """Be the folder's only writer while the block runs (:func:`~.lock.writer_lock`)."""
        with writer_lock(self.root):
            yield self

    # -- paths and states ----------------------------------------------------------------------

    def cell_dir(self, cell_hash: str) -> Path:
        return self.root / "cells" / cell_hash

    def train_dir(self, train_hash: str) -> Path:
        return self.root / "train" / train_hash

    def episodes(self, cell_hash: str) -> list[dict[str, Any]]:
        """A cell's per-episode records (none if it has no ``episodes.jsonl``): those the
        validation parsed when the folder was opened with ``keep_records``, else read now."""
        if self._records is not None and (cell_hash, "episodes.jsonl") in self._records:
            return self._records[(cell_hash, "episodes.jsonl")]
        path = self.cell_dir(cell_hash) / "episodes.jsonl"
        return read_jsonl(path) if path.exists() else []

    def training(self, cell_hash: str) -> Any:
        """A cell's ``training.json`` (None if it has none), kept or read as :meth:`episodes`."""
        if self._records is not None and (cell_hash, "training.json") in self._records:
            return self._records[(cell_hash, "training.json")]
        path = self.cell_dir(cell_hash) / "training.json"
        return read_json(path) if path.exists() else None

    def is_done(self, cell_hash: str) -> bool:
        return (self.cell_dir(cell_hash) / "done").exists()

    def error(self, cell_hash: str) -> str | None:
        path = self.cell_dir(cell_hash) / "error.txt"
        return path.read_text() if path.exists() and not self.is_done(cell_hash) else None

    def remove_cell(self, cell_hash: str, train_hash: str) -> None:
        """``--force``: forget a cell, its training and its results line."""
        for d in (self.cell_dir(cell_hash), self.train_dir(train_hash)):
            if d.exists():
                shutil.rmtree(d)
        lines = self.results()
        kept = [r for r in lines if r["config_hash"] != cell_hash]
        if len(kept) != len(lines):
            self._write_results(kept)

    # -- results.jsonl -------------------------------------------------------------------------

    def results(self) -> list[dict[str, Any]]:
        if self._lines is not None:
            return list(self._lines)
        path = self.root / "results.jsonl"
        return read_appended(path)[0] if path.exists() else []

    def finished(self) -> list[dict[str, Any]]:
        """The lines of results.jsonl and of every finished cell missing there (read only: a
        report of a folder whose results.jsonl was lost or is behind is still complete)."""
        lines = self.results()
        have = {r["config_hash"] for r in lines}
        return lines + [read_json(self.cell_dir(name) / "result.json")
                        for name, files in self.run_files("cells").items()
                        if name not in have and "done" in files]

    def superseded(self, configs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Finished results with one of ``configs`` (cell configurations) except the code that
        made them (``provenance``): results of another version of a method, not to be reused."""
        wanted = {code_free_hash(c): config_hash(c) for c in configs}
        return [r for r in self.finished()
                if wanted.get(code_free_hash(r["config"]), r["config_hash"]) != r["config_hash"]]

    def add_result(self, result: dict[str, Any]) -> None:
        """Append a finished cell's line (once; only the holder of :meth:`writer` calls this).
        The file is read once per writer, not once per line: a suite of 10,000 cells would
        otherwise rewrite its whole results.jsonl after each cell."""
        if self._hashes is None:
            self._hashes = {r["config_hash"] for r in self.results()}
        if result["config_hash"] in self._hashes:
            return
        append_line(self.root / "results.jsonl",
                          (json.dumps(result, sort_keys=True) + "\n").encode())
        self._hashes.add(result["config_hash"])

    def _write_results(self, lines: Iterable[dict[str, Any]]) -> None:
        lines = list(lines)
        atomic_write_text(self.root / "results.jsonl",
                          "".join(json.dumps(r, sort_keys=True) + "\n" for r in lines))
        self._hashes = {r["config_hash"] for r in lines}

    def sync_results(self) -> None:
        """Add the lines of cells that finished but whose line was not written (a kill between),
        after cutting off a last line that a full disk or a crash left part-written (the cells
        hold the truth: that cell's line is then added again from its result.json)."""
        path = self.root / "results.jsonl"
        lines, torn = read_appended(path) if path.exists() else ([], False)
        if torn:
            self._write_results(lines)
            log.warning("%s: cut off its last line, which was part-written, and added the "
                        "missing lines from the cells' result.json", path)
        have = {r["config_hash"] for r in lines}
        for run in entries(self.root / "cells"):
            if (run / "done").exists() and run.name not in have:
                self.add_result(read_json(run / "result.json"))

    def save_suite(self, suite_json: dict[str, Any]) -> None:
        atomic_write_json(self.root / "suites" / f"{suite_json['name']}.json", suite_json)

    def suites(self) -> list[dict[str, Any]]:
        return [read_json(p) for p in entries(self.root / "suites")]



def link_or_copy(src: Path, dst: Path) -> None:
    """Give ``dst`` the content of ``src`` atomically: a hard link where possible, else a copy."""
    tmp = dst.with_name(f".{dst.name}.link.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    before_write()
    os.replace(tmp, dst)
