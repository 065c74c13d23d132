"""Cost of GMM-NP's inference on this machine.

1. One TRNG step (:func:`zoo_gmm_np.trng.step`: draws, Stein moments, eta search, update) on ``T``
   tasks against one forward+backward pass of the decoder's log-likelihood on the same number of
   latent draws (``samples`` per task, ``n`` points each), the term the step cannot avoid; goal:
   ratio <= 1.5.
2. Test-time fitting of sinusoid contexts, tasks batched: seconds per task for ``steps`` TRNG
   steps (the paper reports 0.1-1 s per task).

Median of ``--repeats`` timings after a warm-up; ``OMP_NUM_THREADS`` as set by the caller.

    python benchmarks/gmm_np/cost.py [--tasks 256] [--context 8] [--steps 100]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from zoo_gmm_np import GMMNP, trng

from zoo.data.functions import load_sinusoid
from zoo.tasks.regression import sample_task


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def timed(fn: Callable[[], object], repeats: int) -> float:
    fn()
    return statistics.median(seconds(fn) for _ in range(repeats))


def sinusoid_batch(tasks: int, points: int) -> tuple[torch.Tensor, torch.Tensor]:
    eps = [sample_task(load_sinusoid(), "test", 0, 64, i, points) for i in range(tasks)]
    return (torch.stack([e.context_x for e in eps]), torch.stack([e.context_y for e in eps]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=256)
    p.add_argument("--points", type=int, default=16, help="points per task in the step timing")
    p.add_argument("--context", type=int, default=8, help="context points when fitting")
    p.add_argument("--steps", type=int, default=100, help="test-time TRNG steps")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--hidden", type=int, default=8)
    p.add_argument("--components", type=int, default=4)
    p.add_argument("--latent-dim", type=int, default=3)
    a = p.parse_args()
    torch.manual_seed(0)
    m = GMMNP(x_dim=1, y_dim=1, hidden=a.hidden, components=a.components,
              latent_dim=a.latent_dim, kl_bound=0.05)
    x, y = sinusoid_batch(a.tasks, a.points)
    mask = torch.ones(x.shape[:2])
    target = m.log_target(x, y, mask)
    q = m.prior(a.tasks)
    per_component = m.trng.samples // a.components
    z = q.components.sample((per_component,)).movedim(2, 1).float().requires_grad_(True)

    def decoder_pass() -> None:
        m.log_likelihood(x, y, mask, z).sum().backward()

    prior = m.prior()

    def trng_step() -> None:
        trng.step(q, target, m.trng, prior=prior)

    trng_step(), decoder_pass()
    pairs = [(seconds(trng_step), seconds(decoder_pass)) for _ in range(a.repeats)]  # interleaved:
    step, decoder = (statistics.median(t) for t in zip(*pairs))  # a shared machine's load hits both
    ratio = statistics.median(s / d for s, d in pairs)
    print(f"T={a.tasks} tasks x {m.trng.samples} draws x {a.points} points, K={a.components}, "
          f"d_z={a.latent_dim}, hidden={a.hidden}, threads={torch.get_num_threads()}")
    print(f"one TRNG step {1000 * step:.1f} ms, decoder forward+backward {1000 * decoder:.1f} ms,"
          f" ratio {ratio:.2f} (median of {a.repeats} interleaved pairs)")
    cx, cy = sinusoid_batch(a.tasks, a.context)
    fit = timed(lambda: m.fit(cx, cy, steps=a.steps), max(1, a.repeats // 2))
    print(f"test-time fit: {a.steps} steps, {a.tasks} sinusoid tasks of {a.context} context "
          f"points batched: {fit:.2f} s, {1000 * fit / a.tasks:.1f} ms per task")


if __name__ == "__main__":
    main()
