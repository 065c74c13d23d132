"""The declared public API: ``zoo.__all__`` and the ``__all__`` of the entry points in
``zoo.PUBLIC_MODULES``. Every exported name resolves, the type-checking imports of a lazy entry
point name the object it exports, and every plugin in this repository (its package and its tests)
imports from the core only names of that surface."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import zoo

REPO = Path(zoo.__file__).resolve().parent.parent
PLUGIN_FILES = sorted(p for p in (REPO / "plugins").glob("*/*/**/*.py")
                      if p.relative_to(REPO / "plugins").parts[1].startswith(("zoo_", "tests")))


def exported(module: str) -> list[str]:
    names = importlib.import_module(module).__all__
    assert len(set(names)) == len(names), f"{module}.__all__ names something twice"
    return names


@pytest.mark.parametrize("module", zoo.PUBLIC_MODULES)
def test_every_exported_name_resolves(module):
    entry = importlib.import_module(module)
    missing = [name for name in exported(module) if not hasattr(entry, name)]
    assert not missing, f"{module}.__all__ names what {module} does not have: {missing}"


def type_checking_imports(path: Path) -> list[tuple[str, str, int]]:
    """(home, name, line) of each import under ``if TYPE_CHECKING:`` at the top of ``path``."""
    out = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module.startswith("zoo"):
                    out += [(stmt.module, a.name, stmt.lineno) for a in stmt.names]
    return out


@pytest.mark.parametrize("module", zoo.PUBLIC_MODULES)
def test_type_checking_imports_match_what_is_exported(module):
    """A lazy entry point lists its names twice (for type checkers and at run time): both agree."""
    entry = importlib.import_module(module)
    wrong = [f"{Path(entry.__file__).name}:{line} {name} from {home}"
             for home, name, line in type_checking_imports(Path(entry.__file__))
             if name in exported(module)
             and getattr(importlib.import_module(home), name) is not getattr(entry, name)]
    assert not wrong, f"type-checking imports that are not what {module} exports: {wrong}"


def test_public_modules_are_named_in_the_package_docstring():
    assert all(f"``{m}``" in zoo.__doc__ for m in zoo.PUBLIC_MODULES)


def test_entry_points_that_read_results_import_no_torch():
    code = ("import sys, zoo, zoo.tasks, zoo.runner, zoo.metrics; "
            "assert 'torch' not in sys.modules, 'importing an entry point imported torch'")
    subprocess.run([sys.executable, "-c", code], check=True)


def outside_the_surface(path: Path, where: str) -> list[str]:
    """``where:line name`` for each import of the core in ``path`` (inside functions too) that is
    not a public module or a name in a public module's ``__all__``."""
    public = set(zoo.PUBLIC_MODULES)
    tree = ast.parse(path.read_text())
    bad = []
    zoo_aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != "zoo":
                    continue
                if a.name not in public:
                    bad.append(f"{where}:{node.lineno} import {a.name}")
                elif a.name == "zoo":
                    zoo_aliases.add(a.asname or "zoo")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "zoo":
                continue
            if node.module not in public:
                bad.append(f"{where}:{node.lineno} from {node.module} import "
                           + ", ".join(a.name for a in node.names))
                continue
            for a in node.names:
                if a.name not in exported(node.module) and f"{node.module}.{a.name}" not in public:
                    bad.append(f"{where}:{node.lineno} from {node.module} import {a.name}")
    for node in ast.walk(tree):  # zoo.<name> after ``import zoo``
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in zoo_aliases and node.attr not in zoo.__all__):
            bad.append(f"{where}:{node.lineno} zoo.{node.attr}")
    return sorted(bad, key=lambda line: int(line.split(":")[1].split()[0]))


def test_plugin_files_are_found():
    assert len({p.relative_to(REPO / "plugins").parts[0] for p in PLUGIN_FILES}) >= 10


def test_plugins_import_only_the_public_api():
    bad = [line for path in PLUGIN_FILES
           for line in outside_the_surface(path, str(path.relative_to(REPO)))]
    assert not bad, ("plugins import from the core outside its public API (zoo.__all__ and the "
                     "__all__ of zoo.PUBLIC_MODULES); import these names from an entry point, or "
                     "export them there:\n" + "\n".join(bad))


def test_the_check_catches_an_internal_import(tmp_path):
    """The walk sees imports inside functions, private names of a public module and attributes."""
    plugin = tmp_path / "probe.py"
    plugin.write_text("import zoo\nfrom zoo import Method\nfrom zoo.families import GPMethod\n\n\n"
                      "def f():\n"
                      "    from zoo.gp import SitePosterior\n"
                      "    from zoo.kernels import _sqdist\n"
                      "    import zoo.runner.storage\n"
                      "    return zoo.hookimpl, zoo.plugins\n")
    assert outside_the_surface(plugin, "probe.py") == [
        "probe.py:7 from zoo.gp import SitePosterior", "probe.py:8 from zoo.kernels import _sqdist",
        "probe.py:9 import zoo.runner.storage", "probe.py:10 zoo.plugins"]
