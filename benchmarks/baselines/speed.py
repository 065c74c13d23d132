"""Seconds per training step and per test episode, side by side, at 5-way 1-shot on Conv4S.

A training step is ``meta_loss`` + ``backward`` + an Adam step on one episode (the runner
accumulates ``meta_batch`` of them per optimizer step; this times one). A test episode is
``predict`` in eval mode under ``torch.no_grad()``. Episodes are the conformance suite's toy
episodes (28x28, one channel, 15 queries per class): timing does not depend on the pixels. Calls
run under the runner's malloc setting (``zoo.runner.malloc``), as every cell does: the script runs
itself again with it if it was started without.

    .venv/bin/python benchmarks/baselines/speed.py                  # every method below, CPU
    .venv/bin/python benchmarks/baselines/speed.py --device cuda --repeats 20 maml anil
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from zoo.method import build_method
from zoo.plugins import registry
from zoo.runner.malloc import RETAIN, exec_with, malloc_setting
from zoo.testing import toy_episode

METHODS = ("protonet", "maml", "fomaml", "metasgd", "anil", "abml", "bmaml", "feature-transfer",
           "baseline-pp", "matchingnet", "relationnet")


def seconds(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    """Median wall time of ``fn`` over ``repeats`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, way: int, shot: int, repeats: int, device: torch.device) -> tuple[float, float]:
    method = build_method(name, way=way, in_channels=1, image_size=28, backbone="conv4s",
                          seed=0, registry=registry()).to(device)
    episode = toy_episode(way, shot, query=15).to(device)
    opt = torch.optim.Adam(method.param_groups())

    def train_step() -> None:
        method.train()
        opt.zero_grad()
        method.meta_loss(episode).backward()
        opt.step()

    def test_episode() -> None:
        method.eval()
        with torch.no_grad():
            method.predict(episode)

    return seconds(train_step, repeats, device), seconds(test_episode, repeats, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("methods", nargs="*", default=list(METHODS))
    parser.add_argument("--way", type=int, default=5)
    parser.add_argument("--shot", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    exec_with(RETAIN)  # as in the runner
    malloc = malloc_setting()
    print(f"{args.way}-way {args.shot}-shot, conv4s 28x28, 15 queries/class, {device}, "
          f"median of {args.repeats}, malloc {malloc}")
    print(f"{'method':<18}{'s / train step':>16}{'s / test episode':>18}")
    for name in args.methods:
        train, test = measure(name, args.way, args.shot, args.repeats, device)
        print(f"{name:<18}{train:>16.4f}{test:>18.4f}", flush=True)


if __name__ == "__main__":
    main()
