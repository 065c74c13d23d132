"""The core's import graph: no module imports, directly or through others, a module that imports
it back, for the pairs that used to form cycles (report <-> plots, builtins <-> data <->
plugins); and no cycle at all among module-level imports. Imports inside functions count for the
named pairs: a lazy import is still a dependency."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import zoo

ROOT = Path(zoo.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in out if m.split(".")[0] == "zoo"}


def graph(top_level_only: bool) -> dict[str, set[str]]:
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    return {name: {m for m in imports(path, top_level_only) if m in modules and m != name}
            for name, path in modules.items()}


def reachable(g: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in g.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.mark.parametrize("a, b", [("zoo.runner.report", "zoo.runner.plots"),
                                  ("zoo.builtins", "zoo.data"), ("zoo.data", "zoo.plugins")])
def test_former_cycles_are_gone(a, b):
    g = graph(top_level_only=False)
    assert not (b in reachable(g, a) and a in reachable(g, b)), f"{a} and {b} import each other"


def test_no_cycle_among_module_level_imports():
    g = graph(top_level_only=True)
    cycles = sorted(m for m in g if m in reachable(g, m))
    assert not cycles, f"modules on an import cycle: {cycles}"


@pytest.mark.parametrize("name", ["zoo.runner.plots", "zoo.runner.report", "zoo.data",
                                  "zoo.builtins", "zoo.plugins", "zoo.tasks.regression"])
def test_module_imports_first_in_a_fresh_interpreter(name):
    """Imported first, a module on a cycle can meet a half-initialised partner; none does."""
    subprocess.run([sys.executable, "-c", f"import {name}"], check=True, capture_output=True)
