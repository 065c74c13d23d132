"""Cost of one BONG update against one SGD step, and the per-step time of every rule x family.

1. On the paper's CNN (28 x 28 inputs, P = 57,722, C = 10): one BONG-LIN-HESS-DLR-10 update
   against one SGD step of the same network on the same example (forward, backward, parameter
   update). The goal is at most C + 2 = 12 times the SGD step: the Jacobian is C backward
   passes, the rest (a Woodbury solve and the rank-L projection of a P x (L + C) factor) should
   cost about two more. The update is also split into its phases (Jacobian and score by one batched
   pullback; the mean by Woodbury with the unprojected precision; the projection back to rank L),
   timed the same way, so the line says where the time goes.
2. The per-step time of every rule x family with LIN-HESS (one iteration, rank 10, alpha 1e-3): on
   the paper's CNN for dg, dg-mom and dlr (fc and fc-mom need P x P = 3.3e9 entries there), on
   multinomial logistic regression of 64-d inputs (P = 650) for all five (a dense P x P Cholesky
   per step is seconds already at the MLP's P = 4,810), with the same network's SGD step beside;
   and BONG with each curvature (MC-EF and MC-HESS with the paper's M = 100 draws) on the CNN at
   28 x 28 and at the digits stream's 8 x 8 (P = 11,642).

Every belief is first updated on ``--warm`` random examples so that the DLR factor has full rank
(from the prior its columns are zero, which flatters the projection). Timings are medians over
``--repeats`` rounds in which the configurations run interleaved (round-robin), so that a shared
machine's drifts hit all of them alike; the load average is printed with them. Float64 (the
method's dtype) for both BONG and SGD, one thread.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/bong/cost.py --repeats 30
    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/bong/cost.py --parts headline   # the ratio only
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
from zoo_bong.beliefs import FAMILIES, project_low_rank
from zoo_bong.curvature import CURVATURES
from zoo_bong.method import Bong
from zoo_bong.networks import build_network
from zoo_bong.rules import RULES, TRACTABLE

from zoo.gaussians import LowRankPrecisionGaussian

CLASSES = 10


def warm_method(dim: int, network: str, warm: int, **hparams) -> tuple[Bong, object, torch.Tensor,
                                                                        torch.Tensor]:
    """``bong`` with ``hparams``, its state after ``warm`` random examples, and one more example."""
    torch.manual_seed(0)
    method = Bong(dim=dim, classes=CLASSES, network=network, **{"prior_var": 0.1, **hparams})
    state = method.init()
    gen = torch.Generator().manual_seed(1)
    for i in range(warm):
        state = method.update(state, torch.rand(dim, generator=gen), torch.tensor(i % CLASSES))
    return method, state, torch.rand(dim, generator=gen), torch.tensor(3)


def bong_step(dim: int, network: str, warm: int, **hparams) -> Callable[[], None]:
    """One update of ``bong`` with ``hparams`` from a warmed belief."""
    method, state, x, y = warm_method(dim, network, warm, **hparams)
    return lambda: method.update(state, x, y)


def bong_phases(dim: int, warm: int) -> dict[str, Callable[[], None]]:
    """The three phases of one BONG-LIN-HESS-DLR-10 update on the paper's CNN."""
    method, state, x, y = warm_method(dim, "cnn", warm, rank=10)
    q = state.belief
    x = x.to(q.mu)
    curv = method.curvature(q, x, y, state.generator)
    wide = torch.cat([q.w.mT, curv.root.mT]).mT

    def mean() -> None:
        LowRankPrecisionGaussian(q.mu, q.ups, wide).solve_precision(curv.g[:, None])

    return {"jacobian": lambda: method.curvature(q, x, y, state.generator),
            "mean": mean, "projection": lambda: project_low_rank(q.ups, wide, 10)}


def sgd_step(dim: int, network: str) -> Callable[[], None]:
    """One SGD step of the same network (float64) on one example."""
    torch.manual_seed(0)
    net = build_network(network, dim, CLASSES).double()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.rand(1, dim, dtype=torch.float64), torch.tensor([3])

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def interleaved(steps: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Median seconds of each step over ``repeats`` round-robin rounds (after two warm-ups)."""
    times: dict[str, list[float]] = {k: [] for k in steps}
    for step in steps.values():
        step()
        step()
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def load() -> str:
    return "load average " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warm", type=int, default=12, help="updates before timing")
    parser.add_argument("--parts", default="headline,cnn,linear,curvature",
                        help="which of the four tables to print")
    args = parser.parse_args()
    parts = args.parts.split(",")
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, float64; before: {load()}")

    if "headline" in parts:
        steps = {"BONG-LIN-HESS-DLR-10": bong_step(784, "cnn", args.warm, rank=10),
                 "SGD": sgd_step(784, "cnn"), **bong_phases(784, args.warm)}
        ms = {k: 1000 * v for k, v in interleaved(steps, args.repeats).items()}
        print(f"paper CNN (P = 57,722, C = 10): BONG-LIN-HESS-DLR-10 "
              f"{ms['BONG-LIN-HESS-DLR-10']:.2f} ms, SGD {ms['SGD']:.2f} ms per example: "
              f"{ms['BONG-LIN-HESS-DLR-10'] / ms['SGD']:.1f}x (goal <= C + 2 = 12x)")
        print("  phases: " + ", ".join(f"{k} {ms[k]:.2f} ms ({ms[k] / ms['SGD']:.1f} SGD steps)"
                                       for k in ("jacobian", "mean", "projection")))
        print(f"  after: {load()}")

    for network, dim, families in (("cnn", 784, ("dg", "dg-mom", "dlr")),
                                   ("linear", 64, FAMILIES)):
        if network not in parts:
            continue
        steps = {f"{rule}/{family}": bong_step(dim, network, args.warm, rule=rule, family=family,
                                               alpha=1e-3)
                 for rule in RULES for family in families}
        steps["sgd"] = sgd_step(dim, network)
        ms = {k: 1000 * v for k, v in interleaved(steps, args.repeats).items()}
        print(f"\nms per step, LIN-HESS, {network} ({dim}-d input), rank 10, one iteration "
              f"({load()})")
        print("rule  " + "".join(f"{f:>10}" for f in families))
        for rule in RULES:
            print(f"{rule:<6}" + "".join(f"{ms[f'{rule}/{f}']:>10.2f}" for f in families))
        print(f"sgd   {ms['sgd']:>10.2f}")

    if "curvature" not in parts:
        return
    # prior variance 0.01: MC-HESS's Hutchinson diagonal of the log-likelihood's Hessian is not
    # negative, and at the other tables' 0.1 the dg belief's first MC-HESS update on this CNN
    # already loses positive variances (the update refuses it)
    for dim, side in ((784, 28), (64, 8)):
        steps = {f"{c}/{f}": bong_step(dim, "cnn", args.warm, curvature=c, family=f, samples=100,
                                       prior_var=0.01)
                 for f in ("dg", "dlr") for c in CURVATURES if c in TRACTABLE[f]}
        ms = {k: 1000 * v for k, v in interleaved(steps, max(args.repeats // 3, 3)).items()}
        size = sum(p.numel() for p in build_network("cnn", dim, CLASSES).parameters())
        print(f"\nms per BONG step by curvature, cnn at {side} x {side} (P = {size:,}), rank 10, "
              f"M = 100, prior variance 0.01 ({load()})")
        print("family" + "".join(f"{c:>10}" for c in CURVATURES))
        for f in ("dg", "dlr"):
            print(f"{f:<6}" + "".join(f"{ms[f'{c}/{f}']:>10.2f}" if f"{c}/{f}" in ms
                                      else f"{'-':>10}" for c in CURVATURES))

if __name__ == "__main__":
    main()
