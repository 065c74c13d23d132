"""The core's layers: every import of a ``zoo`` module, inside functions too, points to its own
layer or one below, and no modules import each other round a circle.

An import counts when it runs: those under ``if TYPE_CHECKING:`` (annotations only) do not. An
import of ``zoo.a.b`` from outside the package ``zoo.a`` also runs ``zoo/a/__init__.py``, so it
counts as an import of ``zoo.a`` as well.

The layers, from the bottom (a module belongs to the longest name below that is, or contains, it):

    foundations          the package's own names (imported when first used), errors, spec,
                         hparams, atomic io, paths, seeds
    mathematics          the algebra the families share (``zoo.inference``), kernels, gram, gp,
                         jitter and the finite-value checks, gaussians, variational, polyagamma,
                         stein, expectations, control variates, metrics, unrolled Adam;
                         also batching (episodes stacked for one vmapped call, whose deferred
                         checks the numerics use) and backbones (the networks methods build on)
    data and episodes    data sets, samplers
    task kinds           what an episode is, what a method returns, checks, scores, the
                         validation key, the figures as data
    methods              the method bases and their families, the baselines
    plugin host          hookspecs, the registry, the built-ins, the catalogue of the zoo's
                         distributions
    runner               suites, cells, training, results, reports, figures; the test helpers and
                         Bayesian optimisation, which run cells
    command line         ``zoo ...``, the runner's commands and the listings they print, and the
                         Python API (``zoo.bench``, ``zoo.load_results``, ...)
"""

from __future__ import annotations

import ast
from pathlib import Path

import zoo

ROOT = Path(zoo.__file__).parent

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundations", ("zoo", "zoo._lazy", "zoo.errors", "zoo.spec", "zoo.hparams", "zoo.io",
                     "zoo.paths", "zoo.seeds")),
    ("mathematics", ("zoo.inference", "zoo.kernels", "zoo.gram", "zoo.gp", "zoo.jitter", "zoo.gaussians",
                     "zoo.variational", "zoo.polyagamma", "zoo.stein", "zoo.stein_kernels",
                     "zoo.expectations", "zoo.control_variates", "zoo.metrics", "zoo.unrolled",
                     "zoo.batching", "zoo.backbones")),
    ("data and episodes", ("zoo.data", "zoo.episode")),
    ("task kinds", ("zoo.tasks",)),
    ("methods", ("zoo.method", "zoo.tasks.methods", "zoo.families", "zoo.baselines",
                 "zoo.control_variates.methods")),
    ("plugin host", ("zoo.hookspecs", "zoo.plugins", "zoo.builtins", "zoo.catalogue")),
    ("runner", ("zoo.runner", "zoo.testing", "zoo.bayesopt")),
    ("command line", ("zoo.cli", "zoo.runner.cli", "zoo.listing", "zoo.api")),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _typing_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:``."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The ``zoo`` modules that importing ``name`` (from ``path``) runs, directly."""
    tree = ast.parse(path.read_text())
    skip = _typing_only(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets.add(base)
            targets |= {f"{base}.{a.name}" for a in node.names}
    out = set()
    for target in targets:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):  # the packages on the way run their __init__
            prefix = ".".join(parts[:i])
            if prefix in known and prefix != name and not name.startswith(prefix + "."):
                out.add(prefix)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def layer(name: str) -> int:
    best, rank = "", -1
    for i, (_, members) in enumerate(LAYERS):
        for m in members:
            inside = name.startswith(m + ".") and m != "zoo"  # the package's own __init__ only
            if (name == m or inside) and len(m) > len(best):
                best, rank = m, i
    return rank


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each strongly connected group of modules (Tarjan), as a path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(g):
        if v not in index:
            visit(v)
    return [_circle(g, group) for group in groups]


def _circle(g: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start = min(group)
    paths = {start: [start]}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(g[v] & group):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                todo.append(w)
    raise AssertionError("a strongly connected group without a circle")


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in modules() if layer(m) < 0)
    assert not unplaced, f"modules in no layer (add them to LAYERS): {unplaced}"


def test_no_import_circle():
    found = circles(graph())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_imports_flow_downward():
    g = graph()
    upward = sorted(f"{a} ({LAYERS[layer(a)][0]}) imports {b} ({LAYERS[layer(b)][0]})"
                    for a, targets in g.items() for b in targets if layer(b) > layer(a))
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


FETCH_THE_REGISTRY = {
    "zoo.plugins": "where it is kept",
    "zoo.cli": "the command line", "zoo.runner.cli": "the command line",
    "zoo.listing": "the command line's listings",
    "zoo.api": "the Python API, the command line's twin",
    "zoo.runner.bench": "the bench entry (run_suite)",
    "zoo.runner.executors": "the entry of a bench's worker process",
    "zoo.bayesopt": "a suite's entry function, which runs a whole experiment",
    "zoo.testing": "the conformance checks",
}


def fetches_the_registry(path: Path) -> bool:
    """Whether a module takes ``zoo.plugins.registry`` (the process's registry) when it runs."""
    tree = ast.parse(path.read_text())
    skip = _typing_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "zoo.plugins" and \
                any(a.name == "registry" for a in node.names):
            return True
        if isinstance(node, ast.Attribute) and node.attr == "registry" and \
                isinstance(node.value, ast.Name) and node.value.id == "plugins":
            return True
    return False


def test_library_code_is_given_the_registry():
    """The plugin registry is passed down; only the entry points fetch the process's."""
    fetching = {m for m, p in modules().items() if fetches_the_registry(p)}
    assert fetching <= set(FETCH_THE_REGISTRY), \
        f"modules that fetch the process's registry instead of taking one: " \
        f"{sorted(fetching - set(FETCH_THE_REGISTRY))}"
    assert "zoo.runner.bench" in fetching


def test_the_checks_see_what_they_check():
    """The graph finds a function-level import, skips a typing-only one, counts a package's
    ``__init__``, and a circle is found and named."""
    g = graph()
    assert "zoo.runner.plots" in g["zoo.runner.report"]  # imported inside a function
    assert "zoo.tasks" in g["zoo.runner.collect"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert layer("zoo.tasks.methods") > layer("zoo.tasks.regression") > layer("zoo.data.base")
