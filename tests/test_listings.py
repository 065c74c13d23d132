"""The listing commands: header rows, 100 columns unless ``-v``, whole sentences, and no torch (the
listings are kept on disk by a fingerprint of what is installed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from zoo import listing


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("listing-cache"))


def zoo(cache: str, *args: str, code: str = "") -> str:
    """``zoo ARGS`` in a fresh process with its own cache, and ``code`` run after it."""
    script = "\n".join(["import sys", "from zoo.cli import main", "rc = main(sys.argv[1:])", code,
                        "sys.exit(rc)"])
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          env={**os.environ, "ZOO_CACHE": cache})
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("command", ["plugins", "methods", "datasets", "tasks", "suites"])
def test_a_listing_has_a_header_and_fits_100_columns(cache, command):
    lines = zoo(cache, command).splitlines()
    assert lines[0].split()[0] in ("plugin", "name")
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    assert len(lines) > 2


def test_listings_do_not_import_torch_once_stored(cache):
    zoo(cache, "plugins")  # stores the listings if this environment has none yet
    for command in ("plugins", "methods", "datasets", "tasks", "suites"):
        out = zoo(cache, command, code="print('torch' in sys.modules)")
        assert out.splitlines()[-1] == "False", command


def test_plugins_verbose_names_everything(cache):
    short, full = zoo(cache, "plugins"), zoo(cache, "plugins", "-v")
    row = next(line for line in short.splitlines() if line.startswith("protonet "))
    assert row.endswith(" ok      methods: 1")
    row = next(line for line in full.splitlines() if line.startswith("zoo "))
    assert "methods: constant, control-functional," in row and "; kernels: " in row
    assert len(row) > 100
    records = json.loads(zoo(cache, "plugins", "--json"))
    assert {"name", "distribution", "version", "registered", "error"} <= set(records[0])


def test_an_entry_suite_is_not_called_a_task_kind(cache):
    rows = {r["name"]: r for r in json.loads(zoo(cache, "suites", "--json"))}
    assert rows["np-bo"]["task"] == "entry" and rows["np-bo"]["entry"] == "zoo.bayesopt:run"
    assert rows["quick"]["task"] == "classification"


def test_a_description_is_whole_sentences():
    doc = "MNIST as Jones et al.\nuse it; 64 pixels in [0, 1],\nscaled.\n\nMore."
    assert listing.first_paragraph(doc) == "MNIST as Jones et al. use it; 64 pixels in [0, 1], scaled."
    assert listing.first_paragraph(None) == "-"


def test_the_fingerprint_follows_what_is_installed(tmp_path, monkeypatch):
    before = listing.fingerprint()
    assert listing.fingerprint() == before
    monkeypatch.setenv("ZOO_DISABLE_PLUGINS", "protonet")
    assert listing.fingerprint() != before
    monkeypatch.delenv("ZOO_DISABLE_PLUGINS")
    (tmp_path / "someone_else-1.0.dist-info").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert listing.fingerprint() != before
