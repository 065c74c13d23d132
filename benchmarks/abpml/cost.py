"""Cost of an ABPML training step against second-order MAML at the same number of inner steps L,
on the same episode (glyphs, conv4s), in one run; the goal is a ratio <= 1.3.

A step is ``meta_loss`` + backward + Adam step; both methods are second-order with the same
``inner_lr``. Steps are interleaved and timed in CPU time on one thread (the machine is shared),
under the runner's malloc setting (``zoo.runner.malloc``: the script runs itself again with it);
on ``--device cuda`` in wall time after a synchronisation. ABPML does one more forward pass of
the support set per step than MAML (the prototypes of the adapted network); its Gaussian head and
KL are O(C K p).

    python benchmarks/abpml/cost.py [--repeat 9] [--steps 1 5] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from zoo import EpisodeSampler, build_method
from zoo.plugins import load_dataset, registry
from zoo.runner.malloc import RETAIN, exec_with, malloc_setting

torch.set_num_threads(1)
if __name__ == "__main__":
    exec_with(RETAIN)  # as in the runner
MALLOC = malloc_setting()


def train_step(name: str, episode, device: str, steps: int) -> Callable[[], None]:
    method = build_method(name, way=episode.way, in_channels=1, image_size=28, seed=0,
                          backbone="conv4s", inner_steps=steps, inner_lr=0.1,
                          meta_batch=1, registry=registry()).to(device).train()
    opt = torch.optim.Adam(method.param_groups())

    def step() -> None:
        opt.zero_grad()
        method.meta_loss(episode).backward()
        opt.step()
    return step


def clock(device: str) -> Callable[[], float]:
    if device == "cpu":
        return time.process_time

    def wall() -> float:
        torch.cuda.synchronize()
        return time.perf_counter()
    return wall


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--steps", type=int, nargs="+", default=[1, 5], help="inner steps L")
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    ds = load_dataset("glyphs")
    now = clock(args.device)
    print(f"training step, abpml vs second-order maml (conv4s, glyphs 5-way, 15 queries; median "
          f"of {args.repeat}, interleaved; {args.device}; malloc {MALLOC})")
    for shot in (1, 5):
        ep = EpisodeSampler(ds, "train", 5, shot, 15, seed=0)[0].to(args.device)
        for steps in args.steps:
            fns = {n: train_step(n, ep, args.device, steps) for n in ("maml", "abpml")}
            times: dict[str, list[float]] = {n: [] for n in fns}
            for fn in fns.values():
                fn()
            for _ in range(args.repeat):  # interleave so that machine load hits both alike
                for n, fn in fns.items():
                    t = now()
                    fn()
                    times[n].append(now() - t)
            med = {n: statistics.median(v) for n, v in times.items()}
            print(f"  5-way {shot}-shot, L = {steps}: maml {med['maml'] * 1e3:.1f} ms, "
                  f"abpml {med['abpml'] * 1e3:.1f} ms, ratio {med['abpml'] / med['maml']:.2f}x")


if __name__ == "__main__":
    main()
