"""The plugin guide of the documentation works as written: its files (the fenced blocks whose first
line names a file) are built into a distribution, installed, conformance-checked, and its suites
run through a tiny ``zoo bench``: the method beside ProtoNet, and the new task kind's suite. The
commands run one after another in one process, as ``zoo.cli.main`` (what the ``zoo`` script
calls)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zoo.hookspecs import DISTRIBUTION

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
FILE = re.compile(r"# ([\w./-]+\.(?:py|toml))")


def guide_files() -> dict[str, str]:
    """``{path: text}`` of the guide's blocks whose first line is ``# path``."""
    files = {}
    for _, body in FENCE.findall(GUIDE.read_text()):
        m = FILE.fullmatch(body.partition("\n")[0])
        if m:
            assert m[1] not in files, f"the guide shows {m[1]} twice"
            files[m[1]] = body
    return files


def test_the_guide_names_a_complete_distribution():
    files = guide_files()
    assert {"pyproject.toml", "zoo_my_plugin/__init__.py", "zoo_my_plugin/method.py",
            "zoo_my_plugin/kernel.py", "zoo_my_plugin/data.py", "zoo_my_plugin/task.py",
            "zoo_my_plugin/my-suite.toml", "tests/test_my_plugin.py"} <= set(files)
    pyproject = files["pyproject.toml"]
    for needed in ("[build-system]", "version = ", 'name = "bayes-meta-zoo-my-plugin"',
                   f'dependencies = ["{DISTRIBUTION}>=0.1"]', '[project.entry-points."zoo.plugins"]'):
        assert needed in pyproject, needed


def test_the_guide_imports_only_the_public_api(tmp_path):
    spec = importlib.util.spec_from_file_location("public_api", GUIDE.parents[1] / "tests" /
                                                  "test_public_api.py")
    public_api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(public_api)
    bad = []
    for rel, text in guide_files().items():
        if rel.endswith(".py"):
            (tmp_path / "f.py").write_text(text)
            bad += public_api.outside_the_surface(tmp_path / "f.py", rel)
    assert not bad, "the plugin guide imports outside the public API:\n" + "\n".join(bad)


DRIVER = r"""
import contextlib, io, json, sys

from zoo.cli import main

outputs = []
for command in json.loads(sys.argv[1]):
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        if command[0] == "pytest":
            import pytest

            code = int(pytest.main(command[1:]))
        else:
            code = main(command[1:])
    if code:
        sys.exit(f"{' '.join(command)} exited with {code}:\n{text.getvalue()[-3000:]}")
    outputs.append(text.getvalue())
print(json.dumps(outputs))
"""
"""Runs ``zoo`` commands (``["zoo", ...]``) and a ``pytest`` run, in order, in one process (one
import of torch, not one per command), and prints what each wrote, as a JSON list."""


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
    out = tmp_path / "results"
    bench = ("zoo", "bench")
    commands = [("zoo", "plugins", "--json"),
                ("pytest", "-q", "-p", "no:cacheprovider", "tests/test_my_plugin.py"),
                (*bench, "my-suite", "--device", "cpu", "--out", str(out / "a"), "--no-progress"),
                (*bench, "my-means-suite", "--device", "cpu", "--out", str(out / "b"),
                 "--no-progress"),
                ("zoo", "report", str(out / "b"), "--no-plots")]
    done = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(commands)], env=env, cwd=src,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    listing, _, _, _, table = json.loads(done.stdout.splitlines()[-1])

    plugins = json.loads(listing)
    mine = next(p for p in plugins if p["name"] == "my-plugin")
    assert mine["distribution"] == "bayes-meta-zoo-my-plugin" and mine["error"] is None
    assert mine["registered"]["methods"] == ["my-kernel-means", "my-method", "shrinkage"]
    assert mine["registered"]["kernels"] == ["my-laplace"]
    assert mine["registered"]["datasets"] == ["my-means", "my-stripes"]
    assert mine["registered"]["suites"] == ["my-means-suite", "my-suite"]
    assert mine["registered"]["tasks"] == ["my-means"]
    lines = [json.loads(x) for x in (out / "a" / "results.jsonl").read_text().splitlines()]
    assert sorted(line["method"] for line in lines) == ["my-kernel-means", "my-method", "protonet"]
    mine = next(line for line in lines if line["method"] == "my-method")
    assert mine["hparams"]["temperature"] == 5.0
    assert mine["provenance"]["distribution"] == "bayes-meta-zoo-my-plugin"
    kernel_means = next(line for line in lines if line["method"] == "my-kernel-means")
    assert kernel_means["kernel"] == "rbf[lengthscale=4]"  # its [methods] kernel, over the default
    lines = [json.loads(x) for x in (out / "b" / "results.jsonl").read_text().splitlines()]
    assert sorted(line["samples"] for line in lines) == [2, 8]
    assert "shrinkage" in table and "NLL" in table
