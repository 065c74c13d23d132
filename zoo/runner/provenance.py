"""What a result depends on besides its configuration: the versions of python, torch and every
plugin, the commit of the source tree, the device, the platform and the thread count. Captured
once per process (``env.json`` of every cell; the versions and commit also in its results line).

And whether the code a result records (its configuration's ``provenance``,
:meth:`zoo.plugins.Registry.provenance`) is the code installed now (:func:`other_code`), found
from the distributions' metadata and the source files alone: a report need not load the plugins.
"""

from __future__ import annotations

import copy
import functools
import platform
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoo.runner.malloc import malloc_setting

if TYPE_CHECKING:
    from zoo.plugins import Registry

SHORT = 12
"""Hex digits of a code digest shown in messages."""


@functools.cache
def versions(registry: Registry) -> dict[str, Any]:
    """Versions of python, torch, pyro, learn2learn, zoo and of every plugin of ``registry``
    (its record)."""
    import importlib.metadata as md

    from zoo.hookspecs import DISTRIBUTION

    def version(dist: str) -> str | None:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return None

    return {"python": platform.python_version(), "torch": version("torch"),
            "pyro": version("pyro-ppl"), "learn2learn": version("learn2learn"),
            "zoo": version(DISTRIBUTION),
            "plugins": {r.name: r.version for r in registry.plugins if r.name != "zoo"}}


@functools.cache
def git_commit() -> str | None:
    """The commit of the zoo source tree (``+dirty`` if it has changes), if it is a git checkout;
    read once per process, whose code was loaded from it (not once per cell: two ``git``
    processes)."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "zoo"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


@functools.cache
def device_description(device: str) -> str:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return f"cpu ({platform.processor() or platform.machine()})"


def environment(device: str, registry: Registry) -> dict[str, Any]:
    """What a result depends on besides its config (``registry``: the plugins it was made
    with). ``threads`` is there because the intra-op
    thread count changes the order of floating-point reductions, so the same cell trained with 1
    and with 2 threads can end at different numbers (``zoo bench --workers`` sets it); ``malloc``
    is the ``GLIBC_TUNABLES`` the process started with (:mod:`zoo.runner.malloc`)."""
    import torch

    return {"versions": copy.deepcopy(versions(registry)), "git_commit": git_commit(),
            "device": device_description(device), "platform": platform.platform(),
            "argv": sys.argv, "malloc": malloc_setting(), "threads": torch.get_num_threads()}


def other_code(provenance: dict[str, Any] | None) -> str | None:
    """Why the code that ``provenance`` records is not the code installed now (the method's
    distribution, version, entry point and source digest, and the zoo core's version and
    digest), or ``None`` if it is. Checked without importing anything."""
    import importlib.metadata as md

    from zoo.hookspecs import ENTRY_POINT_GROUP
    from zoo.plugins import code_digest, core_provenance

    if not isinstance(provenance, dict) or not isinstance(provenance.get("core"), dict):
        return "made by a zoo that did not record the code of its core"
    core, now = provenance["core"], core_provenance()
    if core.get("version") != now["version"]:
        return f"made by zoo core {core.get('version')}; {now['version']} is installed"
    if core.get("digest") != now["digest"]:
        return (f"the zoo core's code changed since (code {str(core.get('digest'))[:SHORT]}, now "
                f"{now['digest'][:SHORT]})")
    dist, version, plugin = (provenance.get(k) for k in ("distribution", "version", "plugin"))
    if dist is not None and plugin != "zoo":
        try:
            installed = md.version(dist)
        except md.PackageNotFoundError:
            return f"made by {dist} {version}, which is not installed"
        if installed != version:
            return f"made by {dist} {version}; {installed} is installed"
        claims = {e.dist.name if e.dist else None
                  for e in md.entry_points(group=ENTRY_POINT_GROUP, name=plugin)}
        if dist not in claims:
            return f"made by plugin {plugin!r} of {dist}, which {dist} no longer provides"
        if len(claims) > 1:
            return (f"made by plugin {plugin!r} of {dist}; another distribution claims that plugin "
                    "name now, so neither is loaded")
    digest = code_digest(tuple(provenance.get("packages") or ()))
    if provenance.get("digest") != digest:
        return (f"the code of {dist} {version} changed since (code "
                f"{str(provenance.get('digest'))[:SHORT]}, now {digest[:SHORT]})")
    return None
