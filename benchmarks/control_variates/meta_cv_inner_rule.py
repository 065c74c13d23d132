"""The Meta-CV study on Genz oscillatory integrands (Sun 2023, §5.4.1, Figs. 5.1-5.2) with each
inner update rule, paired on the same test integrands.

For each dimension and sample size ``N_t``, ``meta-cv`` (the integration method, its defaults:
width 80, eta 0.002, alpha 0.01, L = 1, lambda 5e-6) is meta-trained on the training integrands
``0 .. 5 * outer_steps - 1`` of the ``train`` split (``--outer-steps`` Adam steps of 5 integrands,
the runner's stream and the thesis's counts by default: 4,000 steps, 20,000 integrands) once with
each inner rule, then adapts to and estimates ``--test`` integrands of the ``test`` split (the
cv-paper suite's, seed 0) in one batched call. The meta-batch's 5 integrands are one batched
loss here (the runner calls them one by one; the same mean to rounding). Printed: mean absolute
error with its 95% CI, the variance-reduction factor against Monte Carlo on all ``N_t`` samples of
the same integrands, the paired difference of absolute errors (adam - sgd) with its CI, and the
seconds of each meta-training.

    python benchmarks/control_variates/meta_cv_inner_rule.py --dims 2 --samples 10 20 40 100
    python benchmarks/control_variates/meta_cv_inner_rule.py --dims 1 3 4 5 6 --samples 10
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from zoo.control_variates.methods import MetaControlVariate
from zoo.control_variates.neural import INNER_RULES
from zoo.metrics import mean_ci, paired_difference
from zoo.plugins import load_dataset
from zoo.tasks.integration import sample_integrand


def stacked(episodes) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = torch.stack([e.problem.x.double() for e in episodes])
    return x, torch.stack([e.problem.score.double() for e in episodes]), torch.stack(
        [e.problem.fx.double() for e in episodes])


def train_and_test(dim: int, n: int, rule: str, outer_steps: int, tests: list) -> tuple:
    family = load_dataset("genz-oscillatory", dim=dim)
    method = MetaControlVariate(dim=dim, inner_rule=rule)
    method.meta.boundary = True
    h = method.hparams
    opt = torch.optim.Adam(method.parameters(), lr=h["lr"])
    start = time.perf_counter()
    for step in range(outer_steps):
        batch = [sample_integrand(family, "train", 0, n, step * h["meta_batch"] + i)
                 for i in range(h["meta_batch"])]
        opt.zero_grad()
        method.meta.meta_loss(*stacked(batch)).backward()
        opt.step()
    seconds = time.perf_counter() - start
    with torch.no_grad():
        est = method.meta.estimate(*stacked(tests)).value[:, 0].numpy()
    return est, seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dims", type=int, nargs="+", default=[2])
    p.add_argument("--samples", type=int, nargs="+", default=[10, 20, 40, 100])
    p.add_argument("--outer-steps", type=int, default=4000)
    p.add_argument("--test", type=int, default=1000)
    p.add_argument("--rules", nargs="+", default=list(INNER_RULES), choices=INNER_RULES)
    args = p.parse_args()
    torch.set_num_threads(1)
    for dim in args.dims:
        family = load_dataset("genz-oscillatory", dim=dim)
        for n in args.samples:
            tests = [sample_integrand(family, "test", 0, n, i) for i in range(args.test)]
            truth = np.array([e.truth for e in tests])
            mc = np.abs(np.array([float(e.problem.fx.double().mean()) for e in tests]) - truth)
            m, ci = mean_ci(mc)
            print(f"d={dim} N_t={n:4d} mc            |error| {m:.4f} +- {ci:.4f}", flush=True)
            errors = {}
            for rule in args.rules:
                est, seconds = train_and_test(dim, n, rule, args.outer_steps, tests)
                errors[rule] = np.abs(est - truth)
                m, ci = mean_ci(errors[rule])
                vrf = float(np.sum(mc**2) / np.sum(errors[rule] ** 2))
                print(f"d={dim} N_t={n:4d} meta-cv {rule:5s} |error| {m:.4f} +- {ci:.4f}  VRF "
                      f"{vrf:.3g}  meta-training {seconds:.0f} s", flush=True)
            if len(errors) == 2:
                d, ci = paired_difference(errors["adam"], errors["sgd"])
                print(f"d={dim} N_t={n:4d} |error| adam - sgd: {d:+.4f} +- {ci:.4f}"
                      + ("" if math.isnan(ci) else ""), flush=True)


if __name__ == "__main__":
    main()
