"""Wall and CPU time of ``zoo report DIR`` in fresh processes, for one or more source trees in
turn (old and new code alternating, so that both see the same load), with DIR's files in the page
cache (warm: a report run again) or evicted from it first (``--cold``: the first report of a
folder just copied, or read after the cache was reclaimed).

``--cold`` evicts only DIR's own files (``posix_fadvise(POSIX_FADV_DONTNEED)`` on each, Linux):
nothing else of the machine's cache is touched. CPU time is the child's user + system time,
including any process it forks. Prints one line per run and the medians per tree, with the
1-minute load average::

    python benchmarks/report_timing.py DIR --code old=/path/to/old/tree --code new=. --rounds 3 \\
        [--cold] [--no-plots]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def evict(folder: Path) -> int:
    """Drop ``folder``'s files from the page cache; the number of files."""
    count = 0
    for parent, _, names in os.walk(folder):
        for name in names:
            try:
                fd = os.open(os.path.join(parent, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                count += 1
            finally:
                os.close(fd)
    return count


def source_path(tree: Path) -> str:
    """PYTHONPATH that imports the zoo and its bundled plugins from ``tree``."""
    plugins = sorted(p for p in (tree / "plugins").iterdir() if p.is_dir())
    return os.pathsep.join(str(p) for p in [tree, *plugins])


def timed_report(tree: Path, folder: Path, flags: list[str]) -> tuple[float, float]:
    """Wall and CPU time of ``zoo report folder *flags`` with the code of ``tree``."""
    env = dict(os.environ, PYTHONPATH=source_path(tree), OMP_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys; from zoo.cli import main; "
                    "sys.exit(main(sys.argv[1:]))", "report", str(folder), *flags], check=True,
                   stdout=subprocess.DEVNULL, env=env, cwd=tree)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--code", action="append", required=True, metavar="NAME=TREE",
                   help="a source tree to time, with its label (repeatable)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cold", action="store_true", help="evict DIR's files before each run")
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args()
    args.dir = args.dir.resolve()
    trees = {name: Path(tree).resolve() for name, tree in (c.split("=", 1) for c in args.code)}
    flags = ["--no-plots"] if args.no_plots else []
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            if args.cold:
                evict(args.dir)
            wall, cpu = timed_report(tree, args.dir, flags)
            load = os.getloadavg()[0]
            runs[name].append((wall, cpu, load))
            print(f"{name}: {wall:.1f} s wall, {cpu:.1f} s CPU, load {load:.1f}", flush=True)
    state = "cold" if args.cold else "warm"
    for name, r in runs.items():
        print(f"{name} ({state}, {' '.join(flags) or 'with figures'}): median "
              f"{statistics.median(x[0] for x in r):.1f} s wall, "
              f"{statistics.median(x[1] for x in r):.1f} s CPU, load "
              f"{min(x[2] for x in r):.1f}-{max(x[2] for x in r):.1f}")


if __name__ == "__main__":
    main()
