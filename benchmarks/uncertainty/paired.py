"""Paired differences of the uncertainty scores of a results folder's rows, on the episodes both
were scored on: accuracy, E-AURC and the unknown-class AUROC of each detection score, each row
against one row (``--against``; a row's own uncertainty against that row's entropy), and, for
every row that declares its own uncertainty, that score's AUROC minus its entropy's; then each
ensemble's row against its method's. ``zoo report`` pairs the headline (accuracy) only.

Each difference is taken per episode; with two seeds or more, the mean over seeds of each seed's
mean difference and its 95% CI over the seeds (the report's clustered estimate,
:func:`zoo.metrics.seed_paired_difference`), else the mean and CI over the episodes. In points of
%; ``*`` where the CI excludes 0::

    python benchmarks/uncertainty/paired.py DIR --against "protonet ensemble of seeds 0,1,2" \
        [--variant LABEL] [--rows A,B,...]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from zoo.metrics import paired_difference, seed_paired_difference
from zoo.ranking import excess_aurc
from zoo.runner.collect import load_report


def eaurc(record: Mapping[str, Any]) -> float:
    """The episode's E-AURC of its known queries' recorded confidences."""
    conf = np.asarray([record["confidence"]], dtype=np.float64)
    return float(excess_aurc(conf, np.asarray([record["correct"]], dtype=np.float64))[0])


METRICS: dict[str, Callable[[Mapping[str, Any]], float]] = {
    "accuracy": lambda r: r["accuracy"], "E-AURC": eaurc,
    "AUROC entropy": lambda r: r["auroc_entropy"], "AUROC max-prob": lambda r: r["auroc_maxprob"],
    "AUROC own": lambda r: r["auroc_uncertainty"]}


def difference(a: Mapping[tuple, dict], b: Mapping[tuple, dict],
               fa: Callable[[Mapping[str, Any]], float],
               fb: Callable[[Mapping[str, Any]], float]) -> tuple[float, float, int, int] | None:
    """Mean and CI of ``fa(a) - fb(b)`` over the episodes both have; None where fewer than two
    are common or a record lacks the score."""
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        return None
    try:
        pairs = [(k[0], fa(a[k]), fb(b[k])) for k in common]
    except KeyError:
        return None
    seeds = sorted({s for s, _, _ in pairs})
    if len(seeds) > 1:
        diff, ci = seed_paired_difference({s: [x for t, x, _ in pairs if t == s] for s in seeds},
                                          {s: [y for t, _, y in pairs if t == s] for s in seeds})
    else:
        diff, ci = paired_difference([x for _, x, _ in pairs], [y for _, _, y in pairs])
    return diff, ci, len(common), len(seeds)


def cell(result: tuple[float, float, int, int] | None) -> str:
    if result is None:
        return "-"
    diff, ci, _, _ = result
    return f"{100 * diff:+.1f} +- {100 * ci:.1f}{' *' if abs(diff) > ci else ''}"


def variant(row: str) -> str:
    """The variant label of a report row ``METHOD [VARIANT] [ensemble of seeds ...]``."""
    rest = row.partition(" ")[2]
    return rest.partition("ensemble of seeds ")[0].strip() if rest else ""


def tables(folder: str, against: str, rows: Sequence[str] = (), label: str | None = None) -> str:
    report = load_report(folder)
    if against not in report.methods:
        raise SystemExit(f"no row {against!r} in {folder}; rows: {', '.join(report.methods)}")
    out = []
    for s in report.settings:
        if (against, s) not in report.entries:
            continue
        episodes = {m: report.entries[(m, s)].episodes for m in report.methods
                    if (m, s) in report.entries and (not rows or m in rows or m == against)
                    and (label is None or variant(m) == label)}
        base = episodes[against]
        out += [f"{report.label(s)}: row minus {against} (points of %)", "",
                "| row | " + " | ".join(METRICS) + f" (against {against}'s entropy) | episodes "
                "| seeds |",
                "|---|" + "---|" * (len(METRICS) + 2)]
        for m, eps in episodes.items():
            if m == against:
                continue
            found = [difference(eps, base, f, METRICS["AUROC entropy"] if k == "AUROC own" else f)
                     for k, f in METRICS.items()]
            some = next((r for r in found if r is not None), None)
            if some is None:
                continue
            out.append(f"| {m} | " + " | ".join(map(cell, found))
                       + f" | {some[2]} | {some[3]} |")
        out += ["", f"{report.label(s)}: each ensemble minus its method's row (points of %)", "",
                "| ensemble | " + " | ".join(list(METRICS)[:-1]) + " | episodes | seeds |",
                "|---|" + "---|" * (len(METRICS) + 1)]
        for m, eps in episodes.items():
            single = m.split(" ensemble of seeds ")[0]
            if single == m or single not in episodes:
                continue
            found = [difference(eps, episodes[single], f, f) for f in list(METRICS.values())[:-1]]
            some = next((r for r in found if r is not None), None)
            if some is not None:
                out.append(f"| {m} | " + " | ".join(map(cell, found))
                           + f" | {some[2]} | {some[3]} |")
        out += ["", f"{report.label(s)}: AUROC of the row's own uncertainty minus its entropy's "
                "(points of %)", "", "| row | own - entropy | episodes | seeds |", "|---|---|---|---|"]
        for m, eps in episodes.items():
            found = difference(eps, eps, METRICS["AUROC own"], METRICS["AUROC entropy"])
            if found is not None:
                out.append(f"| {m} | {cell(found)} | {found[2]} | {found[3]} |")
        out.append("")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="a results folder")
    parser.add_argument("--against", required=True, help="the row every other is paired with")
    parser.add_argument("--rows", default="", help="comma-separated rows (default: all)")
    parser.add_argument("--variant", default=None,
                        help="only the rows of this variant label ('' for the unlabelled ones)")
    args = parser.parse_args(argv)
    print(tables(args.dir, args.against, [r for r in args.rows.split(",") if r], args.variant))


if __name__ == "__main__":
    main()
