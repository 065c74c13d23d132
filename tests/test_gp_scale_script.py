"""``benchmarks/scale/gp_scale.py`` (the card ``gp-scale.md``'s grid) runs end to end on one small
cell and records how it measured: the malloc setting every cell runs under, and its arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a subprocess that builds two Conv4S methods

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks/scale/gp_scale.py"


@pytest.mark.parametrize("malloc", ["retain", "default"])
def test_one_cell_side_by_side_with_its_malloc_setting(tmp_path, malloc):
    out = tmp_path / "grid.json"
    argv = ["--ways", "2", "--shots", "1", "--query", "2", "--repeat", "1", "--methods",
            "protonet,dkt", "--skip-nystrom", "--malloc", malloc, "--json", str(out)]
    printed = subprocess.run([sys.executable, str(SCRIPT), *argv], check=True,
                             capture_output=True, text=True).stdout
    result = json.loads(out.read_text())
    assert result["malloc"] == malloc and f"malloc {malloc}" in printed
    assert result["argv"] == argv
    rows = {r["method"]: r for r in result["grid"]}
    assert set(rows) == {"protonet", "dkt"}
    for r in rows.values():
        assert r["test_s"] > 0 and r["train_s"] > 0
        assert r["test_peak_mb"] >= 0 and r["train_peak_mb"] >= 0
