"""Issue 17: a result names the code that made it, and other code under the same name is
another cell (so an impostor's result does not survive its removal)."""

from __future__ import annotations

import dataclasses

from zoo.runner.cells import expand_cells

from .conftest import tiny_suite


def test_cells_carry_the_provenance_of_their_method():
    cell = expand_cells(tiny_suite(), ["protonet"])[0]
    assert cell.provenance["distribution"] == "zoo-protonet"
    assert cell.config()["provenance"] == cell.provenance
    assert cell.train_config()["provenance"] == cell.provenance
    other = dataclasses.replace(cell, provenance={**cell.provenance, "digest": "0" * 64})
    assert other.hash != cell.hash and other.train_hash != cell.train_hash
