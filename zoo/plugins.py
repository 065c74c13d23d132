"""The plugin host: loads every ``zoo.plugins`` entry point in isolation and collects what it registers.

A plugin that fails to import or to register is recorded with its error and skipped; nothing it
registered before failing is kept. ``ZOO_STRICT_PLUGINS=1`` turns any failure into a
:class:`~zoo.errors.PluginError`; ``ZOO_DISABLE_PLUGINS=a,b`` blocks plugins by entry-point name.

Names are never resolved by load order. The zoo's built-ins keep their names; a name claimed by
two plugins goes to neither, and both are refused with an error that names both distributions.
So does an entry-point name that two distributions publish (an impostor ``protonet`` beside the
genuine one): neither is loaded, and ``zoo plugins`` lists both with that error. Nothing a
process can see tells the genuine claimant from the impostor: entry-point names are chosen by
whoever publishes the plugin (the old "first in sort order wins" let ``aaa`` take ``protonet``),
and install times change with every upgrade or reinstall. Refusing both makes a collision loud
and leaves the choice to the user (uninstall one, or ``ZOO_DISABLE_PLUGINS``).

:meth:`Registry.provenance` says which distribution, version and code (a SHA-256 over the source
files of the providing packages, and one over the zoo's own) stands behind a name, so that
results can carry it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import importlib.util
import logging
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from zoo import hookspecs
from zoo.errors import PluginError, UnknownNameError

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
KINDS = tuple(hookspecs.HOOKS)
SLOW_IMPORT_SECONDS = 5.0
"""A plugin import longer than this is named while it runs and when it ends."""
_SINGULAR = {"methods": "method", "backbones": "backbone", "kernels": "kernel",
             "datasets": "data set", "suites": "suite", "estimators": "estimator",
             "tasks": "task kind"}


@dataclass
class PluginRecord:
    """What one plugin is and what it registered (the rows of ``zoo plugins``)."""

    name: str
    distribution: str | None
    version: str | None
    hooks: list[str] = field(default_factory=list)
    registered: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})
    error: str | None = None
    disabled: bool = False
    import_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "distribution": self.distribution, "version": self.version,
                "hooks": self.hooks, "registered": self.registered, "error": self.error,
                "disabled": self.disabled, "import_seconds": self.import_seconds}


class Registry:
    """Components by kind and name, and the record of every plugin that tried to add some."""

    def __init__(self) -> None:
        self._items: dict[str, dict[str, Any]] = {k: {} for k in KINDS}
        self._owner: dict[str, dict[str, str]] = {k: {} for k in KINDS}
        self._modules: dict[str, ModuleType] = {}
        self.plugins: list[PluginRecord] = []

    def get(self, kind: str, name: str) -> Any:
        try:
            return self._items[kind][name]
        except KeyError:
            raise UnknownNameError(_SINGULAR[kind], name, self._items[kind]) from None

    def names(self, kind: str) -> list[str]:
        return sorted(self._items[kind])

    def owner(self, kind: str, name: str) -> str:
        self.get(kind, name)
        return self._owner[kind][name]

    def provenance(self, kind: str, name: str) -> dict[str, Any]:
        """Who provides ``name`` and with what code: plugin, distribution, version, the top-level
        ``packages`` of the plugin's module and of the component's, their ``digest``
        (:func:`code_digest`), and ``core``: the zoo's own distribution, version and the digest
        of the whole ``zoo`` package.

        Put into a result (and a cell's identity), it makes a result depend on the code that
        produced it: a different plugin behind the same name, or a changed core (a backbone, a
        sampler, the trainer, the metrics, the GP algebra: the whole package, as any of it may
        change a number), gives a different cell.
        """
        obj = self.get(kind, name)
        plugin = self._owner[kind][name]
        record = next((r for r in self.plugins if r.name == plugin), None)
        module = self._modules.get(plugin)
        packages = {module.__name__ if module else "",
                    getattr(obj, "__module__", None) or ""}
        top = tuple(sorted({p.partition(".")[0] for p in packages} - {""}))
        return {"plugin": plugin, "distribution": record.distribution if record else None,
                "version": record.version if record else None, "packages": list(top),
                "digest": code_digest(top), "core": core_provenance()}

    def items(self, kind: str) -> dict[str, Any]:
        return dict(self._items[kind])

    def register(self, kind: str, name: str, obj: Any, owner: str) -> None:
        """Add one component outside the entry points (tests, notebooks); a taken name is an error.
        ``owner`` is what ``zoo plugins`` and ``Registry.owner`` report for it."""
        if name in self._items[kind]:
            raise PluginError(f"{_SINGULAR[kind]} {name!r} is already registered by plugin "
                              f"{self._owner[kind][name]!r}; choose another name")
        self._stager(kind, self._items[kind])(name, obj)
        self._owner[kind][name] = owner

    def unregister(self, kind: str, name: str) -> None:
        """Remove a component added with :meth:`register`."""
        self.get(kind, name)
        del self._items[kind][name], self._owner[kind][name]

    # -- loading -------------------------------------------------------------------------------

    def stage(self, pm: pluggy.PluginManager, module: ModuleType,
              record: PluginRecord) -> dict[str, dict[str, Any]] | None:
        """Call one plugin's hooks into a staging area; ``None`` (and ``record.error``) on failure."""
        staged: dict[str, dict[str, Any]] = {k: {} for k in KINDS}
        record.hooks = sorted(h for h in hookspecs.HOOKS.values() if hasattr(module, h))
        pm.register(module, name=record.name)
        try:
            for kind, hook in hookspecs.HOOKS.items():
                for impl in getattr(pm.hook, hook).get_hookimpls():
                    if impl.plugin is module:
                        impl.function(register=self._stager(kind, staged[kind]))
        except Exception as exc:  # isolation: a broken plugin must not take the host down
            pm.unregister(module)
            record.error = _describe(exc)
            return None
        self._modules[record.name] = module
        return staged

    def merge(self, record: PluginRecord, staged: dict[str, dict[str, Any]]) -> None:
        for kind, entries in staged.items():
            self._items[kind].update(entries)
            self._owner[kind].update(dict.fromkeys(entries, record.name))
            record.registered[kind] = sorted(entries)

    @staticmethod
    def _stager(kind: str, into: dict[str, Any]):
        def register(name_or_obj: Any, obj: Any = None) -> None:
            if obj is None:  # register(MethodClass): the name is the class's `name`
                obj, name = name_or_obj, getattr(name_or_obj, "name", None)
            else:
                name = name_or_obj
            if not isinstance(name, str) or not NAME_RE.match(name):
                raise PluginError(f"{_SINGULAR[kind]} name {name!r} must be lowercase words "
                                  "joined by hyphens, e.g. 'my-method'")
            if name in into:
                raise PluginError(f"{_SINGULAR[kind]} {name!r} registered twice by one plugin")
            into[name] = obj
        return register


def _describe(exc: BaseException) -> str:
    last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" (at {last[0].filename}:{last[0].lineno})" if last else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _env_list(value: str | None) -> set[str]:
    return {v.strip() for v in (value or "").split(",") if v.strip()}


def load(*, strict: bool | None = None, disabled: Iterable[str] | None = None,
         entry_points: Iterable[md.EntryPoint] | None = None) -> Registry:
    """Build a fresh :class:`Registry` from the built-ins and every installed entry point."""
    from zoo import builtins

    strict = os.environ.get("ZOO_STRICT_PLUGINS", "") not in ("", "0") if strict is None else strict
    blocked = _env_list(os.environ.get("ZOO_DISABLE_PLUGINS")) if disabled is None else set(disabled)
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    reg = Registry()

    core = PluginRecord("zoo", hookspecs.DISTRIBUTION, _version(hookspecs.DISTRIBUTION))
    reg.plugins.append(core)
    staged_core = reg.stage(pm, builtins, core)
    if staged_core is None:
        raise PluginError(f"the zoo's own components failed to register: {core.error}")
    reg.merge(core, staged_core)

    eps = md.entry_points(group=hookspecs.ENTRY_POINT_GROUP) if entry_points is None else entry_points
    staged: list[tuple[PluginRecord, ModuleType, dict[str, dict[str, Any]]]] = []
    for ep, rivals in _by_name(eps):
        dist = getattr(ep, "dist", None)
        record = PluginRecord(ep.name, dist.name if dist else None, dist.version if dist else None)
        reg.plugins.append(record)
        if rivals:
            record.error = _shadowed(ep, rivals)
            continue
        if ep.name in blocked:
            record.disabled = True
            continue
        try:
            with _timed_import(record):
                module = ep.load()
        except Exception as exc:  # isolation, as above
            record.error = _describe(exc)
        else:
            entries = reg.stage(pm, module, record)
            if entries is not None:
                staged.append((record, module, entries))

    claims: dict[tuple[str, str], list[PluginRecord]] = {}
    for record, _, entries in staged:
        for kind, names in entries.items():
            for name in names:
                claims.setdefault((kind, name), []).append(record)
    for record, module, entries in staged:
        clash = _clash(reg, record, entries, claims)
        if clash:
            pm.unregister(module)
            record.error = clash
        else:
            reg.merge(record, entries)

    for record in reg.plugins:
        if record.error:
            log.warning("plugin %r skipped: %s", record.name, record.error)
            if strict:
                raise PluginError(f"plugin {record.name!r} failed ({record.error}); "
                                  "unset ZOO_STRICT_PLUGINS to skip it instead")
    return reg


@contextmanager
def _timed_import(record: PluginRecord) -> Iterator[None]:
    """Import one plugin, saying which one while it takes longer than :data:`SLOW_IMPORT_SECONDS`
    (every command that loads the plugins waits for it), and how long it took in the end."""
    def still() -> None:
        log.warning("still importing plugin %r (%s) after %.0f s; every zoo command that loads "
                    "the plugins waits for it (ZOO_DISABLE_PLUGINS=%s skips it)", record.name,
                    _dist(record), SLOW_IMPORT_SECONDS, record.name)

    timer = threading.Timer(SLOW_IMPORT_SECONDS, still)
    timer.daemon = True
    start = time.perf_counter()
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        record.import_seconds = round(time.perf_counter() - start, 3)
        if record.import_seconds > SLOW_IMPORT_SECONDS:
            log.warning("plugin %r (%s) took %.1f s to import; every zoo command that loads the "
                        "plugins waits for it (ZOO_DISABLE_PLUGINS=%s skips it)", record.name,
                        _dist(record), record.import_seconds, record.name)


def _by_name(eps: Iterable[md.EntryPoint]) -> list[tuple[md.EntryPoint, list[md.EntryPoint]]]:
    """Each entry point in name order with the others of its name from other distributions (or
    with other targets): an entry-point name claimed twice goes to neither, like a component's
    name. The same distribution seen twice (two paths to one installation) is one claim."""
    groups: dict[str, list[md.EntryPoint]] = {}
    for ep in eps:
        same = groups.setdefault(ep.name, [])
        if not any(_claimant(ep) == _claimant(other) for other in same):
            same.append(ep)
    return [(ep, [o for o in groups[name] if o is not ep])
            for name in sorted(groups) for ep in groups[name]]


def _claimant(ep: md.EntryPoint) -> tuple[str | None, str]:
    dist = getattr(ep, "dist", None)
    return (dist.name if dist else None), ep.value


def _shadowed(ep: md.EntryPoint, rivals: list[md.EntryPoint]) -> str:
    def who(e: md.EntryPoint) -> str:
        dist = getattr(e, "dist", None)
        return (f"distribution {dist.name} {dist.version}" if dist else "no distribution") + \
            f", module {e.value}"

    both = " and ".join(f"({who(e)})" for e in [ep, *rivals])
    return (f"the plugin name {ep.name!r} is claimed by {both}; neither is loaded. Uninstall one "
            "of them (pip uninstall DISTRIBUTION)")


def _clash(reg: Registry, record: PluginRecord, entries: dict[str, dict[str, Any]],
           claims: dict[tuple[str, str], list[PluginRecord]]) -> str | None:
    """Why ``record`` may not have its names: one is built in or claimed by another plugin."""
    for kind, names in entries.items():
        for name in sorted(names):
            if name in reg._items[kind]:
                holder = next(r for r in reg.plugins if r.name == reg._owner[kind][name])
                return (f"{_SINGULAR[kind]} {name!r} is already registered by plugin "
                        f"{holder.name!r} ({_dist(holder)}); plugin {record.name!r} ({_dist(record)}) "
                        "may not replace it: rename its component")
            others = [r for r in claims[kind, name] if r is not record]
            if others:
                both = " and ".join(f"plugin {r.name!r} ({_dist(r)})" for r in [record, *others])
                return (f"{_SINGULAR[kind]} {name!r} is claimed by {both}; neither gets it. "
                        "Uninstall one of them or block one with ZOO_DISABLE_PLUGINS="
                        f"{others[0].name}")
    return None


def _dist(record: PluginRecord) -> str:
    if record.distribution is None:
        return "no distribution"
    return f"distribution {record.distribution} {record.version}"


def core_provenance() -> dict[str, str | None]:
    """The zoo's own code: its distribution, version and :func:`code_digest` of ``zoo``."""
    return {"distribution": hookspecs.DISTRIBUTION, "version": _version(hookspecs.DISTRIBUTION),
            "digest": code_digest(("zoo",))}


@cache
def code_digest(packages: tuple[str, ...]) -> str:
    """SHA-256 over the ``.py`` files (path and bytes) of the top-level ``packages``, found where
    they were imported from or, if not imported, where an import would find them (nothing is
    imported: a report checks the code of results without loading the plugins and torch)."""
    h = hashlib.sha256()
    for package in packages:
        for root in _roots(package):
            files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
            for file in files:
                h.update(f"{package}/{file.relative_to(root.parent).as_posix()}\0".encode())
                h.update(file.read_bytes())
    return h.hexdigest()


def _roots(package: str) -> list[Path]:
    """The folders (or the file) of a top-level module, imported or not; none if not found."""
    module = sys.modules.get(package)
    if module is not None:
        paths, file = list(getattr(module, "__path__", [])), getattr(module, "__file__", None)
    else:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            return []
        paths = list(spec.submodule_search_locations or [])
        file = spec.origin if spec.has_location else None
    return [Path(p) for p in paths] or ([Path(file)] if file else [])


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


_REGISTRY: Registry | None = None


def registry() -> Registry:
    """The process-wide registry, loaded on first use."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = load()
    return _REGISTRY


def loaded_registry() -> Registry | None:
    """The process-wide registry if it is loaded already, else ``None`` (nothing is loaded)."""
    return _REGISTRY


def load_dataset(name: str, data_dir=None, download: bool = True, **options: Any) -> Any:
    """Build a registered data set by name (built-in or from a plugin)."""
    return registry().get("datasets", name)(data_dir=data_dir, download=download, **options)


def task_kind(name: str) -> Any:
    """The task kind ``name``: a built-in one without loading the plugins (their imports,
    torch's among them, take seconds that reading results does not need; no plugin can take a
    built-in kind's name), else the process's registry's."""
    from zoo.tasks import BUILTIN

    if name in BUILTIN:
        return BUILTIN[name]()
    return registry().get("tasks", name)


def reset() -> None:
    """Forget the loaded registry (after installing or removing a plugin in this process)."""
    global _REGISTRY
    _REGISTRY = None
