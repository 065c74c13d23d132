"""Reading the JSON files of a results folder, and appending a line to a JSON-lines file.

Reads use the standard library (a file's text, then ``json.loads`` or, per line,
:func:`zoo.io.json_record`); a file that cannot be read is named with what is wrong.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from zoo.errors import ZooError
from zoo.io import atomic_write_bytes, before_write, json_record, saying_no_space


class ResultsFolderError(ZooError):
    """A file in a results folder that is corrupt or not ours; nothing was changed."""

    def __init__(self, path: Path, problem: str, advice: str = ""):
        self.path, self.problem = path, problem
        super().__init__(f"{path}: {problem}; nothing in the results folder was changed. "
                         + (advice or "Move or delete that file, or choose another --out"))


def _text(path: str | os.PathLike) -> str:
    with open(path, "rb") as f:
        return f.read().decode("utf-8")


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value in the file ``path`` (UTF-8)."""
    try:
        return json.loads(_text(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsFolderError(Path(path), f"is not readable JSON ({exc})") from None


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The objects of a JSON-lines file, one per line, each read by :func:`zoo.io.json_record`;
    a line that is not JSON or not an object is named by its number. Lines end at ``\\n`` only
    (a ``\\r`` before it is JSON whitespace), not at the other line breaks of
    ``str.splitlines`` (``\\x85``, ``\\u2028``, ...), which may stand inside a string."""
    return _records(path, torn_tail=False)[0]


def read_appended(path: str | os.PathLike) -> tuple[list[dict[str, Any]], bool]:
    """:func:`read_jsonl` of a file written by :func:`append_line`, and whether its last line
    was cut short (an append that a full disk or a crash stopped part-way: no newline after
    it, begun as every line of an object is, ``{"``, and not JSON), which is left out."""
    return _records(path, torn_tail=True)


def _records(path: str | os.PathLike, torn_tail: bool) -> tuple[list[dict[str, Any]], bool]:
    try:
        lines = _text(path).split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsFolderError(Path(path), f"is not readable ({exc})") from None
    torn = False
    if not lines[-1]:  # what follows the newline that ends the last line
        lines.pop()
    elif torn_tail and lines[-1].startswith('{"'):  # as every appended line begins
        try:
            json_record(lines[-1])
        except json.JSONDecodeError:
            lines.pop()
            torn = True
    records = []
    for number, line in enumerate(lines, 1):
        try:
            obj = json_record(line)
        except json.JSONDecodeError as exc:
            raise ResultsFolderError(Path(path), f"line {number} is not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise ResultsFolderError(Path(path), f"line {number} is not a JSON object")
        records.append(obj)
    return records, torn


def append_line(path: str | os.PathLike, line: bytes) -> None:
    """Append ``line`` (one JSON line, ending in a newline) to ``path``, unbuffered on an
    ``O_APPEND`` descriptor: it goes out in one ``write(2)``, not in pieces another writer's
    bytes could come between. A write that fails part-way (a full disk) is cut off again, so
    the file never ends in part of a line; a full disk is said as such
    (:class:`zoo.io.NoSpaceError`)."""
    before_write()
    with saying_no_space(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                while line:
                    line = line[os.write(fd, line):]
            except BaseException:
                os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)


def write_jsonl(path: Path, lines: Iterable[bytes]) -> None:
    """Lines of :func:`zoo.io.json_line` as the file ``path``, atomically."""
    atomic_write_bytes(path, b"".join(lines))
