"""The runner's sub-commands: ``zoo bench``, ``zoo train``, ``zoo evaluate``, ``zoo report``
(:func:`register_commands` adds them to the ``zoo`` command)."""

from __future__ import annotations

import argparse
import errno
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _device_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    p.add_argument("--data-dir", default=None, help="where data files are (default: $ZOO_DATA or "
                   "the user cache)")


def _set_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help=what)


def _threads(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("a number of threads, or auto") from None


def _bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", nargs="?", default="quick",
                   help="a suite name (zoo suites) or a suite file (PATH.toml)")
    p.add_argument("--out", type=Path, default=None,
                   help="results folder (default results/<suite>-<time>); re-use one to resume")
    _device_arg(p)
    p.add_argument("--executor", default="local", choices=["local", "ray"])
    p.add_argument("--address", default=None, help="a Ray cluster address (default: a local Ray); "
                   "--out must then be on a file system that every node sees")
    p.add_argument("--workers", type=int, default=1, help="cells run at once")
    p.add_argument("--threads", type=_threads, default=1,
                   help="intra-op threads per cell (default 1: the same numbers on any machine and "
                   "for any --workers; a thread count changes the order of sums, so the numbers; "
                   "auto: the cores shared among the workers); each result records it")
    p.add_argument("--methods", default=None, help="comma-separated subset of the suite's methods")
    _set_arg(p, "override a suite setting, METHOD.HYPERPARAMETER, or a hyper-parameter of every "
                "selected method that has it (repeatable); a list setting takes a TOML list or "
                "comma-separated values: --set test_datasets=glyphs,digits --set ways=5,20")
    p.add_argument("--force", action="store_true", help="recompute the suite's cells")
    p.add_argument("--tensorboard", type=Path, default=None, metavar="DIR",
                   help="write each training's curve (loss, validation score) to TensorBoard "
                   "under DIR (needs the tensorboard extra)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def bench_cmd(args: argparse.Namespace) -> int:
    """Run a benchmark suite (default: quick) into a results folder and print its table."""
    from zoo.plugins import task_kind
    from zoo.runner.bench import run_suite
    from zoo.runner.report import markdown, write_report
    from zoo.runner.validate import check_settings

    check_settings({"workers": args.workers}, "--workers")
    out = args.out or Path("results") / f"{Path(args.suite).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    methods = args.methods.split(",") if args.methods else None
    outcome = run_suite(args.suite, out=out, data_dir=args.data_dir, device=args.device,
                        executor=args.executor, address=args.address, workers=args.workers,
                        methods=methods, sets=args.sets, force=args.force,
                        progress=not args.no_progress, threads=args.threads,
                        tensorboard=args.tensorboard)
    if not outcome.cells:
        print(f"experiment written to {out}")
        return 0
    report = write_report(out, kinds=task_kind)
    print(markdown(report))
    print(f"results: {out}/results.jsonl, report: {out}/report/ (open report.html in a browser)")
    if outcome.failed:
        print(f"{len(outcome.failed)} cell(s) failed (see their error.txt); run the same command "
              "again to retry them", file=sys.stderr)
        return 1
    return 0


def _train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("method")
    p.add_argument("--dataset", required=True)
    p.add_argument("--way", type=int, required=True)
    p.add_argument("--shot", type=int, required=True)
    p.add_argument("--backbone", default=None)
    p.add_argument("--kernel", default=None)
    p.add_argument("--episodes", type=int, default=1000, help="training episodes")
    p.add_argument("--query", type=int, default=15, help="queries per class in training")
    p.add_argument("--val-episodes", type=int, default=100)
    p.add_argument("--val-every", type=int, default=250)
    p.add_argument("--val-dataset", default="",
                   help="data set whose validation split selects the model and fits the "
                        "temperature (default: the training data set's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/<name>)")
    p.add_argument("--force", action="store_true",
                   help="train again in --out, deleting the model trained there before")
    _device_arg(p)
    _set_arg(p, "a hyper-parameter of the method (repeatable)")
    p.add_argument("--no-progress", action="store_true")


def train_cmd(args: argparse.Namespace) -> int:
    """Meta-train one classification method on one data set (resumable); writes a run folder for
    zoo evaluate."""
    from zoo.hparams import resolve_hparams
    from zoo.plugins import registry
    from zoo.runner.bench import resolve_device
    from zoo.runner.cell import DatasetCache
    from zoo.runner.cells import Cell
    from zoo.runner.suite import SuiteError
    from zoo.runner.train import start_over, train_model
    from zoo.runner.validate import check_settings

    check_settings({"ways": args.way, "shots": args.shot, "train_episodes": args.episodes,
                    "train_query": args.query, "val_episodes": args.val_episodes,
                    "val_every": args.val_every}, "zoo train")
    reg = registry()
    cls = reg.get("methods", args.method)
    task = reg.get("tasks", "classification")
    if cls.task != task.name:
        raise SuiteError(f"zoo train trains classification methods; {args.method!r} solves "
                         f"{cls.task!r} tasks: run it in a {cls.task} suite with zoo bench")
    device = resolve_device(args.device)
    cell = Cell(method=args.method, hparams=resolve_hparams(cls, _hparam_sets(args.sets)),
                train_dataset=args.dataset, dataset=args.dataset,
                backbone=args.backbone or cls.default_backbone,
                kernel=(args.kernel or cls.default_kernel) if cls.uses_kernel else args.kernel,
                seed=args.seed, train_episodes=args.episodes, val_episodes=args.val_episodes,
                val_every=args.val_every, val_dataset=args.val_dataset, test_episodes=0,
                task=task,
                shape={"way": args.way, "shot": args.shot, "train_shot": args.shot, "query": 15,
                       "train_query": args.query},
                provenance=reg.provenance("methods", args.method))
    out = args.out or Path("runs") / (f"{args.method}-{args.dataset}-{args.way}w{args.shot}s-"
                                      f"{cell.train_hash[:8]}")
    dataset, val_data = DatasetCache(args.data_dir, device, reg).training_data(cell)
    if args.force:
        start_over(out)
    trained = train_model(cell, out, dataset, device, reg, progress=not args.no_progress,
                          val_data=val_data)
    val = trained.info[task.selection_key]
    print(f"trained {cell.label} in {trained.info['train_seconds']:.0f} s: "
          f"validation accuracy {'-' if val is None else f'{100 * val:.1f}%'}, "
          f"temperature {trained.temperature:.3f}; run folder {out}")
    return 0


def _hparam_sets(items: list[str]) -> dict[str, object]:
    """``--set KEY=VALUE`` items as a dict of hyper-parameters (values parsed as in suites)."""
    from zoo.runner.suite import SuiteError
    from zoo.spec import parse_value

    given = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SuiteError(f"--set {item!r}: expected HYPERPARAMETER=VALUE")
        given[key.strip()] = parse_value(value.strip())
    return given


def _evaluate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", type=Path, help="a cell or run folder, or its model.pt")
    p.add_argument("--dataset", required=True)
    p.add_argument("--way", type=int, default=None, help="default: the trained way")
    p.add_argument("--shot", type=int, default=None, help="default: the trained shot")
    p.add_argument("--query", type=int, default=15, help="queries per class (default: %(default)s)")
    p.add_argument("--episodes", type=int, default=600,
                   help="test episodes (default: %(default)s, the usual few-shot protocol)")
    p.add_argument("--seed", type=int, default=None, help="episode seed (default: the run's)")
    p.add_argument("--split", default="test", choices=["test", "val"],
                   help="score test episodes (default) or validation episodes of the trained "
                   "shape (studies that choose or compare variants without reading the test "
                   "split; use another --seed than the run's, whose validation episodes selected "
                   "its checkpoint)")
    _device_arg(p)
    _set_arg(p, "a test-time hyper-parameter of the trained method (repeatable; e.g. "
             "test_inner_steps=3): the trained weights and temperature are kept, the summary "
             "records the change")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-progress", action="store_true")


def evaluate_cmd(args: argparse.Namespace) -> int:
    """Score a trained classification model on a data set's test episodes (cross-domain, Lake's
    runs)."""
    from zoo.errors import ZooError
    from zoo.hparams import resolve_hparams
    from zoo.plugins import registry
    from zoo.runner.bench import resolve_device
    from zoo.runner.cell import DatasetCache
    from zoo.runner.cells import Cell
    from zoo.runner.evaluate import evaluate
    from zoo.runner.train import build_for_cell, has_split, load_run, load_weights
    from zoo.runner.validate import check_settings

    check_settings({"ways": args.way, "shots": args.shot, "query": args.query,
                    "test_episodes": args.episodes}, "zoo evaluate")
    reg = registry()
    device = resolve_device(args.device)
    config, blob = load_run(args.run, device)
    task = reg.get("tasks", config.get("task", "classification"))
    if task.name != "classification":
        raise ZooError(f"zoo evaluate scores classification models; {args.run} holds a "
                       f"{task.name} model: score it with zoo bench on a {task.name} suite")
    way, shot = args.way or config["way"], args.shot or config["train_shot"]
    trained = {k: v for k, v in config.items() if k != "train_way"}
    trained_way = config.get("train_way", config["way"])
    if way != trained_way:
        trained["train_way"] = trained_way
    seed = config["seed"] if args.seed is None else args.seed
    changed = _hparam_sets(args.sets)
    if changed:
        cls = reg.get("methods", config["method"])
        hparams = resolve_hparams(cls, {**config["hparams"], **changed})
        changed = {k: hparams[k] for k in changed}
        trained["hparams"] = hparams
    cell = Cell.from_config({**trained, "way": way, "shot": shot, "query": args.query}, task,
                            dataset=args.dataset, test_episodes=args.episodes)
    if not task.supports(reg.get("methods", config["method"]), config["hparams"], cell.shape):
        raise ZooError(f"{config['method']} was trained {trained_way}-way and cannot score "
                       f"{way}-way episodes (it has way-sized parameters): leave out --way")
    datasets = DatasetCache(args.data_dir, device, reg)
    test_data = datasets.get(args.dataset)
    train_data = datasets.get(config["train_dataset"])
    task.check_data(test_data, args.dataset)
    task.check_compatible(train_data, test_data, config["method"])
    if args.split == "val" and not has_split(test_data, "val"):
        raise ZooError(f"data set {args.dataset!r} has no validation split; drop --split val")
    method = build_for_cell(cell, train_data, device, reg)
    load_weights(method, blob["state_dict"], Path(args.run) / "model.pt" if Path(args.run).is_dir()
                 else Path(args.run),
                 f"the {config['method']} model its configuration describes")
    records = evaluate(task, method, config["method"], test_data, shape=cell.shape, seed=seed,
                       count=args.episodes, temperature=blob["temperature"],
                       progress=not args.no_progress, label=f"{config['method']} {args.dataset}",
                       split=args.split)
    summary = {"method": config["method"], "train_dataset": config["train_dataset"],
               "dataset": args.dataset, "split": args.split, "way": way, "shot": shot, "seed": seed,
               **task.summarise(records), "temperature": blob["temperature"],
               **({"changed_hparams": changed} if changed else {})}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        ci = "" if math.isnan(summary["ci95"]) else f" +- {100 * summary['ci95']:.1f}"
        with_ = "".join(f" {k}={v}" for k, v in changed.items())
        print(f"{summary['method']}{' with' + with_ if with_ else ''} on {args.dataset} "
              f"{way}-way {shot}-shot, "
              f"{summary['test_episodes']} episodes: accuracy {100 * summary['accuracy']:.1f}"
              f"{ci}% (error {summary['error_percent']:.1f}%), ECE {100 * summary['ece']:.1f}% "
              f"(calibrated {100 * summary['ece_calibrated']:.1f}%), NLL {summary['nll']:.3f}")
    return 0


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", type=Path, help="a results folder")
    p.add_argument("--format", default="md", choices=["md", "csv", "json", "latex", "html"],
                   help="what to print (html: the path of the page); every format is (re)written "
                        "under DIR/report (or --out)")
    p.add_argument("--no-plots", action="store_true")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, default=None, metavar="REPORT_DIR",
                       help="write the tables and figures into REPORT_DIR instead of DIR/report "
                            "(results that may not be written: a read-only copy)")
    where.add_argument("--print-only", action="store_true",
                       help="write nothing: only print the table in --format (not html)")


def report_cmd(args: argparse.Namespace) -> int:
    """(Re)generate a results folder's tables and figures and print the table."""
    from zoo.errors import ZooError
    from zoo.plugins import task_kind
    from zoo.runner.collect import load_report
    from zoo.runner.report import render, write_report

    if args.print_only:
        if args.format == "html":
            raise ZooError("--print-only prints a table: choose --format md, csv, json or latex "
                           "(the html page is a file: give --out REPORT_DIR)")
        print(render(load_report(args.dir, task_kind), args.format))
        return 0
    out = args.dir / "report" if args.out is None else args.out
    try:
        report = write_report(args.dir, plots=not args.no_plots, kinds=task_kind, out=out)
    except OSError as exc:  # read-only results: say where else the report can go
        if not isinstance(exc, PermissionError) and exc.errno != errno.EROFS:
            raise
        raise ZooError(f"cannot write the report into {out} ({exc.strerror}); give --out "
                       "REPORT_DIR to write it elsewhere, or --print-only to print the table "
                       "and write nothing") from None
    print(out / "report.html" if args.format == "html" else render(report, args.format))
    return 0



def register_commands(command: Callable[..., Callable[[Callable[..., int]], Any]]) -> None:
    """Add the runner's sub-commands through ``command(name, configure)(function)``, as
    :func:`zoo.cli.command` does."""
    for name, configure, fn in [("bench", _bench_args, bench_cmd), ("train", _train_args, train_cmd),
                                ("evaluate", _evaluate_args, evaluate_cmd),
                                ("report", _report_args, report_cmd)]:
        command(name, configure)(fn)
