"""The results folder: its layout and read-only check (:mod:`.layout`), its one writer's lock
(:mod:`.lock`), reading its JSON files and appending lines (:mod:`.jsonl`), and the folder
itself (:class:`Results`)."""

from zoo.runner.storage.jsonl import ResultsFolderError, read_json, read_jsonl, write_jsonl
from zoo.runner.storage.layout import (
    CELL_FILES,
    PREDICTIONS,
    TMP_RE,
    TRAIN_FILES,
    OldResultsFolderError,
    records_digest,
)
from zoo.runner.storage.lock import ResultsFolderBusyError
from zoo.runner.storage.results import Results, link_or_copy

__all__ = ["CELL_FILES", "PREDICTIONS", "TMP_RE", "TRAIN_FILES", "OldResultsFolderError", "Results",
           "ResultsFolderBusyError", "ResultsFolderError", "link_or_copy", "read_json",
           "read_jsonl", "records_digest", "write_jsonl"]
