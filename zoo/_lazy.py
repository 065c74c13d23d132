"""Re-export tables of the public entry points, resolved when a name is first used (PEP 562), so
that importing an entry point imports none of its homes until one of its names is asked for."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(namespace: dict[str, Any], homes: Mapping[str, str]
            ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the module whose globals are ``namespace``: ``homes``
    maps each exported name to the module that defines it."""
    module = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(homes[name]), name)
        namespace[name] = value  # later lookups do not come back here
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(homes))

    return __getattr__, __dir__
