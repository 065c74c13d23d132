"""The ``zoo`` command line. Each sub-command is a small function over the library."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable

from zoo.errors import ZooError

COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[..., int]]] = {}


def command(name: str, configure: Callable[[argparse.ArgumentParser], None]):
    def wrap(fn: Callable[..., int]):
        COMMANDS[name] = (configure, fn)
        return fn
    return wrap


def _plugins_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print a JSON array, one object per plugin")


@command("plugins", _plugins_args)
def plugins_cmd(args: argparse.Namespace) -> int:
    """List installed plugins, what they registered, and any load error."""
    from zoo.plugins import registry

    records = [r.to_json() for r in registry().plugins]
    if args.json:
        print(json.dumps(records, indent=2))
        return 0
    rows = [("plugin", "distribution", "version", "registered", "status")]
    for r in records:
        names = "; ".join(f"{k}: {', '.join(v)}" for k, v in r["registered"].items() if v)
        status = "disabled" if r["disabled"] else ("ERROR " + r["error"] if r["error"] else "ok")
        rows.append((r["name"], r["distribution"] or "-", r["version"] or "-", names or "-", status))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[4])
    return 0


def _datasets_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")


def print_rows(rows: list[dict], as_json: bool) -> int:
    """A listing command's output: a JSON array, or one aligned line per row."""
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    text = [[", ".join(map(str, v)) if isinstance(v, list) else str(v) for v in r.values()]
            for r in rows]
    widths = [max(len(t[i]) for t in text) for i in range(len(text[0]) - 1)] if text else []
    for t in text:
        print("  ".join(c.ljust(w) for c, w in zip(t, widths)) + "  " + t[-1])
    return 0


@command("datasets", _datasets_args)
def datasets_cmd(args: argparse.Namespace) -> int:
    """List registered data sets and the plugin that provides each."""
    from zoo.plugins import registry

    reg = registry()
    rows = [{"name": n, "plugin": reg.owner("datasets", n),
             "about": ((reg.get("datasets", n).__doc__ or "").strip().splitlines() or ["-"])[0]}
            for n in reg.names("datasets")]
    return print_rows(rows, args.json)


@command("methods", _datasets_args)
def methods_cmd(args: argparse.Namespace) -> int:
    """List registered methods with their tasks and default hyper-parameters (with --json, each
    hyper-parameter's declaration: type, allowed values, doc)."""
    from zoo.plugins import registry

    reg = registry()
    rows = [{"name": n, "plugin": reg.owner("methods", n), "task": cls.task,
             "defaults": cls.all_defaults()} for n, cls in sorted(reg.items("methods").items())]
    if args.json:
        for row in rows:
            row["hparams"] = reg.get("methods", row["name"]).describe_hparams()
    return print_rows(rows, args.json)


@command("tasks", _datasets_args)
def tasks_cmd(args: argparse.Namespace) -> int:
    """List registered task kinds, their suite settings and their methods."""
    from zoo.plugins import registry

    reg = registry()
    rows = [{"name": n, "plugin": reg.owner("tasks", n),
             "settings": {k: v for k, v in task.settings.items()},
             "methods": sorted(m for m, c in reg.items("methods").items()
                               if getattr(c, "task", None) == n),
             "about": ((type(task).__doc__ or "").strip().splitlines() or ["-"])[0]}
            for n, task in sorted(reg.items("tasks").items())]
    return print_rows(rows, args.json)


@command("suites", _datasets_args)
def suites_cmd(args: argparse.Namespace) -> int:
    """List benchmark suites (built-in and from plugins) with their task kind; a suite that runs
    an experiment of its own instead of cells shows its entry function."""
    from zoo.plugins import registry
    from zoo.runner.suite import load_suite, suite_names

    reg = registry()
    rows = []
    for name in suite_names(reg):
        suite = load_suite(name, reg)
        entry = suite.settings["entry"]  # runs a whole experiment, of no task kind: named so
        rows.append({"name": name, "plugin": reg.owner("suites", name),
                     "task": f"entry {entry}" if entry else suite.settings["task"],
                     "source": suite.source,
                     "description": suite.settings["description"]})
    return print_rows(rows, args.json)


def build_parser() -> argparse.ArgumentParser:
    from zoo.runner.cli import register_commands

    register_commands(command)
    parser = argparse.ArgumentParser(prog="zoo", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (configure, fn) in COMMANDS.items():
        p = sub.add_parser(name, help=summary(fn), description=fn.__doc__)
        configure(p)
        p.set_defaults(func=fn)
    return parser


def summary(fn: Callable) -> str:
    """The first paragraph of ``fn``'s docstring on one line (a sub-command's line in ``zoo -h``;
    the first physical line would cut a sentence that wraps)."""
    return " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except ZooError as exc:
        print(f"zoo: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("zoo: interrupted; finished work is saved, run the same command to resume",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
