"""``neural-cv`` on a cell's test integrands: one batched Adam fit (what the runner does through
``prepare``) against one fit per integrand (what it did before), side by side in one process after
a warm-up. Prints both wall times, their ratio and the largest difference of the estimates (the
batched fit draws each integrand's initialisation and mini-batch order from its own seed, so the
two agree to rounding)."""

from __future__ import annotations

import argparse
import time

from zoo.control_variates.methods import NeuralCV
from zoo.plugins import load_dataset
from zoo.spec import parse_spec
from zoo.tasks.integration import sample_integrand


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", nargs="+",
                   default=["south", "step", "borehole", "genz-oscillatory[dim=2]", "bvp"])
    p.add_argument("--budgets", type=int, nargs="+", default=[10, 20, 50])
    p.add_argument("--tasks", type=int, default=50)
    p.add_argument("--width", type=int, default=40)
    args = p.parse_args()
    warm = NeuralCV(dim=1, width=args.width)
    warm.estimate_batch([sample_integrand(load_dataset("south"), "test", 0, 10, i).problem
                         for i in range(2)])
    total_batched = total_alone = 0.0
    for spec in args.families:
        name, options = parse_spec(spec)
        family = load_dataset(name, **options)
        method = NeuralCV(dim=family.dim, width=args.width)
        for n in args.budgets:
            problems = [sample_integrand(family, "test", 0, n, i).problem for i in range(args.tasks)]
            start = time.perf_counter()
            together = method.estimate_batch(problems)
            batched = time.perf_counter() - start
            start = time.perf_counter()
            alone = [method.estimate(p) for p in problems]
            one_by_one = time.perf_counter() - start
            diff = max(abs(a.value - b.value) for a, b in zip(together, alone))
            total_batched, total_alone = total_batched + batched, total_alone + one_by_one
            print(f"{spec:26s} n={n:3d}: batched {batched:6.2f} s, one by one {one_by_one:6.2f} s "
                  f"({one_by_one / batched:5.1f}x), largest difference {diff:.1e}", flush=True)
    print(f"all: batched {total_batched:.1f} s, one by one {total_alone:.1f} s "
          f"({total_alone / total_batched:.1f}x)")


if __name__ == "__main__":
    main()
