"""Component specs: ``name`` or ``name[key=value,...]``, the one syntax that names a registered
component with options of its factory (a data set, a kernel such as ``polynomial[order=2]``, an
expectation estimator such as ``sobol[samples=64]``)."""

from __future__ import annotations

import re
from typing import Any

import tomllib

from zoo.errors import ZooError

SPEC_RE = re.compile(r"^(?P<name>[a-z0-9][a-z0-9-]*)(?:\[(?P<options>.*)\])?$", re.DOTALL)


class SpecError(ZooError, ValueError):
    """A component spec or a value that does not parse."""


def parse_value(text: str) -> Any:
    """A ``--set`` value: a TOML literal (``3``, ``0.1``, ``true``, ``[1, 5]``) or a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def split_outside_brackets(text: str) -> list[str]:
    """``text`` split at the commas outside brackets (``a,b[c=1,d=2]`` -> ``a``, ``b[c=1,d=2]``),
    each item stripped; raises :class:`SpecError` when the brackets do not pair up."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text + ","):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0:
            break
        if char == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    if depth != 0:
        raise SpecError(f"{text!r}: its brackets [ ] do not pair up")
    return items


def parse_list(text: str) -> Any:
    """A ``--set`` value for a list setting: a TOML list as it is, else the text split at commas
    outside brackets, each item a value (``glyphs,omniglot[protocol=no-latin,rotations=true]``)."""
    value = parse_value(text)
    if not isinstance(value, str):
        return value
    if text.strip().startswith("["):
        raise SpecError(f"{text!r} is not a TOML list; write e.g. [1, 5] (or 1,5)")
    return [parse_value(item) for item in split_outside_brackets(text) if item]


def parse_spec(spec: str, what: str = "data set") -> tuple[str, dict[str, Any]]:
    """``"name"`` or ``"name[key=value,...]"``: a registered name and options of its factory;
    ``what`` names the kind of component in errors. A value may itself hold brackets: a TOML
    list (``mlp[hidden=[64, 64]]``) or a nested spec (``md-bfsc[estimator=sobol[samples=8]]``,
    kept as its text for the option's own parser)."""
    match = SPEC_RE.match(spec)
    if not match:
        raise SpecError(f"{what} {spec!r}: expected NAME or NAME[KEY=VALUE,...]")
    try:
        items = split_outside_brackets(match["options"] or "")
    except SpecError:
        raise SpecError(f"{what} {spec!r}: its brackets [ ] do not pair up") from None
    options = {}
    for item in filter(None, items):
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecError(f"{what} {spec!r}: option {item!r} is not KEY=VALUE")
        options[key.strip()] = parse_value(value.strip())
    return match["name"], options
