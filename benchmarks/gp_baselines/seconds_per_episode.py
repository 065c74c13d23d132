"""Seconds per test episode (``predict``, default steps) and per training step (``meta_loss`` and
its backward pass) of the GP baselines on this machine.

    .venv/bin/python benchmarks/gp_baselines/seconds_per_episode.py [--way 5 --shot 5 --query 15
        --episodes 5 --threads 1 --backbone conv4s --image-size 28 --methods ove]

Each method is built with the same backbone and seed and timed on the same synthetic episodes
(``zoo.testing.toy_episode``); the first episode is a warm-up and is not counted. Both wall-clock
and process CPU seconds are printed: on a shared machine the CPU seconds of a 1-thread run are the
comparable number (on a GPU only the wall clock means anything). The OVE plugin
is timed with both of its Gibbs samplers (``sampler=joint``, the authors' and the former default,
and ``sampler=blocked``), and their ratio is printed.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import torch

from zoo.episode import Episode
from zoo.method import Method, build_method
from zoo.plugins import registry
from zoo.testing import toy_episode

CONFIGS = [("dkt", {}), ("ove", {"sampler": "joint"}), ("ove", {"sampler": "blocked"}),
           ("logistic-softmax", {"inference": "mean-field"}),
           ("logistic-softmax", {"inference": "gibbs"}), ("protonet", {})]


def seconds(run: Callable[[Episode], object], episodes: list[Episode],
            device: str) -> tuple[float, float]:
    """Mean wall-clock and CPU seconds per episode of ``run``, the first (warm-up) dropped."""
    times = []
    for ep in episodes:
        wall, cpu = time.perf_counter(), time.process_time()
        run(ep)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append((time.perf_counter() - wall, time.process_time() - cpu))
    mean = torch.tensor(times[1:], dtype=torch.float64).mean(0)
    return float(mean[0]), float(mean[1])


def test_episode(m: Method) -> Callable[[Episode], object]:
    def run(ep: Episode) -> object:
        m.eval()
        with torch.no_grad():
            return m.predict(ep)
    return run


def train_step(m: Method) -> Callable[[Episode], object]:
    def run(ep: Episode) -> object:
        m.train()
        m.zero_grad()
        loss = m.meta_loss(ep)
        loss.backward()
        return loss
    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--way", type=int, default=5)
    p.add_argument("--shot", type=int, default=5)
    p.add_argument("--query", type=int, default=15)
    p.add_argument("--episodes", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--backbone", default="conv4s")
    p.add_argument("--image-size", type=int, default=28)
    p.add_argument("--device", default="cpu")
    p.add_argument("--methods", default="", help="comma-separated names (default: all)")
    p.add_argument("--no-train", action="store_true", help="time test episodes only")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    episodes = [toy_episode(args.way, args.shot, args.query, image_size=args.image_size, seed=s)
                .to(args.device) for s in range(args.episodes + 1)]
    wanted = set(filter(None, args.methods.split(",")))
    print(f"{args.way}-way {args.shot}-shot, {args.query} queries/class, {args.backbone}, "
          f"{args.threads} thread(s), device {args.device}")
    print(f"{'':40s} {'test s/episode':>19s} {'train s/step':>19s}")
    print(f"{'method':40s} {'wall':>9s} {'cpu':>9s} {'wall':>9s} {'cpu':>9s}")
    results: dict[str, tuple[float, ...]] = {}
    for name, hp in CONFIGS:
        if wanted and name not in wanted:
            continue
        m = build_method(name, way=args.way, in_channels=1, image_size=args.image_size,
                         backbone=args.backbone, seed=0, **hp, registry=registry()).to(args.device)
        label = name + "".join(f" {k}={v}" for k, v in hp.items())
        test = seconds(test_episode(m), episodes, args.device)
        train = (math.nan, math.nan) if args.no_train else seconds(train_step(m), episodes,
                                                                   args.device)
        results[label] = (*test, *train)
        print(f"{label:40s}" + "".join(f" {t:9.3f}" for t in results[label]), flush=True)
    joint, blocked = results.get("ove sampler=joint"), results.get("ove sampler=blocked")
    if joint and blocked:
        print(f"{'ove joint / blocked':40s}" + "".join(f" {a / b:8.1f}x" for a, b in
                                                       zip(joint, blocked, strict=True)))


if __name__ == "__main__":
    main()
