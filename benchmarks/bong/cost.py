"""Cost of one BONG update against one SGD step, and the per-step time of every rule x family.

1. On the paper's CNN (28 x 28 inputs, P = 57,722, C = 10): one BONG-LIN-HESS-DLR-10 update (the
   Jacobian by C backward passes, a thin SVD of a P x (L + C) factor) against one SGD step on the
   same example; the paper's budget is O(C + 2) backward-pass equivalents, i.e. at most 12x.
2. Every rule x family with the LIN-HESS curvature, on the paper's CNN for dg, dg-mom and dlr
   (fc and fc-mom need P x P = 3.3e9 entries there) and on a small MLP (P = 1,210) for all five.

Timings are medians over ``--repeats`` rounds in which the configurations run interleaved
(round-robin), so that drifts of a shared machine hit all of them alike. Float64, one thread.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/bong/cost.py --repeats 20
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from zoo_bong.beliefs import FAMILIES
from zoo_bong.method import Bong
from zoo_bong.networks import build_network
from zoo_bong.rules import RULES


def bong_step(dim: int, network: str, **hparams) -> Callable[[], None]:
    """One update of ``bong`` with ``hparams`` on a fixed random example, from its prior."""
    torch.manual_seed(0)
    method = Bong(dim=dim, classes=10, network=network, prior_var=0.1, **hparams)
    state = method.init()
    x, y = torch.rand(dim), torch.tensor(3)
    return lambda: method.update(state, x, y)


def sgd_step(dim: int, network: str) -> Callable[[], None]:
    """One SGD step of the same network (float64) on the same kind of example."""
    torch.manual_seed(0)
    net = build_network(network, dim, 10).double()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.rand(1, dim, dtype=torch.float64), torch.tensor([3])

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def interleaved(steps: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Median seconds of each step over ``repeats`` round-robin rounds (after one warm-up)."""
    times: dict[str, list[float]] = {k: [] for k in steps}
    for step in steps.values():
        step()
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)

    head = interleaved({"BONG-LIN-HESS-DLR-10": bong_step(784, "cnn"),
                        "SGD": sgd_step(784, "cnn")}, args.repeats)
    ratio = head["BONG-LIN-HESS-DLR-10"] / head["SGD"]
    print(f"paper CNN (P = 57,722): BONG-LIN-HESS-DLR-10 {1000 * head['BONG-LIN-HESS-DLR-10']:.1f}"
          f" ms, SGD {1000 * head['SGD']:.2f} ms per example: {ratio:.1f}x (goal <= 12x)")

    for network, dim, families in (("cnn", 784, ("dg", "dg-mom", "dlr")), ("mlp", 64, FAMILIES)):
        steps = {f"{rule}/{family}": bong_step(dim, network, rule=rule, family=family,
                                               alpha=1e-3)
                 for rule in RULES for family in families}
        steps["sgd"] = sgd_step(dim, network)
        ms = interleaved(steps, args.repeats)
        print(f"\nms per step, LIN-HESS, {network} ({dim}-d input), rank 10, one iteration")
        print("rule  " + "".join(f"{f:>10}" for f in families))
        for rule in RULES:
            print(f"{rule:<6}" + "".join(f"{1000 * ms[f'{rule}/{f}']:>10.2f}" for f in families))
        print(f"sgd   {1000 * ms['sgd']:>10.2f}")


if __name__ == "__main__":
    main()
