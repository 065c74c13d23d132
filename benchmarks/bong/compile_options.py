"""What ``compile = true``'s two per-call options are worth: the compiled update of a few BONG cells
with Dynamo's full guards and inductor's Python wrapper, with tensor guards only
(``torch.compiler.keep_tensor_guards_unsafe``), and with tensor guards and inductor's C++ wrapper
(``cpp_wrapper``, :data:`zoo_bong.curvature.LEAN`), side by side in one process.

Each cell's three methods make the same updates from the same initial weights (the options change
how the program is called, not what it computes); after 14 updates the rounds are interleaved (every
cell's three variants, then the next round), one thread, medians in ms and the ratios to the full
guards. The problem is ``vs_jax.py``'s (``mlp``, P = 579, float64, M = 10, alpha 1e-5)::

    OMP_NUM_THREADS=1 python benchmarks/bong/compile_options.py --repeats 300
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from zoo_bong import method as bong_method
from zoo_bong.curvature import LEAN, compile_own
from zoo_bong.method import Bong

CELLS = ("bong/dg/lin-ef", "bong/dg/mc-ef", "bong/dg/lin-hess", "bog/dlr/lin-hess")
VARIANTS = {"full guards": {}, "tensor guards": {"guard_filter_fn": LEAN["guard_filter_fn"]},
            "tensor guards, C++ wrapper": LEAN}


def build(cell: str, options: dict, data) -> list:
    """A compiled ``Bong`` of ``cell`` whose program takes ``options``, after 14 updates, with the
    rest of ``data`` as its stream: ``[method, state, stream]``."""
    rule, family, curvature = cell.split("/")
    torch.manual_seed(0)
    method = Bong(dim=5, classes=3, network="mlp", rule=rule, family=family, curvature=curvature,
                  rank=10, samples=10, alpha=1e-5, prior_var=0.01, compile=True,
                  dg_mean="vd-ekf" if cell == "bong/dg/lin-hess" else "ngd")
    state = method.init()
    method._program = compile_own(bong_method.traced_update(
        method.f_one, method.likelihood, state.belief, curvature, rule, 1e-5, 1),
        bong_method.BACKEND, options)
    for x, y in data[:14]:
        state = method.update(state, x, y)
    return [method, state, iter(data[14:])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1)
    data = [(torch.rand(5, generator=gen, dtype=torch.float64), torch.tensor(i % 3))
            for i in range(args.repeats + 20)]
    runs = {(cell, name): build(cell, options, data)
            for cell in CELLS for name, options in VARIANTS.items()}
    times: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    for _ in range(args.repeats):
        for key, run in runs.items():
            method, state, stream = run
            start = time.perf_counter()
            run[1] = method.update(state, *next(stream))
            times[key].append(time.perf_counter() - start)
    print(f"torch {torch.__version__}, one thread, {len(runs)} programs interleaved, "
          f"{args.repeats} rounds, median ms per update (ratio to full guards)\n")
    print("| cell | " + " | ".join(VARIANTS) + " |")
    print("|---|" + "---:|" * len(VARIANTS))
    for cell in CELLS:
        medians = [1000 * statistics.median(times[cell, name]) for name in VARIANTS]
        print(f"| {cell} | " + " | ".join(f"{m:.3f} ({m / medians[0]:.2f})" for m in medians)
              + " |")


if __name__ == "__main__":
    main()
