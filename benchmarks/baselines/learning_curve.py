"""Test accuracy of one method as meta-training goes on: a quick check that a method learns.

Meta-trains ``method`` on ``glyphs`` (5-way, ``--shot``, 5 queries per class, Adam over the
method's parameter groups, ``--meta-batch`` episodes per step, as the runner does) and prints the
mean training loss and the accuracy on ``--test`` fixed test episodes (15 queries per class)
every ``--every`` episodes. Used to tell an under-trained method from a broken one.

    .venv/bin/python benchmarks/baselines/learning_curve.py maml --episodes 400 --every 100
    .venv/bin/python benchmarks/baselines/learning_curve.py abml --set kl_weight=1
"""

from __future__ import annotations

import argparse
import time

import torch

from zoo.episode import EpisodeSampler
from zoo.method import Method, build_method
from zoo.plugins import load_dataset, registry


def accuracy(method: Method, sampler: EpisodeSampler, episodes: int) -> float:
    """Mean query accuracy over the first ``episodes`` episodes of ``sampler``."""
    method.eval()
    hits = []
    with torch.no_grad():
        for i in range(episodes):
            episode = sampler[i]
            hits.append((method.predict(episode).probs.argmax(1) == episode.query_y).double().mean())
    method.train()
    return float(torch.stack(hits).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method")
    parser.add_argument("--episodes", type=int, default=100, help="training episodes")
    parser.add_argument("--every", type=int, default=50, help="evaluate every this many episodes")
    parser.add_argument("--shot", type=int, default=1)
    parser.add_argument("--test", type=int, default=40, help="test episodes per evaluation")
    parser.add_argument("--meta-batch", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a hyper-parameter of the method (repeatable)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hparams = dict(item.split("=", 1) for item in args.set)
    data = load_dataset("glyphs")
    method = build_method(args.method, way=5, in_channels=data.in_channels,
                          image_size=data.image_size, backbone="conv4s", seed=args.seed, **hparams,
                          registry=registry())
    optimizer = torch.optim.Adam(method.param_groups())
    train = EpisodeSampler(data, "train", 5, args.shot, 5, seed=args.seed)
    test = EpisodeSampler(data, "test", 5, args.shot, 15, seed=args.seed)
    print(f"{args.method} 5-way {args.shot}-shot on glyphs, meta-batch {args.meta_batch}, "
          f"{args.test} test episodes; {method.hparams}")
    print(f"{'episodes':>9}{'train loss':>12}{'test acc':>10}{'seconds':>9}")
    start, losses, done = time.perf_counter(), [], 0
    method.train()
    while done < args.episodes:
        optimizer.zero_grad()
        n = min(args.meta_batch, args.episodes - done)
        for i in range(n):
            loss = method.meta_loss(train[done + i]) / n
            loss.backward()
            losses.append(float(loss.detach()) * n)
        optimizer.step()
        done += n
        if done % args.every < n or done == args.episodes:
            acc = accuracy(method, test, args.test)
            print(f"{done:>9}{sum(losses) / len(losses):>12.4f}{acc:>10.3f}"
                  f"{time.perf_counter() - start:>9.0f}", flush=True)
            losses = []


if __name__ == "__main__":
    main()
