"""The distributions as a user gets them: wheels of the core and of every plugin built with
``python -m build``, holding every file their packages read at run time; the core, protonet and
the README's plugin installed from their wheels (not editable, not the source tree) into a fresh
virtual environment, which then lists its plugins, runs ``zoo bench quick --methods protonet``
and a plugin's conformance check.

The fresh environment gets the third-party packages (torch, ...) of the one running the tests
through a ``.pth`` file naming a folder of links to them; the zoo's own distributions are left out
of that folder, so the zoo it runs is the one its wheels installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from zoo.hookspecs import DISTRIBUTION

from .test_plugin_template import guide_files

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = [ROOT, *sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml"))]
OURS = ("zoo", "zoo_", "bayes_meta_zoo", "__editable__", "_zoo", "easy-install.pth")


def run(*args: str | Path, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def copy_project(src: Path, dst: Path) -> Path:
    """The files of a project that a build reads (its tracked files, not build outputs), so that
    building leaves nothing in the source tree."""
    listed = run("git", "-C", src, "ls-files", "--", ".").stdout.split()
    for rel in listed:
        if src == ROOT and rel.startswith(("plugins/", "tests/", "benchmarks/")):
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, dst / rel)
    return dst


def package_data(project: Path) -> set[str]:
    """Tracked files other than Python source inside the project's packages."""
    files = run("git", "-C", project, "ls-files", "--", ".").stdout.split()
    top = "zoo/" if project == ROOT else "zoo_"
    return {f for f in files if f.startswith(top) and not f.endswith(".py")}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout to know the tracked files")
    work, out = tmp_path_factory.mktemp("build"), tmp_path_factory.mktemp("dist")

    def build(project: Path) -> Path:
        src = copy_project(project, work / project.name)
        run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", out / project.name,
            src)
        (wheel,) = (out / project.name).glob("*.whl")
        inside = set(zipfile.ZipFile(wheel).namelist())
        missing = package_data(project) - inside
        assert not missing, f"{wheel.name} lacks {sorted(missing)}"
        return wheel

    # the builds are independent processes that mostly wait on the disk: a few at a time
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        return {p.name: w for p, w in zip(PROJECTS, pool.map(build, PROJECTS))}


@pytest.mark.slow
def test_every_project_builds_a_wheel_under_our_names(wheels):
    assert wheels[ROOT.name].name.startswith(DISTRIBUTION.replace("-", "_") + "-")
    assert {w.name.split("-")[0] for w in wheels.values()} == {
        DISTRIBUTION.replace("-", "_") + ("" if p == ROOT else "_" + p.name) for p in PROJECTS}
    core = zipfile.ZipFile(wheels[ROOT.name])
    assert "zoo/suites/quick.toml" in core.namelist()
    assert not any(n.startswith(("tests/", "plugins/", "benchmarks/")) for n in core.namelist())


@pytest.mark.slow
def test_the_core_and_protonet_from_wheels_run_in_a_fresh_environment(wheels, tmp_path):
    venv, base = tmp_path / "venv", tmp_path / "base"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))")
                .stdout.strip())
    base.mkdir()
    here = Path(sysconfig.get_path("purelib"))
    for entry in here.iterdir():
        if not entry.name.lower().startswith(OURS) and entry.suffix != ".pth":
            (base / entry.name).symlink_to(entry)
    (site / "base-packages.pth").write_text(f"{base}\n")
    guide = tmp_path / "guide"
    for rel, text in guide_files().items():
        (guide / rel).parent.mkdir(parents=True, exist_ok=True)
        (guide / rel).write_text(text)
    run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", tmp_path / "mine",
        guide)
    (mine,) = (tmp_path / "mine").glob("*.whl")
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index",
        wheels[ROOT.name], wheels["protonet"], mine)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(ZOO_STRICT_PLUGINS="1", PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    # the cache directory is this environment's (the rendered glyphs are reused; listings are
    # stored per environment)
    user = tmp_path / "user"  # a working folder with no source tree in or above it
    user.mkdir()

    def zoo(*args: str) -> str:
        return run(venv / "bin" / "zoo", *args, env=env, cwd=user).stdout

    # the listing as JSON and a plugin's conformance check in one process (one import of torch)
    checks = ("import contextlib, io, json, zoo, zoo_protonet, zoo_my_plugin\n"
              "from zoo.cli import main\n"
              "from zoo.testing import check_method\n"
              "listing = io.StringIO()\n"
              "with contextlib.redirect_stdout(listing):\n"
              "    assert main(['plugins', '--json']) == 0\n"
              "check_method('protonet')\n"
              "print(json.dumps({'plugins': json.loads(listing.getvalue()),\n"
              "                  'files': [m.__file__ for m in (zoo, zoo_protonet, zoo_my_plugin)]}))")
    found = json.loads(run(python, "-c", checks, env=env, cwd=user).stdout.splitlines()[-1])
    assert all(Path(f).is_relative_to(site) for f in found["files"]), found["files"]
    listed = {r["name"]: r for r in found["plugins"]}
    assert set(listed) == {"zoo", "protonet", "my-plugin"}
    assert listed["protonet"]["distribution"] == f"{DISTRIBUTION}-protonet"
    assert listed["zoo"]["distribution"] == DISTRIBUTION and listed["zoo"]["version"]
    assert "protonet" in zoo("plugins")  # the installed console script
    out = user / "results"
    run(venv / "bin" / "zoo", "bench", "quick", "--methods", "protonet,my-method", "--device", "cpu",
        "--out", out, "--no-progress", "--set", "ways=3", "--set", "shots=1",
        "--set", "test_datasets=glyphs", "--set", "train_episodes=2", "--set", "val_episodes=1",
        "--set", "val_every=2", "--set", "test_episodes=2", env=env, cwd=user)
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["method"] for r in lines) == ["my-method", "protonet"]
    assert all(r["threads"] == 1 for r in lines)
