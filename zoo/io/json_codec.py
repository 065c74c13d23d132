"""One JSON value per line, as the standard library's ``json`` gives its values, at ``orjson``'s
speed where ``orjson`` gives the same (a test episode's record holds a few hundred floats)."""

from __future__ import annotations

import json
from typing import Any

import orjson


def json_line(obj: Any) -> bytes:
    """``obj`` as one line of JSON (UTF-8, ending in a newline), as the standard library's
    ``json.dumps`` would give its values: encoded by ``orjson`` (25x faster on a record of a few
    hundred floats, which a test episode's per-query numbers are), and by ``json`` wherever
    ``orjson`` would write something else (it writes ``null`` for a NaN or an infinity, which
    ``json`` keeps as ``NaN`` / ``Infinity``) or refuses (a subclass of a number, a key that is
    not a string). ``json.loads`` reads either back as the same values."""
    try:
        line = orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # orjson.JSONEncodeError
        line = b"null"
    if b"null" in line:  # rare: a None, a non-finite float, or a fallback from above
        line = (json.dumps(obj) + "\n").encode()
    return line


def json_record(line: str) -> Any:
    """The value of one line of a JSON-lines file the zoo wrote, as ``json.loads`` reads it: a
    line :func:`json_line` encoded with ``orjson`` (compact: no ``": "`` in it) is read by
    ``orjson`` (~10x faster), and which it refuses (``NaN``, trailing text) by ``json``, which
    reads it or raises the error it always raises; a line ``json.dumps`` wrote (``": "``, the
    separator it writes; older files, and ``json_line``'s fallback, the only place a
    record's integer beyond 64 bits can be) is read by ``json``. ``orjson`` reads an integer
    beyond 64 bits as a float, which no line it wrote holds; a compact line from another
    writer with one would be read so."""
    if '": ' not in line:
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            pass
    return json.loads(line)
