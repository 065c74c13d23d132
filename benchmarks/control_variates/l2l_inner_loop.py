"""The Meta-CV's inner loop two ways, side by side: the zoo's functional loop batched over tasks
(:func:`zoo.control_variates.neural.adapt`) and learn2learn's ``MAML`` (``clone`` + ``adapt`` per
task, a Python loop), on the same network, tasks and step, both in float64 on this CPU.

Two timings per task count: online adaptation of every task (Algorithm 7, ``L`` inner steps, no
graph) and one meta-gradient (Algorithm 6: inner steps with the graph, held-out loss, backward),
second order and ``--first-order``. Prints each wall time and the ratio l2l / batched, and checks
that both give the same adapted estimates and meta-gradients (to 1e-8).

    python benchmarks/control_variates/l2l_inner_loop.py --tasks 10 100 1000
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import Tensor, nn

from zoo.control_variates import neural
from zoo.control_variates.fitting import fit_size
from zoo.data.integrands import load_genz_oscillatory


class SteinCV(nn.Module):
    """The Meta-CV's network as a module for learn2learn: ``(x, score) -> L'[u_theta 1](x)``."""

    def __init__(self, params: list[Tensor], boundary: bool):
        super().__init__()
        self.params = nn.ParameterList([nn.Parameter(p.clone()) for p in params])
        self.boundary = boundary

    def forward(self, x: Tensor, score: Tensor) -> Tensor:
        return neural.stein_values(list(self.params), x, score, self.boundary)


def data(tasks: int, n: int, dim: int = 2) -> tuple[Tensor, Tensor, Tensor]:
    family = load_genz_oscillatory(dim=dim)
    draws = [family.draw(torch.Generator().manual_seed(i), n) for i in range(tasks)]
    x = torch.stack([d.x for d in draws])
    return x, torch.zeros_like(x), torch.stack([d.fx for d in draws])


def loss_of(g: Tensor, fx: Tensor) -> Tensor:
    r = fx[..., None] - g
    return (r - r.mean(-2, keepdim=True)).pow(2).mean(-2).sum(-1)


def l2l_adapt(maml, x: Tensor, s: Tensor, f: Tensor, steps: int) -> list:
    learners = []
    for t in range(len(x)):
        learner = maml.clone()
        for _ in range(steps):
            learner.adapt(loss_of(learner(x[t], s[t]), f[t]))
        learners.append(learner)
    return learners


def l2l_meta_loss(maml, x: Tensor, s: Tensor, f: Tensor, steps: int) -> Tensor:
    m = fit_size(x.shape[1], "split")
    total = 0.0
    for learner, t in zip(l2l_adapt(maml, x[:, :m], s[:, :m], f[:, :m], steps), range(len(x))):
        beta = (f[t, :m, None] - learner(x[t, :m], s[t, :m])).mean(-2, keepdim=True)
        total = total + (f[t, m:, None] - beta - learner(x[t, m:], s[t, m:])).pow(2).mean(-2).sum()
    return total / len(x)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def compare(T: int, first_order: bool, args) -> str:
    """Times both inner loops on ``T`` tasks and checks that they agree."""
    import learn2learn as l2l

    x, s, f = data(T, args.samples)
    meta = neural.MetaCV(2, hidden=(args.width, args.width), steps=args.steps,
                         inner_lr=args.inner_lr, penalty=0.0, first_order=first_order,
                         boundary=True)
    maml = l2l.algorithms.MAML(SteinCV(list(meta.params), True), lr=args.inner_lr,
                               first_order=first_order)
    m = fit_size(args.samples, "split")

    def l2l_estimate() -> Tensor:
        learners = l2l_adapt(maml, x[:, :m], s[:, :m], f[:, :m], args.steps)
        return torch.stack([(f[t, m:] - lr(x[t, m:], s[t, m:])[:, 0]).mean()
                            for t, lr in enumerate(learners)]).detach()

    ours, t_ours = timed(lambda: meta.estimate(x, s, f).value[:, 0])
    theirs, t_l2l = timed(l2l_estimate)
    assert torch.allclose(ours, theirs, atol=1e-8), "the two inner loops disagree"
    grads, g_ours = timed(lambda: torch.autograd.grad(meta.meta_loss(x, s, f), list(meta.params)))
    grads_l2l, g_l2l = timed(lambda: torch.autograd.grad(
        l2l_meta_loss(maml, x, s, f, args.steps), list(maml.parameters())))
    assert all(torch.allclose(a, b, atol=1e-8) for a, b in zip(grads, grads_l2l))
    order = "first" if first_order else "second"
    return (f"{order}-order, {T:5d} tasks: adapt+estimate batched {t_ours:.3f} s, l2l "
            f"{t_l2l:.3f} s (x{t_l2l / t_ours:.0f}); meta-gradient batched {g_ours:.3f} s, l2l "
            f"{g_l2l:.3f} s (x{g_l2l / g_ours:.0f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, nargs="+", default=[10, 100, 1000])
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--inner-lr", type=float, default=0.01)
    p.add_argument("--width", type=int, default=80)
    args = p.parse_args()
    torch.set_default_dtype(torch.float64)
    for first_order in (False, True):
        for T in args.tasks:
            print(compare(T, first_order, args), flush=True)


if __name__ == "__main__":
    main()
