"""Cost of MD-BFSC on this CPU, measured in one run (one thread for every method):

1. a training step (meta_loss + backward + Adam step) against ProtoNet with the same backbone
   (conv4s) and the same episode (glyphs, 5-way, 80 images): the ratio should be <= 1.3. Steps are
   interleaved and timed in CPU time (the machine is shared), under the runner's malloc setting
   (``zoo.runner.malloc``: the script runs itself again with it if it was started without;
   without it the page faults of either method vary from run to run with allocation order;
   ``benchmarks/allocator.py`` shows both settings);
2. time per test episode (predict, 50 inner steps) for way in {5, 20, 50} x shot in {1, 5, 20},
   15 queries per class, on random 28x28 images (the cost depends only on the sizes). Each cell is
   first timed with 2 and 6 inner steps (every step costs the same: one batched Cholesky of the
   ``[way, n, n]`` matrices ``I + S K S`` and one triangular solve for the marginals), giving an
   estimate of the 50-step time; a cell whose estimate fits ``--budget`` seconds is measured in
   full (median of up to ``--repeat // 3`` runs), a larger one is reported as that linear
   extrapolation, marked ``*``. The whole grid then fits in a few minutes on one thread.

    .venv/bin/python benchmarks/md_bfsc/cost.py [--repeat 7] [--budget 20] [--skip-grid]
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit

import torch

from zoo import EpisodeSampler, build_method
from zoo.plugins import load_dataset, registry
from zoo.runner.malloc import RETAIN, exec_with, malloc_setting
from zoo.testing import toy_episode

torch.set_num_threads(1)
if __name__ == "__main__":
    exec_with(RETAIN)  # as in the runner
MALLOC = malloc_setting()


def median_seconds(fn, repeat: int) -> float:
    """Median wall time of ``fn`` over ``repeat`` calls after one warm-up call."""
    return statistics.median(timeit.repeat(fn, number=1, repeat=repeat + 1)[1:])


def train_step(name: str, episode, **hparams) -> float:
    method = build_method(name, way=episode.way, in_channels=1, image_size=28, seed=0,
                          backbone="conv4s", **hparams, registry=registry()).train()
    opt = torch.optim.Adam(method.param_groups())

    def step() -> None:
        opt.zero_grad()
        method.meta_loss(episode).backward()
        opt.step()
    return step


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--budget", type=float, default=20.0, help="seconds per grid cell")
    p.add_argument("--skip-grid", action="store_true")
    args = p.parse_args()
    ds = load_dataset("glyphs")
    print("training step vs ProtoNet (conv4s, glyphs 5-way, 80 images; median CPU time of "
          f"{args.repeat}, interleaved; malloc {MALLOC})")
    for shot in (1, 5):
        ep = EpisodeSampler(ds, "train", 5, shot, 15 if shot == 1 else 11, seed=0)[0]
        steps = {n: train_step(n, ep) for n in ("protonet", "md-bfsc", "gd-bfsc")}
        times: dict[str, list[float]] = {n: [] for n in steps}
        for fn in steps.values():
            fn()
        for _ in range(args.repeat):  # interleave so that machine load hits all alike
            for n, fn in steps.items():
                t = time.process_time()
                fn()
                times[n].append(time.process_time() - t)
        med = {n: statistics.median(v) for n, v in times.items()}
        print(f"  5-way {shot}-shot, {ep.query} queries: protonet {med['protonet'] * 1e3:.1f} ms, "
              f"md-bfsc {med['md-bfsc'] * 1e3:.1f} ms ({med['md-bfsc'] / med['protonet']:.2f}x), "
              f"gd-bfsc {med['gd-bfsc'] * 1e3:.1f} ms ({med['gd-bfsc'] / med['protonet']:.2f}x)")
    if args.skip_grid:
        return
    print("time per test episode (predict, 50 inner steps, 15 queries per class; "
          "* = extrapolated from 2 and 6 steps)")
    print(f"  {'way':>4} {'shot':>5} {'md-bfsc ms':>12} {'protonet ms':>12}")
    for way in (5, 20, 50):
        for shot in (1, 5, 20):
            print(f"  {way:>4} {shot:>5} " + grid_cell(way, shot, args.repeat, args.budget),
                  flush=True)


def grid_cell(way: int, shot: int, repeat: int, budget: float) -> str:
    """One row of the way x shot table (see the module docstring for the protocol)."""
    ep = toy_episode(way, shot, query=15)
    md = build_method("md-bfsc", way=way, in_channels=1, image_size=28, seed=0,
                      backbone="conv4s", registry=registry()).eval()
    proto = build_method("protonet", way=way, in_channels=1, image_size=28, seed=0,
                         backbone="conv4s", registry=registry()).eval()
    steps = md.hparams["steps_test"]

    def predict(m, inner_steps: int | None = None) -> float:
        if inner_steps is not None:
            m.hparams["steps_test"] = inner_steps
        t = time.perf_counter()
        with torch.no_grad():
            m.predict(ep)
        return time.perf_counter() - t

    predict(md, 2)
    t2, t6 = predict(md, 2), predict(md, 6)
    estimate = t2 + (t6 - t2) * (steps - 2) / 4
    if estimate * 2 <= budget:
        runs = max(1, min(repeat // 3, int(budget / estimate) - 1))
        md_time = statistics.median(predict(md, steps) for _ in range(runs))
        md_cell = f"{md_time * 1e3:>11.1f} "
    else:
        md_cell = f"{estimate * 1e3:>11.1f}*"
    proto_time = median_seconds(lambda: predict(proto), max(1, repeat // 3))
    return f"{md_cell} {proto_time * 1e3:>12.1f}"


if __name__ == "__main__":
    main()
