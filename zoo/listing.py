"""What the listing commands show (``zoo plugins``, ``methods``, ``datasets``, ``tasks``, ``suites``),
read from the plugin registry once and kept on disk until something installed changes.

Loading the registry imports torch and every plugin (seconds); listing what is installed should
not. The listings are stored under the cache directory (:func:`zoo.paths.cache_root`) by a
fingerprint of what they are made of: the Python, every installed distribution (the name and time
of its metadata folder, whose name holds the version), the ``zoo.plugins`` entry points, the size
and modification time of every source and suite file of the core and of each plugin's package, and
the plugin switches (``ZOO_DISABLE_PLUGINS``, ``ZOO_STRICT_PLUGINS``). Computing the fingerprint
imports nothing of the zoo's beyond this module.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from zoo.hookspecs import ENTRY_POINT_GROUP
from zoo.paths import cache_root

VERSION = 2
"""Bumped when the layout of a stored listing changes."""

KEEP = 8
"""Stored listings kept (the newest; one per environment and state of the installed code)."""


def listings() -> dict[str, list[dict[str, Any]]]:
    """``{"plugins": [...], "methods": [...], "datasets": [...], "tasks": [...], "suites": [...]}``,
    from the store when its fingerprint matches, else computed from the registry and stored (a
    process that has loaded its registry already lists from it)."""
    host = sys.modules.get("zoo.plugins")  # not imported: no registry loaded (and none imported)
    if host is not None and host.loaded_registry() is not None:
        return json.loads(json.dumps(compute(), default=str))
    path = cache_root() / "listings" / f"{fingerprint()}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    data = json.loads(json.dumps(compute(), default=str))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
            json.dump(data, f)
        os.replace(f.name, path)
        for old in sorted(path.parent.glob("*.json"), key=lambda p: p.stat().st_mtime)[:-KEEP]:
            old.unlink(missing_ok=True)
    except OSError:  # a read-only cache: list without storing
        pass
    return data


def fingerprint() -> str:
    """A digest of everything a listing depends on (see the module doc)."""
    h = hashlib.sha256(f"{VERSION}\0{sys.version}\0{sys.prefix}\0".encode())
    for var in ("ZOO_DISABLE_PLUGINS", "ZOO_STRICT_PLUGINS"):
        h.update(f"{var}={os.environ.get(var, '')}\0".encode())
    for entry in sys.path:  # installed distributions: their metadata folders' names and times
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for name in names:
            if name.endswith((".dist-info", ".egg-info", ".egg-link", ".pth")):
                path = os.path.join(entry or ".", name)
                h.update(f"\0{path}\0{os.stat(path).st_mtime_ns}".encode())
    roots = {"zoo"}
    for ep in sorted(md.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value)):
        h.update(f"\0{ep.name}={ep.value}".encode())
        roots.add(ep.value.split(":")[0].split(".")[0])
    for root in sorted(roots):
        for file in _source_files(root):
            st = file.stat()
            h.update(f"\0{file}\0{st.st_mtime_ns}\0{st.st_size}".encode())
    return h.hexdigest()[:32]


def _source_files(module: str) -> list[Path]:
    """The ``.py`` and ``.toml`` files of top-level ``module``, found without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return sorted(f for loc in spec.submodule_search_locations for pattern in ("*.py", "*.toml")
                      for f in Path(loc).rglob(pattern))
    return [Path(spec.origin)] if spec.origin and Path(spec.origin).is_file() else []


def first_paragraph(doc: str | None) -> str:
    """A docstring's first paragraph on one line (``-`` if none): whole sentences, where its first
    physical line may stop in the middle of one."""
    return " ".join((doc or "").strip().split("\n\n")[0].split()) or "-"


def compute() -> dict[str, list[dict[str, Any]]]:
    """The listings, from the process's registry."""
    from zoo.errors import ZooError
    from zoo.plugins import registry
    from zoo.runner.suite import load_suite, suite_names

    reg = registry()
    methods = sorted(reg.items("methods").items())
    suites = []
    for name in suite_names(reg):
        try:
            suite = load_suite(name, reg)
        except ZooError as exc:  # one invalid suite is named; the others are still listed
            suites.append({"name": name, "plugin": reg.owner("suites", name), "task": "-",
                           "description": "INVALID (see below)", "source": "-",
                           "error": str(exc)})
            continue
        entry = suite.settings["entry"]
        suites.append({"name": name, "plugin": reg.owner("suites", name),
                       "task": "entry" if entry else suite.settings["task"],
                       "description": suite.settings["description"], "source": suite.source,
                       "error": None, **({"entry": entry} if entry else {})})
    return {
        "plugins": [r.to_json() for r in reg.plugins],
        "datasets": [{"name": n, "plugin": reg.owner("datasets", n),
                      "about": first_paragraph(reg.get("datasets", n).__doc__)}
                     for n in reg.names("datasets")],
        "methods": [{"name": n, "plugin": reg.owner("methods", n), "task": cls.task,
                     "defaults": cls.all_defaults(), "hparams": cls.describe_hparams()}
                    for n, cls in methods],
        "tasks": [{"name": n, "plugin": reg.owner("tasks", n), "settings": dict(task.settings),
                   "methods": sorted(m for m, c in methods if getattr(c, "task", None) == n),
                   "about": first_paragraph(type(task).__doc__)}
                  for n, task in sorted(reg.items("tasks").items())],
        "suites": suites,
    }
