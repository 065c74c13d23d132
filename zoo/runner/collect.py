"""A results folder read back as report entries: one per method (or labelled variant) and
setting, seeds pooled, with the per-episode records, training curves and failures of its cells.

A setting is ``(task kind, training data set, test data set, column)``; the column is made of the
shape keys the task kind names (:attr:`zoo.tasks.Task.column_keys`: way and shot for
classification, the context size for regression). Everything is computed from the folder alone.

Seeds are independently trained models: besides the pooled episodes, an entry gives each seed's
mean and the mean +- 95% CI over seeds (the papers' "N runs of 600 episodes"), and paired
differences with two or more common seeds are taken per seed and then over seeds. An episode is
named by ``(seed, query count, index)``: cells scored with other query counts are other episodes.
"""

from __future__ import annotations

import gc
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zoo.errors import ZooError
from zoo.metrics import seed_mean_ci
from zoo.runner.cells import row_name
from zoo.runner.provenance import other_code
from zoo.runner.storage import Results
from zoo.tasks.base import Task

log = logging.getLogger(__name__)

Setting = tuple[str, str, str, tuple]  # task kind, train data set, test data set, column


@dataclass
class Entry:
    """One method (or labelled variant of one, ``"METHOD VARIANT"``) in one setting, seeds pooled."""

    method: str
    setting: Setting
    task: Task
    results: list[dict[str, Any]] = field(default_factory=list)
    episodes: dict[tuple[int, Any, int], dict[str, Any]] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    curves: list[list[dict[str, Any]]] = field(default_factory=list)
    _summary: tuple[tuple[int, int, int], dict[str, Any]] | None = field(
        default=None, init=False, repr=False, compare=False)

    def summary(self) -> dict[str, Any]:
        """The task kind's summary of the pooled records (the function a cell's result uses),
        with the seeds' trainings' skipped steps and the means over seeds of their temperature
        and training time (a training counted once, however many cells it was scored in).
        Computed once per content (every table format and figure asks; at 10,000 cells each
        pass costs seconds)."""
        size = (len(self.results), len(self.episodes), len(self.failed))
        if self._summary is None or self._summary[0] != size:
            self._summary = (size, self._compute_summary())
        return dict(self._summary[1])

    def _compute_summary(self) -> dict[str, Any]:
        kind, train, test, column = self.setting
        out: dict[str, Any] = {"method": self.method, "task": kind, "train_dataset": train,
                               "dataset": test, **dict(zip(self.task.column_keys, column)),
                               "seeds": len({r["seed"] for r in self.results}),  # not cells
                               "failed": len(self.failed)}
        if not self.results:
            return out | {"status": "failed" if self.failed else "missing"}
        by_seed: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for r in self.results:  # a seed's cells (one per query count) share its training
            by_seed[r["seed"]].append(r)
        trained = lambda key: [float(np.mean([r.get(key, 0) for r in rs]))  # noqa: E731
                               for rs in by_seed.values()]
        per_seed = self.seed_means()
        seed_mean, seed_ci = seed_mean_ci(list(per_seed.values()))
        out |= self.seed_intervals()
        return out | {"status": "done" if not self.failed else "partly failed",
                      **self.task.summarise(list(self.episodes.values())),
                      "seed_means": per_seed, "seed_mean": seed_mean, "seed_ci95": seed_ci,
                      "skipped_steps": round(sum(trained("skipped_steps"))),
                      "threads": sorted({r.get("threads") for r in self.results}, key=str),
                      "temperature": float(np.mean(trained("temperature"))),
                      "train_seconds": float(np.mean(trained("train_seconds")))}

    def seed_intervals(self) -> dict[str, float]:
        """``KEY_seed_mean`` and ``KEY_seed_ci95`` of each of the kind's :attr:`~zoo.tasks.Task.
        seed_keys` that every seed's summary gives, where there are two seeds or more."""
        keys = self.task.seed_keys
        by_seed: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for episode, record in self.episodes.items():
            by_seed[episode[0]].append(record)
        if not keys or len(by_seed) < 2:
            return {}
        summaries = [self.task.summarise(records) for _, records in sorted(by_seed.items())]
        out: dict[str, float] = {}
        for key in keys:
            if all(key in s for s in summaries):
                out[f"{key}_seed_mean"], out[f"{key}_seed_ci95"] = seed_mean_ci(
                    [s[key] for s in summaries])
        return out

    def seed_means(self) -> dict[int, float]:
        """Each seed's mean of the task kind's headline number over its episodes."""
        by_seed: dict[int, list[float]] = defaultdict(list)
        headline = self.task.headline
        for episode, record in self.episodes.items():
            by_seed[episode[0]].append(record[headline])
        return {s: float(np.mean(np.array(v, dtype=np.float64))) for s, v in sorted(by_seed.items())}


@dataclass
class Report:
    entries: dict[tuple[str, Setting], Entry]
    settings: list[Setting]
    methods: list[str]
    error_settings: set[Setting]
    references: dict[Setting, dict[str, float]]
    tasks: dict[str, Task]
    other_code: dict[str, int] = field(default_factory=dict)
    """Results not shown because other code than is installed made them: how many, by
    ``"METHOD (why)"``."""

    def label(self, s: Setting) -> str:
        kind, train, test, column = s
        where = test if train == test else f"{train}->{test}"
        return f"{where} {self.tasks[kind].setting_label(column)}"

    def kinds(self) -> list[str]:
        return list(dict.fromkeys(s[0] for s in self.settings))

    def rows(self) -> list[dict[str, Any]]:
        return [self.entries[(m, s)].summary() for m in self.methods for s in self.settings
                if (m, s) in self.entries]

    def paired(self) -> list[dict[str, Any]]:
        """Differences (a - b) of the task kind's paired metric on the episodes both methods were
        scored on: with two or more common seeds, the mean over seeds of each seed's mean
        difference, its CI over seeds (``unit = "seeds"``); with one, over its episodes."""
        from zoo.metrics import paired_difference, seed_paired_difference

        out = []
        for s in self.settings:
            task = self.tasks[s[0]]
            done = [m for m in self.methods if (m, s) in self.entries and self.entries[(m, s)].results]
            for i, a in enumerate(done):
                for b in done[i + 1:]:
                    ea, eb = self.entries[(a, s)].episodes, self.entries[(b, s)].episodes
                    common = sorted(set(ea) & set(eb))
                    if len(common) < 2:
                        continue
                    key = task.view.paired_key
                    seeds = sorted({k[0] for k in common})
                    if len(seeds) > 1:
                        diff, ci = seed_paired_difference(
                            {s_: [ea[k][key] for k in common if k[0] == s_] for s_ in seeds},
                            {s_: [eb[k][key] for k in common if k[0] == s_] for s_ in seeds})
                    else:
                        diff, ci = paired_difference([ea[k][key] for k in common],
                                                     [eb[k][key] for k in common])
                    out.append({"task": s[0], "setting": self.label(s), "metric": key, "a": a,
                                "b": b, "difference": diff, "ci95": ci, "episodes": len(common),
                                "seeds": len(seeds),
                                "unit": "seeds" if len(seeds) > 1 else "episodes",
                                "significant": bool(abs(diff) > ci)})
        return out


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Python's cycle collector off while a block runs, and what is alive after it left out of
    later collections (``gc.freeze``; reference counting still frees it). Parsed JSON holds no
    reference cycles, but the collector, run every few hundred new containers, walks all that is
    alive: reading a folder of 10,000 cells (about a million containers kept) spent a quarter of
    its time there, and re-enabling it without the freeze pays that back in its next runs."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


TaskKinds = Callable[[str], Task]
"""The task kind of a name (as ``lambda name: registry.get("tasks", name)``)."""


def load_report(root: Path, kinds: TaskKinds | None = None) -> Report:
    """Read a results folder (validated first: a corrupt file is named, nothing is changed).
    ``kinds`` gives the task kinds of its results; by default the built-in ones
    (:func:`builtin_kind`), which need no plugins (their imports, torch's among them, take
    seconds that reading results does not need)."""
    with cyclic_gc_paused():
        return _load_report(root, kinds or builtin_kind)


def _load_report(root: Path, kinds: TaskKinds) -> Report:
    results = Results.open(root, create=False, keep_records=True)
    entries: dict[tuple[str, Setting], Entry] = {}
    tasks: dict[str, Task] = {}

    def where(line: dict[str, Any]) -> tuple[str, Setting]:
        kind = line.get("task", "classification")
        if kind not in tasks:
            tasks[kind] = kinds(kind)
        s = (kind, line["train_dataset"], line["dataset"], tasks[kind].setting(line))
        return row_name(line["method"], line.get("variant", "")), s

    def entry(line: dict[str, Any]) -> Entry:
        method, s = where(line)
        return entries.setdefault((method, s), Entry(method, s, tasks[s[0]]))

    done = set()
    # only results of the code installed now: another version of a method (or of the core)
    # is named, kept on disk and not shown, whatever the order its lines were written in
    why: dict[str, str | None] = {}
    other: dict[str, list[str]] = defaultdict(list)
    # one result per row, setting, seed and query count: a later run of the same cell with
    # another configuration (e.g. --set train_episodes=...) replaces the earlier one, whose
    # episodes would otherwise be mixed with its own under the same keys
    shown: dict[tuple[Any, ...], dict[str, Any]] = {}
    current = 0
    for r in results.finished():
        done.add(r["config_hash"])
        provenance = r["config"].get("provenance")
        key = json.dumps(provenance, sort_keys=True)
        if key not in why:
            why[key] = other_code(provenance)
        if why[key] is not None:
            other[f"{r['method']} ({why[key]})"].append(r["config_hash"])
            continue
        current += 1
        shown[(*where(r), r["seed"], r.get("query"))] = r
    if other:
        log.warning("%s: %s", root, other_code_note({k: len(v) for k, v in other.items()}))
    superseded = current - len(shown)
    if superseded:
        log.warning("%s: %d result(s) replaced by later results of the same method, setting, "
                    "seed and query count with another configuration (the latest are shown; a "
                    "suite's `variant` label keeps configurations apart as rows)", root, superseded)
    for r in shown.values():
        e = entry(r)
        e.results.append(r)
        seed, query = r["seed"], r.get("query")
        e.episodes.update({(seed, query, rec["index"]): rec
                           for rec in results.episodes(r["config_hash"])})
        training = results.training(r["config_hash"])
        if training is not None:
            e.curves.append(training.get("curve", []))
    for name, files in results.run_files("cells").items():
        if name in done or "error.txt" not in files or "done" in files:
            continue
        folder = results.cell_dir(name)
        c = json.loads((folder / "config.json").read_text())
        message = (folder / "error.txt").read_text().splitlines()[0]
        entry(c).failed.append(message)
    settings = sorted({s for _, s in entries},
                      key=lambda s: (s[0] != "classification", s[0], s[1], s[2] != s[1], s[2], s[3]))
    methods = sorted({m for m, _ in entries})
    error_settings, references = set(), {}
    for suite in results.suites():
        for part in [{**suite["settings"], **p} for p in suite.get("parts", [])] or \
                [suite["settings"]]:
            tests = part.get("test_datasets", [])
            for s in settings:
                if s[1] not in part.get("train_datasets", []) or \
                        not (s[2] in tests or (not tests and s[2] == s[1])):
                    continue
                if part.get("report_error"):
                    error_settings.add(s)
                if s[1] in suite.get("references", {}):
                    references[s] = suite["references"][s[1]]
    return Report(entries, settings, methods, error_settings, references, tasks,
                  {k: len(v) for k, v in sorted(other.items())})


def other_code_note(other: dict[str, int]) -> str:
    """The sentence that names the results a report leaves out because other code made them
    (another version of a method, or of the zoo's core), and what to do about them."""
    return (f"{sum(other.values())} result(s) made by other code than is installed are not shown: "
            + "; ".join(f"{n} of {what}" for what, n in sorted(other.items()))
            + ". They stay in the folder as a record; `zoo bench` with the same suite and --out "
            "computes their cells with the installed code (those already computed again are "
            "shown), and another --out starts a folder without them.")


def builtin_kind(name: str) -> Task:
    """The built-in task kind ``name``, without loading the plugins (no plugin can take a
    built-in kind's name); a kind of a plugin's is an error saying how to read its results."""
    from zoo.tasks import BUILTIN

    if name not in BUILTIN:
        raise ZooError(f"results of task kind {name!r}, which is not built in ({', '.join(BUILTIN)}): "
                       "read them with the kinds of the plugin registry, load_report(root, lambda "
                       "name: registry.get('tasks', name)), as `zoo report` does")
    return BUILTIN[name]()


def inner_curves(entry: Entry) -> np.ndarray | None:
    """Mean inner-loop objective per step over the episodes that report one."""
    curves = [r["inner_objective"] for r in entry.episodes.values() if r.get("inner_objective")]
    if not curves:
        return None
    by_len: dict[int, list[list[float]]] = defaultdict(list)
    for c in curves:
        by_len[len(c)].append(c)
    common = max(by_len.values(), key=len)
    return np.nanmean(np.asarray(common, dtype=np.float64), axis=0)
