"""The results folder: its layout, a read-only validation before anything is written, and the
files of cells and trainings. Every write goes through :mod:`zoo.io` (temp file + rename).

::

    DIR/zoo-results.json        marks the folder as ours (format version)
    DIR/writer.lock, writer.json  the lock of the one process writing the folder, and who it is
    DIR/results.jsonl           one line per finished cell (the results contract)
    DIR/suites/<suite>.json     the resolved suite (settings, overrides, published references)
    DIR/train/<train-hash>/     config.json, checkpoint.pt, best.pt, model.pt, training.json, done
    DIR/cells/<cell-hash>/      config.json, env.json, model.pt, training.json, episodes.jsonl,
                                result.json, done (written last) or error.txt
    DIR/report/                 tables (md, csv, json, tex) and figures
    DIR/experiments/<suite>/    what an ``entry`` suite writes
"""

from __future__ import annotations

import copy
import functools
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from zoo.errors import ZooError
from zoo.io import atomic_write_json, atomic_write_text
from zoo.runner.allocator import malloc_setting
from zoo.runner.cells import code_free_hash, config_hash

FORMAT = {"format": "zoo-results", "version": 1}
MARKER = "zoo-results.json"
LOCK, WRITER = "writer.lock", "writer.json"
TOP_LEVEL = {MARKER, LOCK, WRITER, "results.jsonl", "suites", "train", "cells", "report",
             "experiments"}
CELL_FILES = {"config.json", "env.json", "model.pt", "training.json", "episodes.jsonl",
              "result.json", "done", "error.txt"}
TRAIN_FILES = {"config.json", "checkpoint.pt", "best.pt", "model.pt", "training.json", "done",
               "error.txt"}
HASH_RE = re.compile(r"^[0-9a-f]{16}$")
TMP_RE = re.compile(r"^\..+\.[A-Za-z0-9_]+\.tmp$")  # zoo.io's temp files left by a kill


class ResultsFolderError(ZooError):
    """A file in a results folder that is corrupt or not ours; nothing was changed."""

    def __init__(self, path: Path, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"{path}: {problem}; nothing in the results folder was changed. Move or "
                         "delete that file, or choose another --out")


class ResultsFolderBusyError(ZooError):
    """Another process is writing the results folder."""


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
    def open(cls, root: str | os.PathLike, create: bool = True, keep_records: bool = False
             ) -> Results:
        """Validate ``root`` (read only); create it (and its marker) only if it passes. With
        ``keep_records`` the cells' episode records and training records parsed by the
        validation are kept for :meth:`episodes` and :meth:`training`, and results.jsonl's lines
        for :meth:`results` (a report reads each file once, not twice); for readers only, as what
        is kept does not follow later writes."""
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise ResultsFolderError(root, "is a file, not a results folder")
        entries = sorted(p for p in root.iterdir()) if root.is_dir() else []
        if entries and not (root / MARKER).exists():
            raise ResultsFolderError(entries[0], f"{root} is not a zoo results folder (no {MARKER})"
                                     " but holds this")
        if not entries and not create:
            raise ZooError(f"{root} holds no results; run `zoo bench --out {root}` first")
        results = cls(root, keep_records)
        if entries:
            results.validate()
        else:
            atomic_write_json(root / MARKER, FORMAT)
        return results

    def validate(self) -> None:
        """Raise :class:`ResultsFolderError` naming the first corrupt or foreign file."""
        marker = self.root / MARKER
        if _read_json(marker) != FORMAT:
            raise ResultsFolderError(marker, f"unexpected content; expected {FORMAT}")
        for path in _entries(self.root):
            if path.name not in TOP_LEVEL:
                raise ResultsFolderError(path, "is not part of a zoo results folder")
        if (self.root / "results.jsonl").exists():
            lines = list(read_jsonl(self.root / "results.jsonl"))
            for line in lines:
                if not isinstance(line.get("config_hash"), str):
                    raise ResultsFolderError(self.root / "results.jsonl", "a line has no config_hash")
            if self._records is not None:
                self._lines = lines
        for path in _entries(self.root / "suites"):
            if path.suffix != ".json" or not isinstance(_read_json(path), dict):
                raise ResultsFolderError(path, "is not a suite record")
        self._validate_runs("train", TRAIN_FILES)
        self._validate_runs("cells", CELL_FILES)

    def _validate_runs(self, kind: str, allowed: set[str]) -> None:
        """Check every run folder of ``kind``; raise the first problem in the folders' order."""
        folder = self.root / kind
        names = _names(folder) if folder.is_dir() else []
        keep = self._records is not None and kind == "cells"
        listing, kept, problem = _check_runs(str(folder), names, kind, allowed, keep)
        if problem is not None:
            raise ResultsFolderError(Path(problem[0]), problem[1])
        if self._records is not None:
            self._records |= kept
            self._listing[kind] = listing

    def run_files(self, kind: str) -> dict[str, list[str]]:
        """The files in each run folder of ``kind`` (``"cells"``, ``"train"``) by folder name:
        as the validation listed them for a reader (``keep_records``), else listed now."""
        if kind in self._listing:
            return self._listing[kind]
        folder = self.root / kind
        return {name: _names(folder / name) for name in _names(folder)
                if (folder / name).is_dir()} if folder.is_dir() else {}

    @contextmanager
    def writer(self) -> Iterator[Results]:
        """Be the folder's only writer while the block runs, or raise
        :class:`ResultsFolderBusyError` naming the process that is. Two runs appending to one
        ``results.jsonl`` lose each other's lines; the lock is an ``flock``, so the kernel drops it
        when its holder dies, however it dies."""
        from filelock import FileLock, Timeout

        lock = FileLock(self.root / LOCK)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise ResultsFolderBusyError(
                f"{self.root} is being written by {_holder(self.root / WRITER)}; wait for it to "
                "finish or choose another --out (two writers lose each other's results)") from None
        try:
            atomic_write_json(self.root / WRITER, {
                "pid": os.getpid(), "host": socket.gethostname(), "argv": sys.argv,
                "since": time.strftime("%Y-%m-%d %H:%M:%S")})
            yield self
        finally:
            (self.root / WRITER).unlink(missing_ok=True)
            lock.release()

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
        return list(read_jsonl(path)) if path.exists() else []

    def training(self, cell_hash: str) -> Any:
        """A cell's ``training.json`` (None if it has none), kept or read as :meth:`episodes`."""
        if self._records is not None and (cell_hash, "training.json") in self._records:
            return self._records[(cell_hash, "training.json")]
        path = self.cell_dir(cell_hash) / "training.json"
        return _read_json(path) if path.exists() else None

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
        return list(read_jsonl(path)) if path.exists() else []

    def finished(self) -> list[dict[str, Any]]:
        """The lines of results.jsonl and of every finished cell missing there (read only: a
        report of a folder whose results.jsonl was lost or is behind is still complete)."""
        lines = self.results()
        have = {r["config_hash"] for r in lines}
        return lines + [_read_json(self.cell_dir(name) / "result.json")
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
        # unbuffered, on an O_APPEND descriptor: the line goes out in one write(2), not in pieces
        line = (json.dumps(result, sort_keys=True) + "\n").encode()
        fd = os.open(self.root / "results.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            while line:
                line = line[os.write(fd, line):]
        finally:
            os.close(fd)
        self._hashes.add(result["config_hash"])

    def _write_results(self, lines: Iterable[dict[str, Any]]) -> None:
        lines = list(lines)
        atomic_write_text(self.root / "results.jsonl",
                          "".join(json.dumps(r, sort_keys=True) + "\n" for r in lines))
        self._hashes = {r["config_hash"] for r in lines}

    def sync_results(self) -> None:
        """Add the lines of cells that finished but whose line was not written (a kill between)."""
        have = {r["config_hash"] for r in self.results()}
        for run in _entries(self.root / "cells"):
            if (run / "done").exists() and run.name not in have:
                self.add_result(_read_json(run / "result.json"))

    def save_suite(self, suite_json: dict[str, Any]) -> None:
        atomic_write_json(self.root / "suites" / f"{suite_json['name']}.json", suite_json)

    def suites(self) -> list[dict[str, Any]]:
        return [_read_json(p) for p in _entries(self.root / "suites")]


def _holder(path: Path) -> str:
    """Who holds a writer lock, from its ``writer.json``."""
    try:
        who = json.loads(path.read_text())
        return (f"pid {who['pid']} on {who['host']} (`{' '.join(who['argv'])}`, since "
                f"{who['since']})")
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


def _names(folder: str | os.PathLike) -> list[str]:
    """The sorted names in ``folder`` except zoo.io temp files: names, not paths, which cost
    seconds to make (and to sort) at 10,000 cells."""
    return sorted(n for n in os.listdir(folder) if not (n.startswith(".") and TMP_RE.match(n)))


def _entries(folder: Path) -> Iterator[Path]:
    """The entries of ``folder`` except zoo.io temp files left behind by a killed write."""
    if not folder.is_dir():
        return
    for name in _names(folder):
        yield folder / name


def _check_runs(folder: str, names: list[str], kind: str, allowed: set[str], keep: bool
                ) -> tuple[dict[str, list[str]], dict[tuple[str, str], Any],
                           tuple[str, str] | None]:
    """Check the run folders ``names`` of ``folder``: the files of each, the records parsed
    (``keep``: episodes.jsonl and training.json, by (folder, file)), and the first problem as
    (path, what is wrong), or None. Strings, not paths: ~60,000 of them at 10,000 cells."""
    files: dict[str, list[str]] = {}
    kept: dict[tuple[str, str], Any] = {}
    try:
        for name in names:
            run = os.path.join(folder, name)
            if not (HASH_RE.match(name) and os.path.isdir(run)):
                return files, kept, (run, f"is not a {kind} directory (16 hex digits)")
            files[name] = listed = _names(run)
            for file in listed:
                if file not in allowed:
                    return files, kept, (os.path.join(run, file), "is not a file the runner writes")
            config_path = os.path.join(run, "config.json")
            if "config.json" not in listed:
                continue  # created, killed before its config was written: harmless
            config = _read_json(config_path)
            if not isinstance(config, dict):
                return files, kept, (config_path, "is not a configuration object")
            missing = {"method", "hparams", "train_dataset", "seed"} - set(config)
            if missing:
                return files, kept, (config_path, f"is not a {kind} configuration (no "
                                     f"{', '.join(sorted(missing))})")
            if config_hash(config) != name:
                return files, kept, (config_path, "does not match the hash its folder is "
                                     "named by (edited by hand?)")
            for file in ("result.json", "training.json", "env.json"):
                if file in listed:
                    content = _read_json(os.path.join(run, file))
                    if keep and file == "training.json":
                        kept[(name, file)] = content
            if "episodes.jsonl" in listed:
                records = list(read_jsonl(os.path.join(run, "episodes.jsonl")))
                if keep:
                    kept[(name, "episodes.jsonl")] = records
    except ResultsFolderError as exc:
        return files, kept, (str(exc.path), exc.problem)
    return files, kept, None


_DECODER = json.JSONDecoder()


def _loads(text: str) -> Any:
    """``json.loads`` without its per-call wrapping where ``text`` is one JSON value with at most
    trailing JSON whitespace (every file and line the runner writes; ~0.3 s of a report at
    10,000 cells); anything else goes to ``json.loads``, which accepts it or words the error as
    always."""
    try:
        value, end = _DECODER.raw_decode(text)
    except json.JSONDecodeError:
        end = -1
    if end == len(text) or (end > 0 and not text[end:].strip(" \t\n\r")):
        return value
    return json.loads(text)


def _read_json(path: str | os.PathLike) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return _loads(f.read())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsFolderError(Path(path), f"is not readable JSON ({exc})") from None


def read_jsonl(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsFolderError(Path(path), f"is not readable ({exc})") from None
    for number, line in enumerate(text.splitlines(), 1):
        try:
            obj = _loads(line)
        except json.JSONDecodeError as exc:
            raise ResultsFolderError(Path(path), f"line {number} is not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise ResultsFolderError(Path(path), f"line {number} is not a JSON object")
        yield obj


def write_jsonl(path: Path, lines: Iterable[str]) -> None:
    atomic_write_text(path, "".join(lines))


def link_or_copy(src: Path, dst: Path) -> None:
    """Give ``dst`` the content of ``src`` atomically: a hard link where possible, else a copy."""
    tmp = dst.with_name(f".{dst.name}.link.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


# -- environment -------------------------------------------------------------------------------

@functools.cache
def versions() -> dict[str, Any]:
    """Versions of python, torch, pyro, learn2learn, zoo and of every plugin (its record)."""
    import importlib.metadata as md

    from zoo.plugins import registry

    def version(dist: str) -> str | None:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return None

    return {"python": platform.python_version(), "torch": version("torch"),
            "pyro": version("pyro-ppl"), "learn2learn": version("learn2learn"),
            "zoo": version("zoo"),
            "plugins": {r.name: r.version for r in registry().plugins if r.name != "zoo"}}


@functools.cache
def git_commit() -> str | None:
    """The commit of the zoo source tree (``+dirty`` if it has changes), if it is a git checkout;
    read once per process, whose code was loaded from it (not once per cell: two ``git``
    processes)."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "zoo"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


@functools.cache
def device_description(device: str) -> str:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return f"cpu ({platform.processor() or platform.machine()})"


def environment(device: str) -> dict[str, Any]:
    """What a result depends on besides its config. ``threads`` is there because the intra-op
    thread count changes the order of floating-point reductions, so the same cell trained with 1
    and with 2 threads can end at different numbers (``zoo bench --workers`` sets it)."""
    import torch

    return {"versions": copy.deepcopy(versions()), "git_commit": git_commit(),
            "device": device_description(device), "platform": platform.platform(),
            "argv": sys.argv, "malloc": malloc_setting(), "threads": torch.get_num_threads()}
