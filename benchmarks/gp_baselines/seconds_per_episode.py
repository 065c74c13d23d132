"""Seconds per test episode (``predict`` only, default steps) of the GP baselines on this machine.

    .venv/bin/python benchmarks/gp_baselines/seconds_per_episode.py [--way 5 --shot 5 --query 15
        --episodes 5 --threads 1 --backbone conv4s --image-size 28]

Each method is built with the same backbone and seed and timed on the same synthetic episodes
(``zoo.testing.toy_episode``); the first episode is a warm-up and is not counted.
"""

from __future__ import annotations

import argparse
import time

import torch

from zoo.method import build_method
from zoo.testing import toy_episode

CONFIGS = [("dkt", {}), ("ove", {}), ("logistic-softmax", {"inference": "mean-field"}),
           ("logistic-softmax", {"inference": "gibbs"}), ("protonet", {})]


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
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    episodes = [toy_episode(args.way, args.shot, args.query, image_size=args.image_size, seed=s)
                .to(args.device) for s in range(args.episodes + 1)]
    print(f"{args.way}-way {args.shot}-shot, {args.query} queries/class, {args.backbone}, "
          f"{args.threads} thread(s), device {args.device}")
    for name, hp in CONFIGS:
        m = build_method(name, way=args.way, in_channels=1, image_size=args.image_size,
                         backbone=args.backbone, seed=0, **hp).to(args.device).eval()
        times = []
        with torch.no_grad():
            for ep in episodes:
                start = time.perf_counter()
                m.predict(ep)
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
        label = name + "".join(f" {k}={v}" for k, v in hp.items())
        t = torch.tensor(times[1:])
        print(f"{label:40s} {t.mean():8.3f} s/episode  (min {t.min():.3f}, max {t.max():.3f})")


if __name__ == "__main__":
    main()
