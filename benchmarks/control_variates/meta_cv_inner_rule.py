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
seconds of each meta-training. ``--inner-steps L ...``: the L study (Fig. 5.3), each ``L`` with
the thesis's inner step ``0.01 / (50 L)`` (the cv-paper suite's ``meta-cv L=...`` cells) instead of
the defaults' one step of 0.01.

    python benchmarks/control_variates/meta_cv_inner_rule.py --dims 2 --samples 10 20 40 100
    python benchmarks/control_variates/meta_cv_inner_rule.py --dims 1 3 4 5 6 --samples 10
    python benchmarks/control_variates/meta_cv_inner_rule.py --samples 10 --rules adam \
        --inner-steps 1 3 5 7 10
"""

from __future__ import annotations

import argparse
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


def inner_step(steps: int) -> float:
    """The L study's inner step size ``0.01 / (50 L)`` (thesis §5.4.1)."""
    return 0.01 / (50 * steps)


def train_and_test(dim: int, n: int, rule: str, outer_steps: int, tests: list,
                   steps: int | None = None) -> tuple:
    family = load_dataset("genz-oscillatory", dim=dim)
    inner = {} if steps is None else {"steps": steps, "inner_lr": inner_step(steps)}
    method = MetaControlVariate(dim=dim, inner_rule=rule, **inner)
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
    p.add_argument("--inner-steps", type=int, nargs="+", default=None,
                   help="the L study: these numbers of inner steps, each at 0.01 / (50 L)")
    args = p.parse_args()
    if args.inner_steps is not None and min(args.inner_steps) < 1:
        p.error(f"--inner-steps must be positive, got {args.inner_steps}")
    torch.set_num_threads(1)
    for dim in args.dims:
        family = load_dataset("genz-oscillatory", dim=dim)
        for n in args.samples:
            tests = [sample_integrand(family, "test", 0, n, i) for i in range(args.test)]
            truth = np.array([e.truth for e in tests])
            mc = np.abs(np.array([float(e.problem.fx.double().mean()) for e in tests]) - truth)
            m, ci = mean_ci(mc)
            print(f"d={dim} N_t={n:4d} mc            |error| {m:.4f} +- {ci:.4f}", flush=True)
            for steps in args.inner_steps or [None]:
                label = "" if steps is None else f" L={steps:<2d}"
                errors = {}
                for rule in args.rules:
                    est, seconds = train_and_test(dim, n, rule, args.outer_steps, tests, steps)
                    errors[rule] = np.abs(est - truth)
                    m, ci = mean_ci(errors[rule])
                    vrf = float(np.sum(mc**2) / np.sum(errors[rule] ** 2))
                    print(f"d={dim} N_t={n:4d} meta-cv {rule:5s}{label} |error| {m:.4f} +- "
                          f"{ci:.4f}  VRF {vrf:.3g}  meta-training {seconds:.0f} s", flush=True)
                if len(errors) == 2:
                    d, ci = paired_difference(errors["adam"], errors["sgd"])
                    print(f"d={dim} N_t={n:4d}{label} |error| adam - sgd: {d:+.4f} +- {ci:.4f}",
                          flush=True)


if __name__ == "__main__":
    main()
