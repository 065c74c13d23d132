"""Print a sweep's choice per method and setting, made on validation accuracy alone.

    python benchmarks/selection/choose.py RESULTS_DIR

Reads the finished cells of a results folder (``zoo bench abml-sweep --out RESULTS_DIR``) and
prints, per method and setting, every variant's validation and test accuracy and the variant
chosen by :func:`zoo.runner.selection.select_variants` (validation only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zoo.runner.selection import select_variants
from zoo.runner.storage import Results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path)
    args = parser.parse_args(argv)
    for choice in select_variants(Results(args.results).results()):
        where = (f"{choice['method']} {choice['dataset']} {choice['way']}w{choice['shot']}s")
        sys.stdout.write(f"{where}: chosen {choice['chosen']!r}\n")
        for variant, s in choice["variants"].items():
            mark = "*" if variant == choice["chosen"] else " "
            sys.stdout.write(f"  {mark} {variant:24s} validation {100 * s['val_accuracy']:5.1f}  "
                             f"test {100 * s['accuracy']:5.1f}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
