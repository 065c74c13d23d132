"""Seconds per training step of a meta-batch of ``E`` episodes: the per-episode loop against one
batched call (:mod:`zoo.batching`), side by side in one run, on the CPU or a GPU.

A step is what the trainer does: zero the gradients, the meta-batch's mean loss and its backward,
an Adam step. ``loop`` calls ``meta_loss`` once per episode (a backward each); ``batched`` makes
one vmapped call for all ``E`` episodes (BatchNorm statistics per episode, as the loop) and one
backward. ``E = 1`` is one episode, for which both are the same call. Random 28x28 images on a
Conv4S backbone (the cost depends only on the sizes), ``--way``-way ``--shot``-shot with
``--query`` queries per class, each method's default kernel. Loop and batched steps alternate,
``--repeat`` rounds; the fastest is reported (``--stat min``; the JSON has every round). On the
CPU the clock is the process's CPU time (with one thread, the step's own cost whatever else
shares the cores), on a GPU the synchronised wall time (``--device cuda``, also the default
when one is present). A method that does not declare ``batches_episodes`` (md-bfsc: draws seeded
per episode) shows the loop in both columns.

    python benchmarks/scale/meta_batch.py [--methods protonet,dkt] [--episodes 1,4,16]
        [--way 5] [--shot 1] [--query 15] [--repeat 3] [--device cpu|cuda] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import torch
from gp_scale import timed

from zoo import build_method
from zoo.batching import batched_losses
from zoo.plugins import registry
from zoo.testing import toy_episode

log = logging.getLogger("meta_batch")


def step(method: torch.nn.Module, optimizer: torch.optim.Optimizer, episodes: list,
         batched: bool) -> None:
    """One optimizer step on the mean loss of ``episodes``, as the trainer takes it."""
    optimizer.zero_grad(set_to_none=True)
    n = len(episodes)
    losses = batched_losses(method, episodes, method.meta_loss) if batched else None
    if losses is not None:
        (losses / n).sum().backward()
    else:
        for episode in episodes:
            (method.meta_loss(episode) / n).backward()
    optimizer.step()


def measure(name: str, n: int, args: argparse.Namespace, device: torch.device) -> dict:
    """Seconds per step of the loop and of the batched call for ``n`` episodes of ``name``."""
    episodes = [toy_episode(args.way, args.shot, query=args.query, seed=s).to(device)
                for s in range(n)]
    runs: dict[str, Callable[[], None]] = {}
    for mode in ("loop", "batched"):
        method = build_method(name, way=args.way, in_channels=1, image_size=28,
                              backbone="conv4s", seed=0, registry=registry()).to(device).train()
        optimizer = torch.optim.Adam(method.param_groups())
        runs[mode] = lambda m=method, o=optimizer, b=(mode == "batched"): step(m, o, episodes, b)
        runs[mode]()  # warm-up
    seconds: dict[str, list[float]] = {mode: [] for mode in runs}
    for _ in range(args.repeat):
        for mode, fn in runs.items():
            seconds[mode].append(timed(fn, device, args.clock))
    pick = min if args.stat == "min" else (lambda xs: sorted(xs)[len(xs) // 2])
    best = {mode: pick(xs) for mode, xs in seconds.items()}
    return {"method": name, "episodes": n, "loop_s": best["loop"], "batched_s": best["batched"],
            "speedup": best["loop"] / best["batched"], "rounds": seconds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", default="protonet,dkt")
    p.add_argument("--episodes", default="1,4,16", help="meta-batch sizes E")
    p.add_argument("--way", type=int, default=5)
    p.add_argument("--shot", type=int, default=1)
    p.add_argument("--query", type=int, default=15)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--stat", choices=("min", "median"), default="min")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--clock", choices=("wall", "cpu"), default=None,
                   help="default: cpu on the CPU, wall (synchronised) on a GPU")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    device = torch.device(args.device)
    args.clock = args.clock or ("wall" if device.type == "cuda" else "cpu")
    load = os.getloadavg()
    rows = [measure(name, int(n), args, device) for name in args.methods.split(",")
            for n in args.episodes.split(",")]
    load_after = os.getloadavg()
    print(f"{args.way}-way {args.shot}-shot, {args.query} queries per class, conv4s, device "
          f"{device}, {args.clock} clock, {args.stat} of {args.repeat} interleaved rounds, "
          f"{torch.get_num_threads()} thread(s), load average {load[0]:.2f} before, "
          f"{load_after[0]:.2f} after")
    print("| method | E | loop s/step | batched s/step | loop / batched | batched ms/episode |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['method']} | {r['episodes']} | {r['loop_s']:.3f} | {r['batched_s']:.3f} | "
              f"{r['speedup']:.2f} | {1000 * r['batched_s'] / r['episodes']:.1f} |")
    if args.json:
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)},
                                         "load": [load, load_after], "rows": rows}, indent=1,
                                        default=str))


if __name__ == "__main__":
    main()
