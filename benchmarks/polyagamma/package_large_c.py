"""The ``polyagamma`` package's exact sampler at large ``|c|``, and the zoo's samplers beside it.

    python benchmarks/polyagamma/package_large_c.py [--draws 20000] [--seed 0]

For ``w ~ PG(b, c)`` the mean ``b tanh(c/2) / (2c)`` and variance ``b (tanh x - x sech^2 x) /
(16 x^3)``, ``x = |c|/2``, are known in closed form (``zoo.polyagamma``). For each ``(b, c)`` the
script draws ``--draws`` variables from

* ``package``: ``polyagamma.random_polyagamma(..., method="devroye")``, the package's exact
  sampler, called directly;
* ``zoo-numpy``: ``zoo.polyagamma.sample_polyagamma_numpy`` (what ``sample_polyagamma`` uses on
  the CPU for integer ``b``, the OVE and logistic-softmax plugins' default), which calls the
  package only for ``|c| <= PACKAGE_MAX_C`` and the torch series sampler above it;
* ``zoo-torch``: ``zoo.polyagamma.sample_polyagamma_torch``;

and prints the sample mean and variance against the exact ones, with ``z``: the mean's error in
standard errors. Then it bisects, on the package alone, the ``|c|`` at which its mean jumps.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch
from polyagamma import __version__ as package_version
from polyagamma import random_polyagamma

from zoo.polyagamma import (
    PACKAGE_MAX_C,
    _h_over_x3,
    polyagamma_mean,
    sample_polyagamma_numpy,
    sample_polyagamma_torch,
)

CS = [100.0, 150.0, 175.0, 177.0, 178.0, 200.0, 300.0, 1000.0, -300.0]
BS = [1, 3]


def exact(b: float, c: float) -> tuple[float, float]:
    x = torch.tensor(abs(c) / 2, dtype=torch.float64)
    return float(polyagamma_mean(b, c)), float(b * _h_over_x3(x) / 16)


def draw(sampler: str, b: int, c: float, n: int, seed: int) -> np.ndarray:
    if sampler == "package":
        rng = np.random.default_rng(seed)
        return np.asarray(random_polyagamma(b, np.full(n, c), random_state=rng, method="devroye"))
    bb, cc = torch.full((n,), float(b)), torch.full((n,), c, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    fn = sample_polyagamma_numpy if sampler == "zoo-numpy" else sample_polyagamma_torch
    return fn(bb, cc, gen).numpy()


def jump(seed: int, lo: float = 150.0, hi: float = 200.0, n: int = 200) -> tuple[float, float]:
    """Bisect the package's mean error on ``[lo, hi]`` (b = 1) to 1e-6: the largest ``c`` with a
    mean within 10 standard errors and the smallest with one outside."""
    def wrong(c: float) -> bool:
        m, v = exact(1, c)
        w = draw("package", 1, c, n, seed)
        return abs(w.mean() - m) > 10 * math.sqrt(v / n)
    assert not wrong(lo) and wrong(hi)
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if wrong(mid) else (mid, hi)
    return lo, hi


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"polyagamma {package_version}, torch {torch.__version__}, {args.draws} draws per cell, "
          f"zoo PACKAGE_MAX_C = {PACKAGE_MAX_C:g}")
    print("| b | c | sampler | mean | exact mean | z | var | exact var | var / exact |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for b in BS:
        for c in CS:
            m, v = exact(b, c)
            for sampler in ("package", "zoo-numpy", "zoo-torch"):
                w = draw(sampler, b, c, args.draws, args.seed)
                z = (w.mean() - m) / math.sqrt(v / args.draws)
                print(f"| {b} | {c:g} | {sampler} | {w.mean():.5g} | {m:.5g} | {z:.1f} | "
                      f"{w.var():.4g} | {v:.4g} | {w.var() / v:.3g} |")
    lo, hi = jump(args.seed)
    print(f"package (b = 1): mean right at c = {lo:.6f}, wrong at c = {hi:.6f}; "
          f"2 ln(float32 max) = {2 * math.log(np.finfo(np.float32).max):.6f}")


if __name__ == "__main__":
    main()
