"""Report tables from a results folder: methods x settings as Markdown, CSV, JSON and LaTeX, one
table per task kind (each kind says how a cell of its table reads); paired differences between
methods on the same episodes; the figures (:mod:`zoo.runner.plots`); and all of it in one HTML
page (:mod:`zoo.runner.report_html`).

Everything is computed from the folder alone (``results.jsonl`` and the cells' files), so a
report can be regenerated at any time. Seeds of one setting are pooled: their episodes together
give the numbers, through the same summary function the runner uses for one cell; with several
seeds a cell also shows the mean +- 95% CI over the seeds' means (the seed is the unit of
replication), and its training steps skipped as non-finite when there were any. Settings a suite
marks ``report_error`` (Lake's runs) show the error in percent, as that literature does, next to
the published references the suite records.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from zoo.io import atomic_write_json, atomic_write_text
from zoo.runner.collect import Report, TaskKinds, load_report, other_code_note
from zoo.runner.plots import draw_all
from zoo.runner.report_html import html_report

FORMATS = ("md", "csv", "json", "latex", "html")


def _cell_text(report: Report, method: str, s: Any, latex: bool = False) -> str:
    entry = report.entries.get((method, s))
    if entry is None:
        return "-"
    row = entry.summary()
    if row["status"] in ("failed", "missing"):
        return "FAILED" if row["status"] == "failed" else "-"
    view = entry.task.view
    text = view.cell_text(row, s in report.error_settings, latex)
    if row["seeds"] > 1:
        scale = 100 if view.paired_percent else 1
        pm = r"$\pm$" if latex else "±"
        text += (f" [{row['seeds']} seeds: {scale * row['seed_mean']:.{view.digits}f} {pm} "
                 f"{scale * row['seed_ci95']:.{view.digits}f}]")
    if row.get("skipped_steps"):
        text += f" [{row['skipped_steps']} steps skipped]"
    if len(row.get("threads", ())) > 1:  # one number from runs that need not agree
        text += f" [mixed threads: {', '.join(map(str, row['threads']))}]"
    return text + (" (some seeds FAILED)" if row["status"] == "partly failed" else "")


def table(report: Report, kind: str, latex: bool = False) -> tuple[list[str], list[list[str]]]:
    """The table of one task kind: a row per method, a column per setting."""
    settings = [s for s in report.settings if s[0] == kind]
    methods = [m for m in report.methods if any((m, s) in report.entries for s in settings)]
    header = ["method"] + [report.label(s) for s in settings]
    body = [[m] + [_cell_text(report, m, s, latex) for s in settings] for m in methods]
    names = sorted({n for s in settings for n in report.references.get(s, {})})
    for name in names:
        body.append([f"{name} (published)"] + [
            f"{report.references[s][name]:.1f}% err" if name in report.references.get(s, {})
            else "-" for s in settings])
    return header, body


def markdown(report: Report) -> str:
    kinds = report.kinds()
    parts = []
    for kind in kinds:
        header, body = table(report, kind)
        lines = [f"### {kind}\n"] if len(kinds) > 1 else []
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        view = report.tasks[kind].view
        rows = [r for r in report.rows() if r["task"] == kind]
        parts.append("\n".join(lines) + "\n\n" + view.table_note + view.notes(rows)
                     + threads_note(report, kind) + "\n")
    if report.other_code:
        parts.append(other_code_note(report.other_code) + "\n")
    return "\n".join(parts)


def threads_note(report: Report, kind: str) -> str:
    """A sentence when the cells of a table were made with different intra-op thread counts
    (which change the order of floating-point sums, so the numbers); else nothing."""
    counts: dict[str, int] = {}
    for (_, s), entry in report.entries.items():
        if s[0] == kind and entry.results:
            for t in entry.summary().get("threads", ()):
                counts[str(t)] = counts.get(str(t), 0) + 1
    if len(counts) < 2:
        return ""
    listed = ", ".join(f"{t} ({n} cells)" for t, n in sorted(counts.items()))
    return (f" Cells were made with different intra-op thread counts: {listed} (None: not "
            "recorded); numbers made with other counts can differ (zoo bench --threads).")


def latex(report: Report) -> str:
    esc = lambda t: t.replace("_", r"\_").replace("->", r"$\to$").replace("%", r"\%")  # noqa: E731
    out = []
    for kind in report.kinds():
        header, body = table(report, kind, latex=True)
        cols = "l" + "c" * (len(header) - 1)
        lines = [rf"\begin{{tabular}}{{{cols}}}", r"\toprule", " & ".join(map(esc, header)) + r" \\",
                 r"\midrule"]
        lines += [" & ".join([esc(row[0]), *(c.replace("% err", r"\% err") for c in row[1:])])
                  + r" \\" for row in body]
        lines += [r"\bottomrule", r"\end{tabular}"]
        out.append("\n".join(lines) + "\n")
    return "\n".join(out)


def csv_text(rows: list[dict[str, Any]]) -> str:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def paired_markdown(report: Report, pairs: list[dict[str, Any]]) -> str:
    out = []
    for kind in report.kinds():
        view = report.tasks[kind].view
        unit = " (%)" if view.paired_percent else ""
        scale = 100 if view.paired_percent else 1
        lines = [f"| setting | a | b | {view.paired_key} a - b{unit} | 95% CI | episodes | seeds |",
                 "|---|---|---|---|---|---|---|"]
        lines += [f"| {p['setting']} | {p['a']} | {p['b']} | {scale * p['difference']:+.{view.digits}f} | "
                  f"{scale * p['ci95']:.{view.digits}f}{' *' if p['significant'] else ''} | "
                  f"{p['episodes']} | {p['seeds']} |" for p in pairs if p["task"] == kind]
        out.append("\n".join(lines) + "\n")
    return ("\n".join(out) + "\n* the CI excludes zero. With two or more seeds the difference is "
            "the mean over seeds of each seed's mean difference and the CI is over seeds "
            "(Student t); with one seed, over its episodes.\n")


def write_report(root: Path, formats: tuple[str, ...] = FORMATS, plots: bool = True,
                 kinds: TaskKinds | None = None, out: Path | None = None) -> Report:
    """Write every format (and the figures) into ``out`` (default ``root/report``; another
    folder for results that may not be written, such as a read-only copy); return the report
    (``kinds``: the task kinds of its results, as for :func:`~zoo.runner.collect.load_report`)."""
    report = load_report(Path(root), kinds)
    out = Path(root) / "report" if out is None else Path(out)
    rows, pairs = report.rows(), report.paired()
    if "md" in formats:
        atomic_write_text(out / "table.md", markdown(report))
        atomic_write_text(out / "paired.md", paired_markdown(report, pairs))
    if "csv" in formats:
        atomic_write_text(out / "table.csv", csv_text(rows))
        atomic_write_text(out / "paired.csv", csv_text(pairs))
    if "json" in formats:
        atomic_write_json(out / "table.json", {"rows": rows, "paired": pairs})
    if "latex" in formats:
        atomic_write_text(out / "table.tex", latex(report))
    figures = draw_all(report, out) if plots else None
    if "html" in formats:
        kept = [] if plots else sorted(out.glob("*.png"))
        atomic_write_text(out / "report.html",
                          html_report(report, Path(root), rows, pairs, figures, kept))
    return report


def render(report: Report, fmt: str) -> str:
    """The table in one format, as text (what ``zoo report --format`` prints; for ``html``, the
    page is a file: ``report/report.html``)."""
    if fmt == "md":
        return markdown(report)
    if fmt == "csv":
        return csv_text(report.rows())
    if fmt == "json":
        return json.dumps({"rows": report.rows(), "paired": report.paired()}, indent=2)
    if fmt == "latex":
        return latex(report)
    raise ValueError(fmt)
