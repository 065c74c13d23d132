"""Each control-variate estimator's error against its wall time at equal sample budgets, and the
Meta-CV's batched online adaptation time for many tasks at once.

For each family and budget, every integration method estimates the same ``--tasks`` integrands
through ``estimate_batch``, as the runner does (one fit for all of them for the batched neural
CVs, one call per task otherwise); printed: mean absolute error with its 95% CI, the
variance-reduction factor against Monte Carlo and milliseconds per task. Then the Meta-CV adapts
to and estimates ``--online-tasks`` Genz integrands in one batched call (no Python loop over
tasks), the thesis's "online" phase (6 s for 1,000 tasks on its machine).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from zoo.control_variates.methods import METHODS
from zoo.control_variates.neural import MetaCV
from zoo.plugins import load_dataset
from zoo.spec import parse_spec
from zoo.tasks.integration import sample_integrand

METHODS_DEFAULT = ["mc", "poly-cv", "control-functional", "neural-cv", "vv-cv",
                   "vv-cv[coupling=learned]"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", nargs="+", default=["south", "genz-oscillatory[dim=2]"])
    p.add_argument("--budgets", type=int, nargs="+", default=[10, 20, 50, 100])
    p.add_argument("--tasks", type=int, default=50)
    p.add_argument("--online-tasks", type=int, default=1000)
    p.add_argument("--online-samples", type=int, default=10)
    p.add_argument("--split", choices=("test", "val"), default="test",
                   help="the integrands' split (val: integrands no suite reports, for a choice "
                        "or a held-out check)")
    p.add_argument("--methods", nargs="+", default=METHODS_DEFAULT,
                   help="integration methods as specs, e.g. vv-cv[coupling=learned]")
    args = p.parse_args()
    from zoo.baselines.integration import MonteCarlo

    classes = {m.name: m for m in [MonteCarlo, *METHODS]}
    methods = [(spec, *parse_spec(spec, "method")) for spec in args.methods]
    for spec in args.families:
        family = load_dataset(*[parse_spec(spec)[0]], **parse_spec(spec)[1])
        for n in args.budgets:
            episodes = [sample_integrand(family, args.split, 0, n, i) for i in range(args.tasks)]
            mc_err = np.array([float(e.problem.fx.mean()) - e.truth for e in episodes])
            for label, name, options in methods:
                if name == "vv-cv" and not episodes[0].problem.related:
                    continue
                method = classes[name](dim=family.dim, **options)
                start = time.perf_counter()
                est = np.array([e.value for e in method.estimate_batch([e.problem
                                                                        for e in episodes])])
                ms = 1000 * (time.perf_counter() - start) / len(episodes)
                err = est - np.array([e.truth for e in episodes])
                ci = 1.96 * np.abs(err).std(ddof=1) / math.sqrt(len(err))
                vrf = float(np.sum(mc_err**2) / np.sum(err**2))
                print(f"{spec:26s} n={n:4d} {label:28s} |error| {np.abs(err).mean():.4g} "
                      f"+- {ci:.2g}  VRF {vrf:7.3g}  {ms:9.2f} ms/task", flush=True)
    family = load_dataset("genz-oscillatory", dim=2)
    draws = [family.draw(torch.Generator().manual_seed(i), args.online_samples)
             for i in range(args.online_tasks)]
    x = torch.stack([d.x for d in draws])
    meta = MetaCV(2, boundary=True)
    start = time.perf_counter()
    meta.estimate(x, torch.zeros_like(x), torch.stack([d.fx for d in draws]))
    print(f"meta-cv online adaptation + estimate, {args.online_tasks} tasks of "
          f"{args.online_samples} samples in one batch: {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
