"""The plugin host: loads every ``zoo.plugins`` entry point in isolation and collects what it registers.

A plugin that fails to import or to register is recorded with its error and skipped; nothing it
registered before failing is kept. Entry points load in name order; a plugin that registers a
name another plugin already holds is rejected whole. ``ZOO_STRICT_PLUGINS=1`` turns any failure into a
:class:`~zoo.errors.PluginError`; ``ZOO_DISABLE_PLUGINS=a,b`` blocks plugins by entry-point name.
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import os
import re
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pluggy

from zoo import hookspecs
from zoo.errors import PluginError, UnknownNameError

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
KINDS = tuple(hookspecs.HOOKS)
_SINGULAR = {"methods": "method", "backbones": "backbone", "kernels": "kernel",
             "datasets": "data set", "suites": "suite", "tasks": "task kind"}


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

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "distribution": self.distribution, "version": self.version,
                "hooks": self.hooks, "registered": self.registered, "error": self.error,
                "disabled": self.disabled}


class Registry:
    """Components by kind and name, and the record of every plugin that tried to add some."""

    def __init__(self) -> None:
        self._items: dict[str, dict[str, Any]] = {k: {} for k in KINDS}
        self._owner: dict[str, dict[str, str]] = {k: {} for k in KINDS}
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

    def add_plugin(self, pm: pluggy.PluginManager, module: ModuleType, record: PluginRecord) -> None:
        """Call one plugin's hooks into a staging area; merge only if all of them succeed."""
        staged: dict[str, dict[str, Any]] = {k: {} for k in KINDS}
        record.hooks = sorted(h for h in hookspecs.HOOKS.values() if hasattr(module, h))
        pm.register(module, name=record.name)
        try:
            for kind, hook in hookspecs.HOOKS.items():
                for impl in getattr(pm.hook, hook).get_hookimpls():
                    if impl.plugin is module:
                        impl.function(register=self._stager(kind, staged[kind]))
            for kind, entries in staged.items():
                for name in entries:
                    if name in self._items[kind]:
                        raise PluginError(
                            f"{_SINGULAR[kind]} {name!r} is already registered by plugin "
                            f"{self._owner[kind][name]!r}; rename one of them")
        except Exception as exc:  # isolation: a broken plugin must not take the host down
            pm.unregister(module)
            record.error = _describe(exc)
            return
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

    core = PluginRecord("zoo", "zoo", _version("zoo"))
    reg.add_plugin(pm, builtins, core)
    reg.plugins.append(core)
    if core.error:
        raise PluginError(f"the zoo's own components failed to register: {core.error}")

    eps = md.entry_points(group=hookspecs.ENTRY_POINT_GROUP) if entry_points is None else entry_points
    seen: set[str] = set()
    for ep in sorted(eps, key=lambda e: e.name):
        if ep.name in seen:
            continue
        seen.add(ep.name)
        dist = getattr(ep, "dist", None)
        record = PluginRecord(ep.name, dist.name if dist else None, dist.version if dist else None)
        reg.plugins.append(record)
        if ep.name in blocked:
            record.disabled = True
            continue
        try:
            module = ep.load()
        except Exception as exc:  # isolation, as above
            record.error = _describe(exc)
        else:
            reg.add_plugin(pm, module, record)
        if record.error:
            log.warning("plugin %r skipped: %s", ep.name, record.error)
            if strict:
                raise PluginError(f"plugin {ep.name!r} failed ({record.error}); "
                                  "unset ZOO_STRICT_PLUGINS to skip it instead")
    return reg


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


def load_dataset(name: str, data_dir=None, download: bool = True, **options: Any) -> Any:
    """Build a registered data set by name (built-in or from a plugin)."""
    return registry().get("datasets", name)(data_dir=data_dir, download=download, **options)


def reset() -> None:
    """Forget the loaded registry (after installing or removing a plugin in this process)."""
    global _REGISTRY
    _REGISTRY = None
