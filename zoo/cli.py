"""The ``zoo`` command line. Each sub-command is a small function over the library."""

from __future__ import annotations

import argparse
import errno
import json
import logging
import sys
import textwrap
from collections.abc import Callable

from zoo.errors import ZooError

COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[..., int]]] = {}


def command(name: str, configure: Callable[[argparse.ArgumentParser], None]):
    def wrap(fn: Callable[..., int]):
        COMMANDS[name] = (configure, fn)
        return fn
    return wrap


WIDTH = 100
"""Columns a listing fits when it is not given ``-v`` (or ``--json``)."""


def _listing_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print a JSON array, one object per row")
    p.add_argument("-v", "--verbose", dest="detail", action="store_true",
                   help=f"every column in full (default: rows cut to {WIDTH} columns)")


def _cell(value: object) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def print_rows(rows: list[dict], as_json: bool, detail: bool = False) -> int:
    """A listing command's output: a JSON array, or a header row and one aligned line per row,
    each cut to :data:`WIDTH` columns unless ``detail``."""
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if not rows:
        print("(none)")
        return 0
    text = [list(rows[0])] + [[_cell(v) for v in r.values()] for r in rows]
    widths = [max(len(t[i]) for t in text) for i in range(len(text[0]) - 1)]
    for t in text:
        line = "  ".join(c.ljust(w) for c, w in zip(t, widths)) + "  " + t[-1]
        print(line if detail or len(line) <= WIDTH else line[:WIDTH - 3] + "...")
    return 0


def _listing(kind: str) -> list[dict]:
    from zoo.listing import listings

    return listings()[kind]


@command("plugins", _listing_args)
def plugins_cmd(args: argparse.Namespace) -> int:
    """List installed plugins, what they registered, and any load error (-v: every name)."""
    from zoo.plugins import SLOW_IMPORT_SECONDS as slow

    records = _listing("plugins")
    if args.json:
        return print_rows(records, True)
    rows = []
    for r in records:
        names = {k: v for k, v in r["registered"].items() if v}
        status = "disabled" if r["disabled"] else ("ERROR" if r["error"] else "ok")
        what = ("; ".join(f"{k}: {', '.join(v)}" for k, v in names.items()) if args.detail else
                ", ".join(f"{k}: {len(v)}" for k, v in names.items()))
        rows.append({"plugin": r["name"], "distribution": r["distribution"] or "-",
                     "version": r["version"] or "-", "status": status, "registered": what or "-"})
    print_rows(rows, False, args.detail)
    for r in records:  # in full, wrapped: the remedy is in them
        if r["error"]:
            print(textwrap.fill(f"{r['name']}: {r['error']}", WIDTH, subsequent_indent="    ",
                                break_on_hyphens=False, break_long_words=False))
        if (r.get("import_seconds") or 0) > slow:
            print(f"{r['name']}: took {r['import_seconds']:.1f} s to import; every command that "
                  f"loads the plugins waits for it (ZOO_DISABLE_PLUGINS={r['name']} skips it)")
    return 0


@command("datasets", _listing_args)
def datasets_cmd(args: argparse.Namespace) -> int:
    """List registered data sets and the plugin that provides each."""
    return print_rows(_listing("datasets"), args.json, args.detail)


@command("methods", _listing_args)
def methods_cmd(args: argparse.Namespace) -> int:
    """List registered methods with their tasks and default hyper-parameters (with --json, each
    hyper-parameter's declaration: type, allowed values, doc)."""
    rows = _listing("methods")
    if not args.json:
        rows = [{k: v for k, v in r.items() if k != "hparams"} for r in rows]
    return print_rows(rows, args.json, args.detail)


@command("tasks", _listing_args)
def tasks_cmd(args: argparse.Namespace) -> int:
    """List registered task kinds, their suite settings and their methods."""
    return print_rows(_listing("tasks"), args.json, args.detail)


@command("suites", _listing_args)
def suites_cmd(args: argparse.Namespace) -> int:
    """List benchmark suites (built-in and from plugins; an entry suite runs its own experiment
    function). zoo bench PATH.toml runs a suite file. An invalid suite is named with what is wrong
    (exit status 1), the others listed."""
    from zoo.listing import listings

    records = listings()["suites"]
    rows = records
    if not (args.json or args.detail):  # where each comes from: -v
        rows = [{k: r[k] for k in ("name", "plugin", "task", "description")} for r in rows]
    print_rows(rows, args.json, args.detail)
    bad = [r for r in records if r.get("error")]
    for r in bad:
        print(textwrap.fill(f"zoo: error: suite {r['name']!r} of plugin {r['plugin']!r} is "
                            f"invalid: {r['error']}", WIDTH, subsequent_indent="    ",
                            break_on_hyphens=False, break_long_words=False), file=sys.stderr)
    return 1 if bad else 0


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
    """Run a sub-command. An error the zoo names, or a file-system error (a name too long, a
    folder that may not be written), is one line on stderr and exit status 2 (``-v``: the
    traceback of a file-system error too); Ctrl-C, also while the command starts, is exit 130."""
    verbose = False
    try:
        args = build_parser().parse_args(argv)
        verbose = args.verbose
        logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                            format="%(levelname)s %(name)s: %(message)s")
        return args.func(args)
    except ZooError as exc:
        print(f"zoo: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if verbose or exc.errno is None:
            raise
        print(f"zoo: error: {os_error(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("zoo: interrupted; finished work is saved, run the same command to resume",
              file=sys.stderr)
        return 130


def os_error(exc: OSError) -> str:
    """A file-system error in words: what failed, on which path, and what to do."""
    path = exc.filename if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}"
    text = f"{exc.strerror}: {path}" if path is not None else str(exc.strerror or exc)
    if exc.errno == errno.ENAMETOOLONG:
        return (f"{text}; a file or folder name has at most 255 bytes here: choose a shorter "
                "name (--out, or the method's or suite's name)")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{text}; choose a folder you may write (--out)"
    return text


if __name__ == "__main__":
    # ``python -m zoo.cli``: this file runs as ``__main__``, but the sub-commands register into
    # the module ``zoo.cli`` (zoo.runner.cli imports it): run that module's parser
    from zoo.cli import main as package_main

    sys.exit(package_main())
