"""``zoo report`` on a SYNTHETIC results folder of many cells (goal: under 10 s at 10,000
cells), for when running that many cells takes longer than a machine can give.

The folder is made from a real one (e.g. ``runner_many_cells.py --out DIR`` stopped after a few
hundred cells): its finished cells and their trainings are cloned under new seeds (seed + k x
the largest seed + 1), so every clone has its own configuration, hash, folder and results line,
and a valid folder of ``--cells`` cells results. Every file the report reads is a real copy
(configs, results and the cell that each episode record names rewritten, training curves
copied); the model files, which it does not read, are hard links. The numbers in the tables are
the source's repeated, so only the time means anything. Then ``zoo report DIR`` runs in a fresh
process (imports included, as a user runs it), with and without the figures, and the wall times
are printed.

    python benchmarks/report_many_cells.py --source DIR --cells 10000 [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from zoo.io import json_line
from zoo.runner.cells import config_hash
from zoo.runner.storage import read_jsonl, records_digest, write_jsonl

LINKED = {".pt"}  # not read by the report: hard links, not copies


def clone_run(src: Path, dst_root: Path, seed: int) -> tuple[str, dict[str, Any]]:
    """Copy one cell or training folder with its config's seed set to ``seed``; return the new
    hash and config."""
    config = json.loads((src / "config.json").read_text()) | {"seed": seed}
    new = config_hash(config)
    dst = dst_root / new
    dst.mkdir(parents=True)
    # the result last: it records the digest of the records, which name their cell
    for path in sorted(src.iterdir(), key=lambda p: p.name == "result.json"):
        if path.suffix in LINKED:
            os.link(path, dst / path.name)
        elif path.name == "config.json":
            (dst / path.name).write_text(json.dumps(config, indent=2, sort_keys=True))
        elif path.name == "episodes.jsonl":
            write_jsonl(dst / path.name, (json_line(r | {"cell": new}) for r in read_jsonl(path)))
        elif path.name == "result.json":
            result = json.loads(path.read_text()) | {
                "config": config, "config_hash": new, "seed": seed,
                "records_sha256": records_digest(dst / "episodes.jsonl")}
            (dst / path.name).write_text(json.dumps(result, indent=2, sort_keys=True))
        else:
            shutil.copyfile(path, dst / path.name)
    return new, config


def synthesise(source: Path, out: Path, cells: int) -> int:
    """Fill ``out`` with ``source``'s finished cells, cloned under new seeds, up to ``cells``."""
    done = [c for c in sorted((source / "cells").iterdir()) if (c / "done").exists()]
    if not done:
        raise SystemExit(f"{source} has no finished cells to clone")
    trains = {json.loads((t / "config.json").read_text())["seed"]: t
              for t in sorted((source / "train").iterdir()) if (t / "done").exists()}
    out.mkdir(parents=True)
    for name in ("zoo-results.json", "suites"):
        (shutil.copytree if (source / name).is_dir() else shutil.copyfile)(source / name, out / name)
    step = 1 + max(json.loads((c / "config.json").read_text())["seed"] for c in done)
    lines, k = [], 0
    while len(lines) < cells:
        cloned_trains: set[int] = set()
        for cell in done[:cells - len(lines)]:
            seed = json.loads((cell / "config.json").read_text())["seed"]
            if seed in trains and seed not in cloned_trains:
                clone_run(trains[seed], out / "train", seed + k * step)
                cloned_trains.add(seed)
            new, _ = clone_run(cell, out / "cells", seed + k * step)
            lines.append(json.loads((out / "cells" / new / "result.json").read_text()))
        k += 1
    (out / "results.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in lines))
    return len(lines)


def timed_report(out: Path, *flags: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys; from zoo.cli import main; "
                    "sys.exit(main(sys.argv[1:]))", "report", str(out), *flags], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--source", type=Path, required=True, help="a real results folder")
    p.add_argument("--cells", type=int, default=10_000)
    p.add_argument("--out", type=Path, default=None,
                   help="the synthetic folder; made unless it exists (default: a temp one)")
    args = p.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="zoo-report-many-")) / "results"
    if out.exists():
        n = sum(1 for _ in (out / "results.jsonl").open())
    else:
        n = synthesise(args.source, out, args.cells)
    print(f"SYNTHETIC folder {out}: {n} cells cloned from {args.source}")
    print(f"zoo report --no-plots: {timed_report(out, '--no-plots'):.1f} s")
    print(f"zoo report (with figures): {timed_report(out):.1f} s")


if __name__ == "__main__":
    main()
