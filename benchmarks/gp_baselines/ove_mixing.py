"""Mixing of the OVE plugin's two Gibbs samplers of the same posterior, on glyph episodes.

    .venv/bin/python benchmarks/gp_baselines/ove_mixing.py [--episodes 10 --way 5 --shot 5
        --query 15 --steps 2,10,50 --threads 1]

For each test episode (``glyphs``, test split) and number of Gibbs steps, the predictive of
``sampler=joint`` and of ``sampler=blocked`` is computed twice, with the episode's seed and with
another seed. Printed per number of steps: the accuracy of each sampler and the mean total
variation distance between predictives, ``joint vs blocked`` next to the Monte Carlo floor of
each sampler (the same sampler under two seeds). Two correct samplers that have mixed agree with
each other as well as each agrees with itself. The backbone is an untrained ``conv4s`` (seed 0):
what matters here is the agreement between samplers, not the accuracy level.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch

from zoo.episode import Episode, EpisodeSampler
from zoo.method import build_method
from zoo.plugins import load_dataset, registry


def probs(method: torch.nn.Module, episode: Episode, seed_offset: int) -> torch.Tensor:
    episode = replace(episode, info={**episode.info, "seed": episode.info["seed"] + seed_offset})
    with torch.no_grad():
        return method.predict(episode).probs.double()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--way", type=int, default=5)
    p.add_argument("--shot", type=int, default=5)
    p.add_argument("--query", type=int, default=15)
    p.add_argument("--steps", default="2,10,50")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    sampler = EpisodeSampler(load_dataset("glyphs"), "test", args.way, args.shot, args.query,
                             seed=0)
    episodes = [sampler[i] for i in range(args.episodes)]
    print(f"glyphs test, {args.way}-way {args.shot}-shot, {args.query} queries/class, "
          f"{args.episodes} episodes, 20 chains")
    print(f"{'steps':>5s} {'acc joint':>10s} {'acc blocked':>12s} {'TV j-b':>8s} "
          f"{'TV j-j':>8s} {'TV b-b':>8s}")
    for steps in map(int, args.steps.split(",")):
        methods = {s: build_method("ove", way=args.way, in_channels=1, image_size=28,
                                   backbone="conv4s", seed=0, sampler=s, test_steps=steps,
                                   registry=registry()).eval()
                   for s in ("joint", "blocked")}
        acc = {s: 0.0 for s in methods}
        tv = {"j-b": 0.0, "j-j": 0.0, "b-b": 0.0}
        for ep in episodes:
            pj, pj2 = probs(methods["joint"], ep, 0), probs(methods["joint"], ep, 1)
            pb, pb2 = probs(methods["blocked"], ep, 0), probs(methods["blocked"], ep, 1)
            acc["joint"] += float((pj.argmax(-1) == ep.query_y).double().mean())
            acc["blocked"] += float((pb.argmax(-1) == ep.query_y).double().mean())
            for key, (a, b) in {"j-b": (pj, pb), "j-j": (pj, pj2), "b-b": (pb, pb2)}.items():
                tv[key] += float(0.5 * (a - b).abs().sum(-1).mean())
        n = len(episodes)
        print(f"{steps:5d} {acc['joint'] / n:10.3f} {acc['blocked'] / n:12.3f} "
              f"{tv['j-b'] / n:8.4f} {tv['j-j'] / n:8.4f} {tv['b-b'] / n:8.4f}", flush=True)


if __name__ == "__main__":
    main()
