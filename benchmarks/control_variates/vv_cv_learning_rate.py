"""The learned-B vv-CV's optimiser and learning rate, chosen on validation integrands by the
objective both optimisers minimise (never the test error): for the thesis's joint Adam (Algorithm
5, ``--steps`` at each of ``--rates``) and the profiled fit (``--profiled-steps`` at each of
``--profiled-rates``; ``(alpha, beta)`` exact at every ``B``), the mean final value of Eq. 4.8 +
``||B||_F^2`` over ``--tasks`` integrands of the family's ``val`` split, and its gap to the exact
minimum over ``(alpha, beta)`` at the learned ``B`` (how far the fit is from converged in the
parameters the estimate is; zero for the profiled fit).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from zoo.control_variates import vector_valued
from zoo.control_variates.methods import VectorValuedCV
from zoo.plugins import load_dataset
from zoo.spec import parse_spec
from zoo.tasks.integration import sample_integrand


def objective(k0, B, task, fx, alpha, beta, lam) -> float:
    return float(vector_valued.loss(k0, B, task, fx, alpha, beta, lam) + B.pow(2).sum())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", default="borehole")
    p.add_argument("--budgets", type=int, nargs="+", default=[10, 50, 150])
    p.add_argument("--tasks", type=int, default=20)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--rates", type=float, nargs="+", default=[0.01, 0.03, 0.1, 0.3])
    p.add_argument("--profiled-steps", type=int, default=200)
    p.add_argument("--profiled-rates", type=float, nargs="+", default=[0.05, 0.1])
    args = p.parse_args()
    name, options = parse_spec(args.family)
    family = load_dataset(name, **options)
    for n in args.budgets:
        problems = [sample_integrand(family, "val", 0, n, i).problem for i in range(args.tasks)]
        grams = [VectorValuedCV(dim=family.dim).gram(q) for q in problems]
        task = grams[0][1]
        T = int(task.max()) + 1
        k0, fx = torch.stack([g[0] for g in grams]), torch.stack([g[2] for g in grams])
        lam, eye = torch.tensor([g[3] for g in grams], dtype=torch.float64), torch.eye(T).double()
        fits = [(f"adam, {args.steps} steps, lr={lr:g}", vector_valued.fit_stochastic(
            k0, task, fx, lam=lam, B=eye, learn_B=True, steps=args.steps, lr=lr))
            for lr in args.rates]
        fits += [(f"profiled, {args.profiled_steps} steps, lr={lr:g}", vector_valued.fit_profiled(
            k0, task, fx, lam=lam, B=eye, steps=args.profiled_steps, lr=lr))
            for lr in args.profiled_rates]
        for label, fit in fits:
            final, gap = [], []
            for (k0_, _, fx_, lam_), alpha, beta, B in zip(grams, fit.alpha, fit.beta, fit.B):
                best = vector_valued.closed_form(k0_, B, task, fx_, lam_)
                final.append(objective(k0_, B, task, fx_, alpha, beta, lam_))
                gap.append(final[-1] - objective(k0_, B, task, fx_, best.alpha, best.beta, lam_))
            print(f"{args.family} m={n:4d} {label:30s} objective {np.mean(final):8.4g}  gap to the "
                  f"minimum at the learned B {np.mean(gap):8.3g}", flush=True)

if __name__ == "__main__":
    main()
