"""The distributions' metadata: one naming scheme, an ``all`` extra that is every plugin, and every
third-party module a package imports declared as a dependency of its distribution."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
import tomllib

from zoo.hookspecs import DISTRIBUTION

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml"))

IMPORT_TO_DISTRIBUTION = {"sklearn": "scikit-learn", "pyro": "pyro-ppl", "PIL": "pillow"}
"""Import names whose distribution is called otherwise (the rest are called as they import)."""

CORE_OPTIONAL = {"ray": "the ray extra", "learn2learn": "imported for the plugins that declare it",
                 "gym": "learn2learn's import, quieted", "gym_notices": "gym's notice text",
                 "tensorboard": "the tensorboard extra", "pandas": "the pandas extra",
                 "psutil": "the copy Ray ships, imported only on the ray executor's path"}
"""Modules the core imports only inside functions, for an extra or for a plugin that declares them."""


def project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def requirement_name(req: str) -> str:
    return re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0].lower()


def third_party_imports(package: Path) -> set[str]:
    """Top-level names of every absolute import in ``package`` (also inside functions), less the
    standard library and the zoo's own packages."""
    names = set()
    for file in package.rglob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "__future__"
            and n != "zoo" and not n.startswith("zoo_")}


def test_names_follow_one_scheme():
    assert project(ROOT)["name"] == DISTRIBUTION
    for folder in PLUGINS:
        assert project(folder)["name"] == f"{DISTRIBUTION}-{folder.name.replace('_', '-')}", folder


def test_the_all_extra_is_every_plugin():
    extra = {requirement_name(r) for r in project(ROOT)["optional-dependencies"]["all"]}
    assert extra == {project(f)["name"] for f in PLUGINS}


@pytest.mark.parametrize("folder", PLUGINS, ids=lambda f: f.name)
def test_a_plugin_declares_what_it_imports(folder):
    declared = {requirement_name(r) for r in project(folder)["dependencies"]}
    assert DISTRIBUTION in declared
    (package,) = folder.glob("zoo_*/__init__.py")
    needed = {IMPORT_TO_DISTRIBUTION.get(n, n).lower()
              for n in third_party_imports(package.parent)}
    assert needed <= declared, f"{folder.name} imports {sorted(needed - declared)} undeclared"


def test_the_core_declares_what_it_imports():
    declared = {requirement_name(r) for r in project(ROOT)["dependencies"]}
    extras = {requirement_name(r) for reqs in project(ROOT)["optional-dependencies"].values()
              for r in reqs}
    imported = third_party_imports(ROOT / "zoo") - set(CORE_OPTIONAL)
    needed = {IMPORT_TO_DISTRIBUTION.get(n, n).lower() for n in imported}
    assert needed <= declared, f"the core imports {sorted(needed - declared)} undeclared"
    assert {"ray", "tensorboard", "pandas"} <= extras


def test_the_learn2learn_recipe_is_the_one_the_plugins_print():
    """The script a source checkout runs and the command a missing learn2learn prints agree."""
    from zoo.families.inner_loop import LEARN2LEARN_INSTALL

    script = (ROOT / "tools" / "install-learn2learn.sh").read_text()
    for step in LEARN2LEARN_INSTALL.split(" && "):
        assert step.replace("pip install ", '-m pip install "$@" ') in script, step


def test_a_missing_learn2learn_is_an_error_with_the_command(monkeypatch):
    from zoo.families import inner_loop

    inner_loop.require_learn2learn("bayes-meta-zoo-maml")  # installed here: nothing happens
    monkeypatch.setattr(inner_loop, "find_spec", lambda name: None)
    with pytest.raises(ImportError) as info:
        inner_loop.require_learn2learn("bayes-meta-zoo-maml")
    assert "bayes-meta-zoo-maml needs learn2learn" in str(info.value)
    assert inner_loop.LEARN2LEARN_INSTALL in str(info.value)
