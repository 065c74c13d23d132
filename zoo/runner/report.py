"""Reports from a results folder: methods x settings (accuracy +- 95% CI and ECE) as Markdown,
CSV, JSON and LaTeX; paired differences between methods on the same episodes; reliability
diagrams, training curves and inner-loop convergence curves as PNGs.

Everything is computed from the folder alone (``results.jsonl`` and the cells' files), so a
report can be regenerated at any time. Seeds of one setting are pooled: their episodes together
give the mean and its CI. Settings a suite marks ``report_error`` (Lake's runs) show the error in
percent, as that literature does, next to the published references the suite records.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zoo.io import atomic_write_json, atomic_write_text
from zoo.metrics import ece_mce, mean_ci, paired_difference, reliability_bins
from zoo.runner.config import row_name
from zoo.runner.storage import Results, read_jsonl

FORMATS = ("md", "csv", "json", "latex")
Setting = tuple[str, str, int, int]  # train data set, test data set, way, shot


def setting_label(s: Setting) -> str:
    train, test, way, shot = s
    where = test if train == test else f"{train}->{test}"
    return f"{where} {way}w{shot}s"


@dataclass
class Entry:
    """One method (or labelled variant of one, ``"METHOD VARIANT"``) in one setting, seeds pooled."""

    method: str
    setting: Setting
    results: list[dict[str, Any]] = field(default_factory=list)
    episodes: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    curves: list[list[dict[str, Any]]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "train_dataset": self.setting[0],
                               "dataset": self.setting[1], "way": self.setting[2],
                               "shot": self.setting[3], "seeds": len(self.results),
                               "failed": len(self.failed)}
        if not self.results:
            return out | {"status": "failed" if self.failed else "missing"}
        records = list(self.episodes.values())
        acc, ci = mean_ci([r["accuracy"] for r in records])
        conf = np.concatenate([r["confidence"] for r in records])
        cal = np.concatenate([r["confidence_calibrated"] for r in records])
        correct = np.concatenate([r["correct"] for r in records])
        ece, mce = ece_mce(conf, correct)
        ece_cal, _ = ece_mce(cal, correct)
        mean = lambda key: float(np.mean([r[key] for r in self.results]))  # noqa: E731
        return out | {"status": "done" if not self.failed else "partly failed",
                      "accuracy": acc, "ci95": ci, "ece": ece, "mce": mce, "ece_calibrated": ece_cal,
                      "nll": float(np.mean([r["nll"] for r in records])),
                      "brier": float(np.mean([r["brier"] for r in records])),
                      "temperature": mean("temperature"), "test_episodes": len(records),
                      "train_seconds": mean("train_seconds"),
                      "eval_seconds_per_episode": mean("eval_seconds_per_episode")}


@dataclass
class Report:
    entries: dict[tuple[str, Setting], Entry]
    settings: list[Setting]
    methods: list[str]
    error_settings: set[Setting]
    references: dict[Setting, dict[str, float]]

    def rows(self) -> list[dict[str, Any]]:
        return [self.entries[(m, s)].summary() for m in self.methods for s in self.settings
                if (m, s) in self.entries]

    def paired(self) -> list[dict[str, Any]]:
        """Accuracy differences (a - b) on the episodes both methods were scored on."""
        out = []
        for s in self.settings:
            done = [m for m in self.methods if (m, s) in self.entries and self.entries[(m, s)].results]
            for a, b in itertools.combinations(done, 2):
                ea, eb = self.entries[(a, s)].episodes, self.entries[(b, s)].episodes
                common = sorted(set(ea) & set(eb))
                if len(common) < 2:
                    continue
                diff, ci = paired_difference([ea[k]["accuracy"] for k in common],
                                             [eb[k]["accuracy"] for k in common])
                out.append({"setting": setting_label(s), "a": a, "b": b, "difference": diff,
                            "ci95": ci, "episodes": len(common),
                            "significant": bool(abs(diff) > ci)})
        return out


def load_report(root: Path) -> Report:
    """Read a results folder (validated first: a corrupt file is named, nothing is changed)."""
    results = Results.open(root, create=False)
    entries: dict[tuple[str, Setting], Entry] = {}

    def entry(method: str, s: Setting) -> Entry:
        return entries.setdefault((method, s), Entry(method, s))

    done = set()
    for r in results.finished():
        s = (r["train_dataset"], r["dataset"], r["way"], r["shot"])
        e = entry(row_name(r["method"], r.get("variant", "")), s)
        e.results.append(r)
        folder = results.cell_dir(r["config_hash"])
        done.add(r["config_hash"])
        if (folder / "episodes.jsonl").exists():
            for rec in read_jsonl(folder / "episodes.jsonl"):
                e.episodes[(r["seed"], rec["index"])] = rec
        if (folder / "training.json").exists():
            e.curves.append(json.loads((folder / "training.json").read_text()).get("curve", []))
    cells = results.root / "cells"
    for folder in sorted(cells.iterdir()) if cells.is_dir() else []:
        if folder.name in done or not (folder / "error.txt").exists() or (folder / "done").exists():
            continue
        c = json.loads((folder / "config.json").read_text())
        s = (c["train_dataset"], c["dataset"], c["way"], c["shot"])
        message = (folder / "error.txt").read_text().splitlines()[0]
        entry(row_name(c["method"], c.get("variant", "")), s).failed.append(message)
    settings = sorted({s for _, s in entries}, key=lambda s: (s[0], s[1] != s[0], s[1], s[2], s[3]))
    methods = sorted({m for m, _ in entries})
    error_settings, references = set(), {}
    for suite in results.suites():
        for part in [{**suite["settings"], **p} for p in suite.get("parts", [])] or \
                [suite["settings"]]:
            tests = part.get("test_datasets", [])
            for s in settings:
                if s[0] not in part.get("train_datasets", []) or \
                        not (s[1] in tests or (not tests and s[1] == s[0])):
                    continue
                if part.get("report_error"):
                    error_settings.add(s)
                if s[0] in suite.get("references", {}):
                    references[s] = suite["references"][s[0]]
    return Report(entries, settings, methods, error_settings, references)


# -- tables ------------------------------------------------------------------------------------

def _cell_text(row: dict[str, Any] | None, error: bool, latex: bool = False) -> str:
    if row is None:
        return "-"
    if "accuracy" not in row:
        return "FAILED" if row["status"] == "failed" else "-"
    pm = r"$\pm$" if latex else "±"
    pct = r"\%" if latex else "%"
    value = 100 * (1 - row["accuracy"]) if error else 100 * row["accuracy"]
    ci = "" if math.isnan(row["ci95"]) else f" {pm} {100 * row['ci95']:.1f}"
    text = f"{value:.1f}{ci}"
    ece = f" (ECE {100 * row['ece']:.1f} / {100 * row['ece_calibrated']:.1f}{pct})"
    text += ece if not error else f"{pct} err"
    return text + (" (some seeds FAILED)" if row["status"] == "partly failed" else "")


def table(report: Report, latex: bool = False) -> tuple[list[str], list[list[str]]]:
    header = ["method"] + [setting_label(s) for s in report.settings]
    rows_by_key = {(r["method"], (r["train_dataset"], r["dataset"], r["way"], r["shot"])): r
                   for r in report.rows()}
    body = [[m] + [_cell_text(rows_by_key.get((m, s)), s in report.error_settings, latex)
                   for s in report.settings] for m in report.methods]
    names = sorted({n for refs in report.references.values() for n in refs})
    for name in names:
        body.append([f"{name} (published)"] + [
            f"{report.references[s][name]:.1f}% err" if name in report.references.get(s, {})
            else "-" for s in report.settings])
    return header, body


def markdown(report: Report) -> str:
    header, body = table(report)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    note = ("\nAccuracy in % +- 95% CI over test episodes (seeds pooled); in parentheses ECE of the "
            "method's own probabilities / after the temperature fitted on validation episodes. "
            "'err' settings give the error in %. Fractions, MCE and NLL: table.csv.\n")
    return "\n".join(lines) + "\n" + note


def latex(report: Report) -> str:
    header, body = table(report, latex=True)
    esc = lambda t: t.replace("_", r"\_").replace("->", r"$\to$").replace("%", r"\%")  # noqa: E731
    cols = "l" + "c" * (len(header) - 1)
    lines = [rf"\begin{{tabular}}{{{cols}}}", r"\toprule", " & ".join(map(esc, header)) + r" \\",
             r"\midrule"]
    lines += [" & ".join([esc(row[0]), *(c.replace("% err", r"\% err") for c in row[1:])]) + r" \\"
              for row in body]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def csv_text(rows: list[dict[str, Any]]) -> str:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def paired_markdown(pairs: list[dict[str, Any]]) -> str:
    lines = ["| setting | a | b | accuracy a - b (%) | 95% CI | episodes |", "|---|---|---|---|---|---|"]
    lines += [f"| {p['setting']} | {p['a']} | {p['b']} | {100 * p['difference']:+.1f} | "
              f"{100 * p['ci95']:.1f}{' *' if p['significant'] else ''} | {p['episodes']} |"
              for p in pairs]
    return "\n".join(lines) + "\n\n* the CI excludes zero.\n"


def write_report(root: Path, formats: tuple[str, ...] = FORMATS, plots: bool = True) -> Report:
    """Write every format (and the figures) into ``root/report``; return the report."""
    report = load_report(Path(root))
    out = Path(root) / "report"
    rows, pairs = report.rows(), report.paired()
    if "md" in formats:
        atomic_write_text(out / "table.md", markdown(report))
        atomic_write_text(out / "paired.md", paired_markdown(pairs))
    if "csv" in formats:
        atomic_write_text(out / "table.csv", csv_text(rows))
        atomic_write_text(out / "paired.csv", csv_text(pairs))
    if "json" in formats:
        atomic_write_json(out / "table.json", {"rows": rows, "paired": pairs})
    if "latex" in formats:
        atomic_write_text(out / "table.tex", latex(report))
    if plots:
        from zoo.runner.plots import draw_all

        draw_all(report, out)
    return report


def render(report: Report, fmt: str) -> str:
    """The table in one format, as text (what ``zoo report --format`` prints)."""
    if fmt == "md":
        return markdown(report)
    if fmt == "csv":
        return csv_text(report.rows())
    if fmt == "json":
        return json.dumps({"rows": report.rows(), "paired": report.paired()}, indent=2)
    if fmt == "latex":
        return latex(report)
    raise ValueError(fmt)


def reliability(entry: Entry, calibrated: bool = False):
    records = list(entry.episodes.values())
    key = "confidence_calibrated" if calibrated else "confidence"
    return reliability_bins(np.concatenate([r[key] for r in records]),
                            np.concatenate([r["correct"] for r in records]))


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
