"""The control functional's nugget on validation integrands: each fixed relative nugget of the
grid ``zoo.control_variates.linear.NUGGETS`` against the per-task choice by the Stein marginal
likelihood (the method's default), on integrands of the ``val`` split only (never the test
integrands a card reports).

For each family and budget: mean absolute error with its 95% CI and the variance-reduction
factor against Monte Carlo on the same samples, and how often the marginal likelihood picked each
nugget.

    python benchmarks/control_variates/cf_nugget.py --families step south borehole \\
        "genz-oscillatory[dim=2]" --budgets 10 40 --tasks 100
"""

from __future__ import annotations

import argparse
import math
from collections import Counter

import numpy as np
import torch

from zoo.control_variates import linear
from zoo.control_variates.fitting import fit_size
from zoo.control_variates.methods import ControlFunctional, _boundary
from zoo.plugins import load_dataset
from zoo.spec import parse_spec
from zoo.tasks.integration import sample_integrand


def chosen_nugget(problem, mode: str) -> float:
    """The nugget the marginal likelihood picks on ``problem``'s fitting samples."""
    x, s, f = problem.x.double(), problem.score.double(), problem.fx.double()[:, None]
    m = fit_size(len(x), mode)
    if _boundary(problem):
        z, sz = x, s
    else:
        centre, scale = linear.standardiser(x[:m])
        z, sz = (x - centre) / scale, s * scale
    return linear.select_stein_kernel([(z[:m], sz[:m], f[:m])], boundary=_boundary(problem),
                                      nugget=linear.NUGGETS).nugget


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", nargs="+", default=["step", "south"])
    p.add_argument("--budgets", type=int, nargs="+", default=[10, 40])
    p.add_argument("--tasks", type=int, default=100)
    p.add_argument("--estimate", choices=("intercept", "split"), default="intercept")
    args = p.parse_args()
    torch.set_num_threads(1)
    for spec in args.families:
        name, options = parse_spec(spec)
        family = load_dataset(name, **options)
        for n in args.budgets:
            episodes = [sample_integrand(family, "val", 0, n, i) for i in range(args.tasks)]
            truth = np.array([e.truth for e in episodes])
            mc_err = np.array([float(e.problem.fx.double().mean()) for e in episodes]) - truth
            rows = [(f"{v:g}", v) for v in linear.NUGGETS] + [("marginal likelihood", None)]
            for label, nugget in rows:
                method = ControlFunctional(dim=family.dim, estimate=args.estimate, nugget=nugget)
                err = np.array([method.estimate(e.problem).value for e in episodes]) - truth
                ci = 1.96 * np.abs(err).std(ddof=1) / math.sqrt(len(err))
                vrf = float(np.sum(mc_err**2) / np.sum(err**2))
                print(f"{spec:26s} n={n:4d} nugget {label:20s} |error| {np.abs(err).mean():.4g} "
                      f"+- {ci:.2g}  VRF {vrf:7.3g}", flush=True)
            picks = Counter(chosen_nugget(e.problem, args.estimate) for e in episodes)
            print(f"{spec:26s} n={n:4d} marginal likelihood picked: "
                  + ", ".join(f"{v:g} x{picks[v]}" for v in linear.NUGGETS if picks[v]), flush=True)


if __name__ == "__main__":
    main()
