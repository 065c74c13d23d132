"""The README's "Writing a plugin" guide works as written: its fenced files are built into a
distribution, installed, conformance-checked and run through a tiny ``zoo bench``, so the guide
cannot drift from the code (a snippet without a version or a build system would not install)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zoo.hookspecs import DISTRIBUTION

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def guide_files() -> dict[str, str]:
    """``{path: text}`` of the fenced blocks under "## Writing a plugin" (first line ``# path``)."""
    text = README.read_text()
    section = text.split("\n## Writing a plugin\n", 1)[1].split("\n## ", 1)[0]
    files = {}
    for _, body in FENCE.findall(section):
        first, _, rest = body.partition("\n")
        assert first.startswith("# "), f"a fenced block in the guide does not name its file: {first}"
        files[first[2:].strip()] = body
    return files


def test_the_guide_names_a_complete_distribution():
    files = guide_files()
    assert {"pyproject.toml", "zoo_my_method/__init__.py"} <= set(files)
    pyproject = files["pyproject.toml"]
    for needed in ("[build-system]", "version = ", 'name = "bayes-meta-zoo-my-method"',
                   f'dependencies = ["{DISTRIBUTION}>=0.1"]', '[project.entry-points."zoo.plugins"]'):
        assert needed in pyproject, needed


@pytest.mark.slow
def test_the_guide_installs_and_runs_as_written(tmp_path):
    src, site = tmp_path / "src", tmp_path / "site"
    for rel, text in guide_files().items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--no-index", "--target", str(site), str(src)],
                   check=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "ZOO_STRICT_PLUGINS": "1"}

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, *args], env=env, cwd=src, capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    plugins = json.loads(run("-m", "zoo.cli", "plugins", "--json"))
    mine = next(p for p in plugins if p["name"] == "my-method")
    assert mine["distribution"] == "bayes-meta-zoo-my-method" and mine["error"] is None
    assert mine["registered"]["methods"] == ["my-method"]
    assert mine["registered"]["kernels"] == ["my-rbf"]
    run("-c", "import runpy; runpy.run_path('tests/test_my_method.py')"
        "['test_my_method_conforms']()")
    out = tmp_path / "results"
    run("-c", "import sys; from zoo.cli import main; sys.exit(main())", "bench", "quick",
        "--methods", "my-method", "--device", "cpu", "--out", str(out), "--no-progress",
        "--set", "ways=[3]", "--set", "shots=[1]", "--set", "test_datasets=[\"glyphs\"]",
        "--set", "train_episodes=4", "--set", "val_episodes=2", "--set", "val_every=2",
        "--set", "test_episodes=3", "--set", "my-method.temperature=5")
    (line,) = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert line["method"] == "my-method" and line["hparams"]["temperature"] == 5.0
    assert line["provenance"]["distribution"] == "bayes-meta-zoo-my-method"
