"""Files: atomic writes (:mod:`.atomic`), the JSON-lines codec (:mod:`.json_codec`) and the
loading of tensor files (:mod:`.checkpoint`)."""

from zoo.io.atomic import (
    NoSpaceError,
    atomic_save,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    before_write,
    saying_no_space,
    set_write_check,
    sync_to_disk,
    write_marker,
)
from zoo.io.checkpoint import load_checkpoint
from zoo.io.json_codec import json_line, json_record

__all__ = ["NoSpaceError", "atomic_save", "atomic_write_bytes", "atomic_write_json",
           "atomic_write_text", "before_write", "json_line", "json_record", "load_checkpoint",
           "saying_no_space", "set_write_check", "sync_to_disk", "write_marker"]
