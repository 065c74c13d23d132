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
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoo.errors import ZooError
from zoo.io import atomic_write_bytes, atomic_write_json, atomic_write_text, json_record
from zoo.runner.allocator import malloc_setting
from zoo.runner.cells import code_free_hash, config_hash

if TYPE_CHECKING:
    from zoo.plugins import Registry

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
            lines = read_jsonl(self.root / "results.jsonl")
            for line in lines:
                if not isinstance(line.get("config_hash"), str):
                    raise ResultsFolderError(self.root / "results.jsonl", "a line has no config_hash")
            if self._records is not None:
                self._lines = lines
        for path in _entries(self.root / "suites"):
            if path.suffix != ".json" or not isinstance(_read_json(path), dict):
                raise ResultsFolderError(path, "is not a suite record")
        self._validate_runs()

    def _validate_runs(self) -> None:
        """Check every run folder (trainings, then cells); raise the first problem in the folders'
        order. Names are listed first; then the files are read and checked, by a reader in two
        processes where it pays (:func:`_check_files_split`)."""
        work: list[tuple[str, str, dict[str, list[str]]]] = []
        first: Problem | None = None
        for k, (kind, allowed) in enumerate(RUN_KINDS):
            folder = str(self.root / kind)
            files, problem = _list_runs(folder, kind, allowed)
            work.append((kind, folder, files))
            if problem is not None:  # the files of the folders before it are still checked
                first = ((k, len(files), -1), *problem)
                break
        keep = self._records is not None
        kept, found = _check_files_split(work) if keep else _check_files(work, ALL_FILES, False)
        problem = min((p for p in (first, found) if p is not None), default=None)
        if problem is not None:
            raise ResultsFolderError(Path(problem[1]), problem[2])
        if self._records is not None:
            self._records |= kept
            self._listing = {kind: files for kind, _, files in work}

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
        return read_jsonl(path) if path.exists() else []

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
        return read_jsonl(path) if path.exists() else []

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


RUN_KINDS = (("train", TRAIN_FILES), ("cells", CELL_FILES))
STEPS = ("config.json", "result.json", "training.json", "env.json", "episodes.jsonl")
"""The files of a run folder that are read, in the order a folder is checked."""
ALL_FILES = {kind: frozenset(STEPS) for kind, _ in RUN_KINDS}
KEPT = {"cells": frozenset({"training.json", "episodes.jsonl"})}
"""The files whose content a reader keeps (the report's records); the rest are only checked."""
PARALLEL_RUNS = 2000
"""From this many run folders on, a reader checks the files it does not keep in a forked child
while it parses those it keeps (a fork costs ~10-30 ms; each run folder ~0.2 ms of checks)."""
Problem = tuple[tuple[int, int, int], str, str]
"""(where: kind, run folder and file by their order of checking; path; what is wrong)"""


def _list_runs(folder: str, kind: str, allowed: set[str]
               ) -> tuple[dict[str, list[str]], tuple[str, str] | None]:
    """The files of each run folder in ``folder``, by name, in order up to the first folder that
    is not a run folder or holds a file the runner does not write, and that problem as (path,
    what is wrong), or None. Names only: nothing is read."""
    files: dict[str, list[str]] = {}
    for name in _names(folder) if os.path.isdir(folder) else []:
        run = os.path.join(folder, name)
        try:
            listed = _names(run) if HASH_RE.match(name) else None
        except NotADirectoryError:
            listed = None
        if listed is None:
            return files, (run, f"is not a {kind} directory (16 hex digits)")
        for file in listed:
            if file not in allowed:
                return files, (os.path.join(run, file), "is not a file the runner writes")
        files[name] = listed
    return files, None


def _check_files(work: list[tuple[str, str, dict[str, list[str]]]],
                 which: dict[str, frozenset[str]], keep: bool
                 ) -> tuple[dict[tuple[str, str], Any], Problem | None]:
    """Read and check the files named by ``which`` (by kind) of the run folders of ``work``
    (kind, folder, files by run folder, as :func:`_list_runs` lists them): the records kept
    (``keep``: the cells' :data:`KEPT` files, by (run folder, file)) and the first problem. A
    folder without its config.json (created, killed before the config was written) is harmless
    and not read. Strings, not paths: ~60,000 of them at 10,000 cells."""
    kept: dict[tuple[str, str], Any] = {}
    for k, (kind, folder, files) in enumerate(work):
        checked = which.get(kind, frozenset())
        keeps = KEPT.get(kind, frozenset()) if keep else frozenset()
        if not checked:
            continue
        for i, (name, listed) in enumerate(files.items()):
            if "config.json" not in listed:
                continue
            for step, file in enumerate(STEPS):
                if file not in checked or file not in listed:
                    continue
                path = os.path.join(folder, name, file)
                try:
                    if file == "episodes.jsonl":
                        content: Any = read_jsonl(path)
                    else:
                        content = _read_json(path)
                except ResultsFolderError as exc:
                    return kept, ((k, i, step), str(exc.path), exc.problem)
                if file == "config.json":
                    problem = _config_problem(content, name, kind)
                    if problem is not None:
                        return kept, ((k, i, step), path, problem)
                elif file in keeps:
                    kept[(name, file)] = content
    return kept, None


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


def _check_files_split(work: list[tuple[str, str, dict[str, list[str]]]]
                       ) -> tuple[dict[tuple[str, str], Any], Problem | None]:
    """:func:`_check_files` of every file for a reader, in two processes: a forked child checks
    the files the reader does not keep (configs and their hashes, result.json, env.json, the
    trainings: about half the work) and sends back only its first problem, while this process
    parses the records it keeps; the first problem of the two, by position, is the folder's.
    Sending records back would cost about what parsing them does (measured), so none are sent.
    The child first has every file read ahead into the page cache (:func:`_read_ahead`): a folder
    read for the first time costs a disk read per file, ~7 s at 10,000 cells one after another.
    Where there is no ``fork``, other threads run, the folder is small, or the fork or the child
    fails, the child's share is checked here."""
    others = {kind: ALL_FILES[kind] - KEPT.get(kind, frozenset()) for kind in ALL_FILES}
    if not _can_fork() or sum(len(files) for _, _, files in work) < PARALLEL_RUNS:
        return _check_files(work, ALL_FILES, True)

    def child() -> Problem | None:
        _read_ahead([os.path.join(folder, name, file) for _, folder, files in work
                     for name, listed in files.items() if "config.json" in listed
                     for file in listed if file in STEPS])
        return _check_files(work, others, False)[1]

    try:
        wait = _forked(child)
    except OSError:  # no process or pipe to be had: all of it here
        return _check_files(work, ALL_FILES, True)
    try:
        kept, found = _check_files(work, KEPT, True)
    except BaseException:
        wait(kill=True)
        raise
    reply = wait()
    if reply is None:
        other = _check_files(work, others, False)[1]
    else:
        other = None if reply[0] is None else ((*reply[0][0],), *reply[0][1:])
    return kept, min((p for p in (found, other) if p is not None), default=None)


def _can_fork() -> bool:
    """Whether this process may fork a child that runs Python: where there is ``fork`` and no
    other thread (one could hold a lock the child then waits for forever; ``zoo report`` has none,
    ``zoo bench`` keeps tqdm's monitor thread and checks in one process)."""
    return hasattr(os, "fork") and threading.active_count() == 1


READ_AHEAD_THREADS = 8
READ_AHEAD_SAMPLE = 64
"""How many of the files, spread evenly, are probed before reading ahead (:func:`_in_cache`)."""


def _in_cache(paths: list[str]) -> bool:
    """Whether :data:`READ_AHEAD_SAMPLE` of ``paths``, spread evenly, are in the page cache: a
    read of each one's first byte that would wait for the disk is refused (``RWF_NOWAIT``, Linux
    4.14+). False where that cannot be asked (another system or file system)."""
    if not paths or not hasattr(os, "RWF_NOWAIT"):
        return False
    byte = bytearray(1)
    for path in paths[::max(1, len(paths) // READ_AHEAD_SAMPLE)]:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue  # left to its reader
        try:
            os.preadv(fd, [byte], 0, os.RWF_NOWAIT)
        except OSError:  # BlockingIOError: on the disk only; or the flag is not supported
            return False
        finally:
            os.close(fd)
    return True


def _read_ahead(paths: list[str]) -> None:
    """Have ``paths`` read into the page cache by :data:`READ_AHEAD_THREADS` threads (a disk
    serves several reads at once), in order; return when every read is asked for. A hint only
    (``posix_fadvise``, else a read): an unreadable file is left to its reader. Nothing else runs
    in this process meanwhile: a thread busy parsing would hold the interpreter lock for ~5 ms at
    a time, and the readers, which need it for a few microseconds per file, would fall behind.
    Nothing is done where a sample of the files is in the cache already (:func:`_in_cache`: a
    report run again), where asking for each file costs ~10 us of system time (~0.6 s at 10,000
    cells) and saves nothing."""
    if _in_cache(paths):
        return

    def warm(chunk: list[str]) -> None:
        for path in chunk:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                else:
                    while os.read(fd, 1 << 20):
                        pass
            except OSError:
                pass
            finally:
                os.close(fd)

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(READ_AHEAD_THREADS) as pool:
        pool.map(warm, [paths[i:i + 64] for i in range(0, len(paths), 64)])


def _forked(fn: Callable[[], Any]) -> Callable[..., list[Any] | None]:
    """Run ``fn`` in a forked child at once; return ``wait``: ``wait()`` gives ``[fn()]``
    through JSON, or None if the child failed; ``wait(kill=True)`` ends the child. The child
    leaves through ``os._exit``, so nothing of this process (buffers, exit handlers) runs twice."""
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        raise
    if pid == 0:  # the child
        status = 1
        try:
            os.close(read_end)
            data = json.dumps([fn()]).encode()
            while data:
                data = data[os.write(write_end, data):]
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)

    def wait(kill: bool = False) -> list[Any] | None:
        if kill:
            os.kill(pid, signal.SIGKILL)
        with os.fdopen(read_end, "rb") as pipe:
            data = b"" if kill else pipe.read()
        status = os.waitpid(pid, 0)[1]
        return json.loads(data) if status == 0 and data else None

    return wait


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


def _read_text(path: str | os.PathLike) -> str:
    """A file's text (UTF-8) through ``os.open`` and ``os.read``: the text ``open(path).read()``
    gives, but for newlines, which are not translated (JSON reads ``\\r\\n`` as whitespace), and
    without a buffered text stream per file (half the cost of reading ~60,000 small files)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8")


def _read_json(path: str | os.PathLike) -> Any:
    try:
        return _loads(_read_text(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsFolderError(Path(path), f"is not readable JSON ({exc})") from None


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The objects of a JSON-lines file, one per line, each read by :func:`zoo.io.json_record`
    (``orjson`` for the lines it wrote, ``json`` for the others); a line that is not JSON or not
    an object is named by its number. Lines end at ``\\n`` (a ``\\r`` before it is JSON
    whitespace), not at the other line breaks of ``str.splitlines`` (``\\x85``, ``\\u2028``,
    ...), which ``orjson`` writes as they are inside a string."""
    try:
        text = _read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsFolderError(Path(path), f"is not readable ({exc})") from None
    lines = text.split("\n")
    if not lines[-1]:  # the newline that ends the last line
        lines.pop()
    records = []
    for number, line in enumerate(lines, 1):
        try:
            obj = json_record(line)
        except json.JSONDecodeError as exc:
            raise ResultsFolderError(Path(path), f"line {number} is not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise ResultsFolderError(Path(path), f"line {number} is not a JSON object")
        records.append(obj)
    return records


def write_jsonl(path: Path, lines: Iterable[bytes]) -> None:
    """Lines of :func:`zoo.io.json_line` as the file ``path``, atomically."""
    atomic_write_bytes(path, b"".join(lines))


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
def versions(registry: Registry) -> dict[str, Any]:
    """Versions of python, torch, pyro, learn2learn, zoo and of every plugin of ``registry``
    (its record)."""
    import importlib.metadata as md

    from zoo.hookspecs import DISTRIBUTION

    def version(dist: str) -> str | None:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return None

    return {"python": platform.python_version(), "torch": version("torch"),
            "pyro": version("pyro-ppl"), "learn2learn": version("learn2learn"),
            "zoo": version(DISTRIBUTION),
            "plugins": {r.name: r.version for r in registry.plugins if r.name != "zoo"}}


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


def environment(device: str, registry: Registry) -> dict[str, Any]:
    """What a result depends on besides its config (``registry``: the plugins it was made
    with). ``threads`` is there because the intra-op thread count changes the order of
    floating-point reductions, so the same cell trained with 1 and with 2 threads can end at
    different numbers (``zoo bench --workers`` sets it)."""
    import torch

    return {"versions": copy.deepcopy(versions(registry)), "git_commit": git_commit(),
            "device": device_description(device), "platform": platform.platform(),
            "argv": sys.argv, "malloc": malloc_setting(), "threads": torch.get_num_threads()}
