"""MkDocs hooks: the parts of the site that are made from the code at build time, so they cannot
drift from it.

- ``cards/``: the reproduction cards, read from ``benchmarks/cards`` where they live (with their
  figures); a link of a card to another file of the repository becomes that file's path.
- ``<!-- zoo:cli -->``: the command-line reference, from the ``zoo`` argparse parser.
- ``<!-- zoo:hparams PACKAGE -->``: a table of every hyper-parameter of every method that
  ``PACKAGE`` registers, from their :class:`zoo.HParam` declarations; a registered method that no
  page lists this way is a build warning (so a strict build fails).
- ``<!-- zoo:reference -->``: the public API, exactly: the ``__all__`` of ``zoo`` and of each
  module in ``zoo.PUBLIC_MODULES``, for mkdocstrings to render from the docstrings.
- ``<!-- zoo:settings -->``: every suite setting with its default and meaning
  (:data:`zoo.runner.suite.SETTINGS`, :data:`~zoo.runner.suite.SETTING_DOCS`), then each
  registered task kind's own settings with their defaults; a setting without a meaning is a
  build warning.
- ``<!-- zoo:shared PACKAGE -->``: which hyper-parameters of those methods are shared, and the
  base class each comes from (the tables mark them "(shared)").
- ``<!-- zoo:names PACKAGE -->``: the names of those methods, for the methods' index.
- ``<!-- zoo:docstring MODULE -->``: a module's docstring, as the method pages' "what the zoo
  implements".
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import logging
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.plugins.zoo")

ROOT = Path(__file__).resolve().parents[1]
CARDS = ROOT / "benchmarks" / "cards"
MARKER = re.compile(r"<!-- zoo:(\w+)\s*([^>]*?)\s*-->")
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|exc):`~?([^`]+)`")

_listed: set[str] = set()


# -- cards -----------------------------------------------------------------------------------------

def on_config(config: Any) -> Any:
    """The cards' pages go into the navigation under "Reproduction cards", index first."""
    names = sorted(p.name for p in CARDS.glob("*.md") if p.name != "README.md")
    for entry in config["nav"]:
        if isinstance(entry, dict) and "Reproduction cards" in entry:
            entry["Reproduction cards"] = ["cards/README.md", *(f"cards/{n}" for n in names)]
    _listed.clear()
    return config


def on_files(files: Files, config: Any) -> Files:
    for path in sorted(CARDS.rglob("*")):
        if path.suffix in (".md", ".png", ".svg", ".jpg", ".jpeg", ".gif"):
            files.append(File(path.relative_to(CARDS.parent).as_posix(), str(CARDS.parent),
                              config["site_dir"], config["use_directory_urls"]))
    return files


def _card_links(markdown: str, page: Any) -> str:
    """A card's relative link to a repository file that is not on the site becomes the file's
    path in code; a link to nothing is left for MkDocs to report."""

    def fix(m: re.Match) -> str:
        bang, text, target = m.groups()
        if bang or re.match(r"[a-z]+:|#|/", target):
            return m.group(0)
        path = target.split("#", 1)[0]
        here = (ROOT / "benchmarks" / page.file.src_uri).parent  # the card's folder
        where = (here / path).resolve()
        if where.is_relative_to(CARDS) and (where.suffix == ".md" or where.is_file()):
            return m.group(0)  # a card or a file of the site: MkDocs checks it
        if not (where.is_relative_to(ROOT) and where.exists()):
            return m.group(0)  # a link to nothing: MkDocs reports it
        rel = where.relative_to(ROOT).as_posix()
        return f"{text} (`{rel}`)" if text.strip("`") != rel else f"`{rel}`"

    return LINK.sub(fix, markdown)


# -- generated sections ----------------------------------------------------------------------------

def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri.startswith("cards/"):
        markdown = _card_links(markdown, page)

    def expand(m: re.Match) -> str:
        kind, arg = m.groups()
        if kind == "cli":
            return cli_reference()
        if kind == "hparams":
            return hparams_tables(arg)
        if kind == "reference":
            return api_reference()
        if kind == "shared":
            return shared_hparams(arg)
        if kind == "settings":
            return settings_tables()
        if kind == "names":
            return ", ".join(f"`{n}`" for n in _methods_of(arg))
        if kind == "docstring":
            return module_docstring(arg)
        log.warning("%s: unknown marker zoo:%s", page.file.src_uri, kind)
        return m.group(0)

    return MARKER.sub(expand, markdown)


def on_env(env: Any, config: Any, files: Files) -> Any:
    """After every page's markdown was read: each registered method is documented on a page."""
    from zoo.plugins import registry

    missing = sorted(set(registry().names("methods")) - _listed)
    if missing:
        log.warning("methods with no page (add <!-- zoo:hparams PACKAGE --> to a methods/ page): "
                    "%s", ", ".join(missing))
    return env


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _methods_of(package: str) -> dict[str, type]:
    """The registered methods whose class is defined in ``package`` or a module under it."""
    from zoo.plugins import registry

    return {n: c for n, c in sorted(registry().items("methods").items())
            if c.__module__ == package or c.__module__.startswith(package + ".")}


def hparams_tables(package: str) -> str:
    """One table per method registered from ``package`` (a module name prefix)."""
    methods = _methods_of(package)
    if not methods:
        log.warning("zoo:hparams %s: no registered method comes from that package", package)
        return ""
    out = []
    for name, cls in methods.items():
        _listed.add(name)
        own = {k for klass in cls.__mro__ if klass.__module__.startswith(package)
               for k in vars(klass).get("hyperparameters", {})}
        rows = ["| hyper-parameter | default | allowed | what it is |", "|---|---|---|---|"]
        for key, h in cls.all_hparams().items():
            mark = "" if key in own else " (shared)"
            rows.append(f"| `{key}`{mark} | `{_cell(repr(h.default))}` | {_cell(h.allowed())} | "
                        f"{_cell(h.doc) or '-'} |")
        out.append(f"### `{name}`\n\nTask kind: {cls.task}. Set a value with "
                   f"`--set {name}.KEY=VALUE` or in a suite's `[methods.{name}]`.\n\n"
                   + "\n".join(rows) + "\n")
    return "\n".join(out)


def shared_hparams(package: str) -> str:
    """A sentence naming the hyper-parameters the methods of ``package`` inherit, each with the
    base class that declares it."""
    origin: dict[str, str] = {}
    for cls in _methods_of(package).values():
        for key in cls.all_hparams():
            home = next(k for k in cls.__mro__ if key in vars(k).get("hyperparameters", {}))
            if not home.__module__.startswith(package):
                origin.setdefault(key, _public_name(home))
    if not origin:
        return "Every hyper-parameter below is the family's own."
    by_class: dict[str, list[str]] = {}
    for key, home in origin.items():
        by_class.setdefault(home, []).append(f"`{key}`")
    return ("Shared hyper-parameters (marked \"(shared)\" below) come from the base classes: "
            + "; ".join(f"{', '.join(keys)} from `{home}`" for home, keys in by_class.items())
            + ".")


def _public_name(cls: type) -> str:
    """``cls`` as the public API names it (``zoo.BaseMethod``, ``zoo.families.GPMethod``)."""
    import importlib

    import zoo

    for module in ("zoo", *zoo.PUBLIC_MODULES):
        if getattr(importlib.import_module(module), cls.__name__, None) is cls \
                and cls.__name__ in importlib.import_module(module).__all__:
            return f"{module}.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def settings_tables() -> str:
    """The suite settings every task kind shares, then a table of each kind's own."""
    from zoo.plugins import registry
    from zoo.runner.suite import SETTING_DOCS, SETTINGS

    undocumented = sorted(set(SETTINGS) - set(SETTING_DOCS))
    if undocumented:
        log.warning("suite settings without a meaning in zoo.runner.suite.SETTING_DOCS: %s",
                    ", ".join(undocumented))
    rows = ["| setting | default | what it is |", "|---|---|---|"]
    rows += [f"| `{k}` | `{_cell(repr(v))}` | {_cell(SETTING_DOCS.get(k, '-').replace('``', '`'))} |"
             for k, v in SETTINGS.items()]
    kinds = ["| task kind | its settings (default) |", "|---|---|"]
    for name, task in sorted(registry().items("tasks").items()):
        own = ", ".join(f"`{k}` (`{_cell(repr(v))}`)" for k, v in task.settings.items()) or "-"
        kinds.append(f"| `{name}` | {own} |")
    return "\n".join(rows) + "\n\n" + "\n".join(kinds) + "\n"


def module_docstring(module: str) -> str:
    """A module's docstring (read from its source, without importing it), its reST roles as code."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        log.warning("zoo:docstring %s: no such module", module)
        return ""
    text = ast.get_docstring(ast.parse(Path(spec.origin).read_text())) or ""
    text = ROLE.sub(lambda m: f"``{m.group(1)}``", text)
    return text.replace("\n* ", "\n- ")


def api_reference() -> str:
    """A section per public module with its ``__all__``; the Python API (``zoo.api``, whose names
    ``zoo`` exports lazily) gets its own section first."""
    import importlib

    import zoo

    api = [n for n in zoo.__all__ if zoo._HOMES.get(n) == "zoo.api"]
    out = [_section("The Python API", "zoo.api", api)]
    for module in zoo.PUBLIC_MODULES:
        names = [n for n in importlib.import_module(module).__all__ if n not in api]
        out.append(_section(f"`{module}`", module, names))
    return "\n".join(out)


def _section(title: str, module: str, members: list[str]) -> str:
    return (f"## {title}\n\n::: {module}\n    options:\n      show_root_heading: false\n"
            f"      members: [{', '.join(members)}]\n")


def cli_reference() -> str:
    """Every sub-command of ``zoo``: its description, usage and a table of its arguments."""
    from zoo.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = [_arguments(parser, "zoo")]
    for name, p in sub.choices.items():
        text = (p.description or "").strip()
        out.append(f"## `zoo {name}`\n\n{' '.join(text.split())}\n\n"
                   f"Usage: `{' '.join(p.format_usage().split()[1:])}`\n\n" + _arguments(p, name))
    return "\n".join(out)


def _arguments(p: argparse.ArgumentParser, name: str) -> str:
    rows = ["| argument | default | what it does |", "|---|---|---|"]
    for a in p._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        what = (a.help or "").replace("%(default)s", str(a.default))
        if a.choices:
            what += f" (one of: {', '.join(map(str, a.choices))})"
        flag = ", ".join(a.option_strings) or a.dest
        if a.option_strings and a.nargs != 0:
            flag += f" {a.metavar or a.dest.upper()}"
        default = "" if a.default in (None, False, [], argparse.SUPPRESS) or a.required else \
            f"`{a.default}`"
        rows.append(f"| `{_cell(flag)}` | {_cell(default) or '-'} | {_cell(what) or '-'} |")
    return "\n".join(rows) + "\n"
