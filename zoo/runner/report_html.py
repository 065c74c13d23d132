"""The report as one self-contained HTML file (``report/report.html``): the table of every task
kind (sortable, the best of a column marked, any of the kind's :attr:`~zoo.tasks.TaskView.report_metrics`
one click away), the paired differences, every figure (embedded as data URIs), how to read the
numbers, and the provenance of the results (commits, versions, devices, threads).

The numbers on the page are the very rows and pairs written to ``table.json``, embedded as JSON
and laid out by the page's script; Python only says where each row goes (the grid of methods x
settings) and how a kind's numbers read. Non-finite numbers travel as the strings ``"NaN"``,
``"Infinity"``, ``"-Infinity"`` (JSON has none). A script error is shown at the top of the page
(and marks the document ``data-script-error``); a page laid out in full is marked
``data-rendered="yes"`` on its body.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections import Counter
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from zoo.runner.collect import Report
from zoo.runner.storage import Results
from zoo.tasks.base import ReportMetric

FIGURE_CAPTIONS = {
    "reliability": "Reliability diagrams: accuracy against confidence of the pooled test queries "
                   "in 15 equal-width bins, the method's own probabilities (blue) and after the "
                   "temperature fitted on validation episodes (orange) side by side; under each "
                   "panel the queries per bin, in its title both ECEs. A bar under the diagonal "
                   "is over-confident; a bar over few queries says little.",
    "training": "Training: each method's meta-loss (the mean over the training steps since the "
                "point before), methods whose losses differ in kind (query cross-entropy, "
                "negative ELBO, ...) on separate axes, and the validation score that selects "
                "the checkpoint, against the training episode (first seed).",
    "convergence": "Inner loop at test: the objective each method's adaptation works on, on the "
                   "support set, mean over test episodes, against the steps taken (0: before "
                   "adapting; the last point: after the last step). Objectives of different "
                   "kinds and directions are on separate axes. A method may take more steps "
                   "at test than it was meta-trained with (MAML's protocols: 1 or 5 in "
                   "training, 3 or 10 at test); its curve past the trained steps shows that.",
}


def finite_or_text(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by its JSON-less name (``"NaN"``,
    ``"Infinity"``, ``"-Infinity"``), which the page's script reads back with ``Number``."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {str(k): finite_or_text(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_text(v) for v in obj]
    return obj


def script_json(obj: Any) -> str:
    """JSON safe inside ``<script>``: no ``</script>`` or ``<!--`` can end or change the block."""
    text = json.dumps(finite_or_text(obj), sort_keys=True, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def metrics_of(task: Any) -> list[ReportMetric]:
    """The numbers a kind's table offers: its declared ones, else its headline (unmarked)."""
    declared = list(task.view.report_metrics)
    if declared:
        return declared
    return [ReportMetric(task.headline, task.headline, None, digits=task.view.digits)]


def layout(report: Report, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task kind: its columns (settings), methods and, per method and column, the index in
    ``rows`` of that entry's summary (``None`` where the method has none), with what the page
    needs to show the kind's numbers."""
    index = {}
    for i, row in enumerate(rows):
        task = report.tasks[row["task"]]
        index[(row["method"], (row["task"], row["train_dataset"], row["dataset"],
                               task.setting(row)))] = i
    kinds = []
    for kind in report.kinds():
        task = report.tasks[kind]
        settings = [s for s in report.settings if s[0] == kind]
        methods = [m for m in report.methods if any((m, s) in report.entries for s in settings)]
        references = sorted({n for s in settings for n in report.references.get(s, {})})
        kinds.append({
            "name": kind,
            "metrics": [m._asdict() for m in metrics_of(task)],
            "columns": [report.label(s) for s in settings],
            "error_columns": [s in report.error_settings for s in settings],
            "methods": methods,
            "cells": [[index.get((m, s)) for s in settings] for m in methods],
            "references": [{"name": n, "error_percent": [report.references.get(s, {}).get(n)
                                                         for s in settings]}
                           for n in references],
            "paired": {"key": task.view.paired_key, "scale": 100 if task.view.paired_percent else 1,
                       "digits": task.view.digits},
        })
    return kinds


def provenance(report: Report, results: Results) -> dict[str, Any]:
    """What the shown results were made with: per value of each field, how many cells.

    From the results lines (commit, device, versions, each method's distribution and code
    digest) and the cells' ``env.json`` (threads, platform, malloc setting)."""
    fields: dict[str, Counter] = {k: Counter() for k in (
        "git_commit", "device", "threads", "platform", "malloc", "python", "torch", "pyro",
        "learn2learn", "zoo")}
    methods: dict[str, Counter] = {}
    for entry in report.entries.values():
        for r in entry.results:
            env = _env(results.cell_dir(r["config_hash"]))
            versions = r.get("versions") or env.get("versions") or {}
            values = {"git_commit": r.get("git_commit", env.get("git_commit")),
                      "device": r.get("device", env.get("device")),
                      **{k: env.get(k) for k in ("threads", "platform", "malloc")},
                      **{k: versions.get(k) for k in ("python", "torch", "pyro", "learn2learn",
                                                       "zoo")}}
            for key, value in values.items():
                fields[key][str(value) if value is not None else "unknown"] += 1
            p = r.get("provenance") or {}
            methods.setdefault(r["method"], Counter())[
                f"{p.get('distribution', '?')} {p.get('version', '?')}, code "
                f"{str(p.get('digest', '?'))[:12]}"] += 1
    return {"fields": {k: dict(v.most_common()) for k, v in fields.items()},
            "methods": {m: dict(v.most_common()) for m, v in sorted(methods.items())},
            "cells": sum(len(e.results) for e in report.entries.values())}


def _env(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / "env.json").read_text())
    except (OSError, ValueError):
        return {}


def figure_caption(path: Path) -> str:
    return FIGURE_CAPTIONS.get(path.stem.split("-")[0], "")


def figures_html(figures: list[Path] | None, kept: Sequence[Path] = ()) -> str:
    """The figures embedded; ``None``: not drawn this time (``--no-plots``), in which case the
    ``kept`` ones (already in the folder, from an earlier drawing) are linked, not embedded, since
    they may show other results than the tables."""
    if figures is None:
        if not kept:
            return ("<p>Figures were not drawn (<code>--no-plots</code>); run <code>zoo "
                    "report</code> without it to draw them.</p>")
        links = ", ".join(f'<a href="{html.escape(p.name)}"><code>{html.escape(p.name)}</code></a>'
                          for p in kept)
        return (f"<p>Figures were not redrawn (<code>--no-plots</code>). This folder holds "
                f"{len(kept)} figure(s) drawn earlier, which may not show the results above: "
                f"{links}. Run <code>zoo report</code> without <code>--no-plots</code> to "
                f"redraw them.</p>")
    if not figures:
        return "<p>No figures for these results.</p>"
    parts = []
    for path in figures:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        caption = figure_caption(path)
        parts.append(
            f'<figure id="fig-{html.escape(path.stem)}"><img src="data:image/png;base64,{data}" '
            f'alt="{html.escape(path.stem)}"><figcaption><code>{html.escape(path.name)}</code>'
            f'{": " + html.escape(caption) if caption else ""}</figcaption></figure>')
    return "\n".join(parts)


def reading_html(report: Report) -> str:
    parts = [
        "<p>Every number comes from the episodes in this results folder; the same rows are in "
        "<code>table.json</code> and <code>table.csv</code> beside this file. Test episodes are "
        "a pure function of their coordinates, so every method of a setting is scored on the "
        "same episodes and the paired differences compare them episode by episode.</p>",
        "<p>A 95% CI is the half-width of a 95% confidence interval: over test episodes (seeds "
        "pooled), or, where a cell says <i>n seeds</i>, its tooltip gives the mean over seeds "
        "+- the CI over the seeds' means (the seed is the unit of replication). Two methods "
        "whose intervals overlap may still differ: the paired differences say.</p>",
        "<p>The best of a column (by the metric shown, where it has a direction) is marked "
        "&#9733;; it is the best point estimate, not necessarily better than the next beyond "
        "noise.</p>",
    ]
    for kind in report.kinds():
        task = report.tasks[kind]
        items = "".join(
            f"<dt>{html.escape(m.label)}</dt><dd>{html.escape(m.help or m.key)}"
            f"{'; higher is better' if m.better == 'higher' else ''}"
            f"{'; lower is better' if m.better == 'lower' else ''}</dd>"
            for m in metrics_of(task))
        parts.append(f"<h3>{html.escape(kind)}</h3><dl>{items}</dl>"
                     f"<p class='note'>In <code>table.md</code>: {html.escape(task.view.table_note)}</p>")
    return "\n".join(parts)


def provenance_html(prov: dict[str, Any]) -> str:
    def values(counts: dict[str, int]) -> str:
        if len(counts) == 1:
            return html.escape(next(iter(counts)))
        return "<br>".join(f"{html.escape(v)} <span class='count'>({n} cells)</span>"
                           for v, n in counts.items())

    names = {"git_commit": "commit", "device": "device", "threads": "threads (intra-op)",
             "platform": "platform", "malloc": "malloc setting", "python": "python",
             "torch": "torch", "pyro": "pyro", "learn2learn": "learn2learn", "zoo": "zoo"}
    rows = "".join(f"<tr><th>{names[k]}</th><td>{values(v)}</td></tr>"
                   for k, v in prov["fields"].items() if v)
    methods = "".join(f"<tr><th>{html.escape(m)}</th><td>{values(v)}</td></tr>"
                      for m, v in prov["methods"].items())
    return (f"<p>{prov['cells']} scored cells.</p><table class='prov'>{rows}</table>"
            f"<h3>Methods: distribution, version and code digest</h3>"
            f"<table class='prov'>{methods}</table>")


def asset(name: str) -> str:
    return resources.files("zoo.runner").joinpath("report_assets", name).read_text()


def html_report(report: Report, root: Path, rows: list[dict[str, Any]],
                pairs: list[dict[str, Any]], figures: list[Path] | None,
                kept: Sequence[Path] = ()) -> str:
    """The page; ``rows`` and ``pairs`` are what ``table.json`` holds; ``figures``: the PNGs to
    embed (``None``: not drawn; then ``kept``, the figures already in the folder, are linked)."""
    data = {"table": {"rows": rows, "paired": pairs}, "kinds": layout(report, rows),
            "headlines": {k: report.tasks[k].headline for k in report.kinds()}}
    results = Results(Path(root))
    title = f"zoo report: {html.escape(Path(root).resolve().name)}"
    suites = ", ".join(sorted({html.escape(s["name"]) for s in results.suites()})) or "-"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<script>{asset("errors.js")}</script>
<style>{asset("report.css")}</style>
</head>
<body>
<div id="script-errors" hidden></div>
<header>
<h1>{title}</h1>
<p>suites: {suites}; {len(report.methods)} methods, {len(report.settings)} settings.</p>
<nav><a href="#results">results</a> <a href="#paired">paired differences</a>
<a href="#figures">figures</a> <a href="#reading">reading the numbers</a>
<a href="#provenance">provenance</a></nav>
</header>
<main>
<section id="results"><h2>Results</h2>
<noscript><p>The tables are laid out by this page's script; <code>table.md</code> beside this
file has them as text.</p></noscript>
<div id="tables"></div></section>
<section id="paired"><h2>Paired differences</h2>
<p>The difference a - b of the kind's paired metric on the test episodes both methods were scored
on, with its 95% CI; &#10033; marks a CI that excludes zero. With two or more seeds, the mean over
seeds of each seed's mean difference, its CI over seeds (Student t); with one, over its
episodes.</p>
<div id="paired-tables"></div></section>
<section id="figures"><h2>Figures</h2>
{figures_html(figures, kept)}
</section>
<section id="reading"><h2>Reading the numbers</h2>
{reading_html(report)}
</section>
<section id="provenance"><h2>Provenance</h2>
{provenance_html(provenance(report, results))}
</section>
</main>
<script type="application/json" id="zoo-data">{script_json(data)}</script>
<script>{asset("report.js")}</script>
</body>
</html>
"""

