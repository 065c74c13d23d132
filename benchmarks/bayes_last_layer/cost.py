"""CPU cost of bayes-last-layer's meta-training step and prediction beside other methods, on
glyph episodes of the quick suite's shape (5-way, 5 training / 15 test queries per class), in
process CPU seconds (robust to other jobs on the machine; one thread).

    python benchmarks/bayes_last_layer/cost.py [--shots 1 5] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import torch

from zoo.episode import EpisodeSampler
from zoo.plugins import load_dataset
from zoo.testing import build_for_tests

CASES = [("protonet", {}), ("dkt", {}), ("md-bfsc", {}),
         ("bayes-last-layer", {"family": "diag"}), ("bayes-last-layer", {"family": "kfac"}),
         ("bayes-last-layer", {"family": "full"})]


def cpu_seconds(fn, repeats: int) -> float:
    fn()
    start = time.process_time()
    for _ in range(repeats):
        fn()
    return (time.process_time() - start) / repeats


def train_step(method, episode) -> None:
    method.train().zero_grad()
    method.meta_loss(episode).backward()


def predict(method, episode) -> None:
    with torch.no_grad():
        method.eval().predict(episode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shots", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = load_dataset("glyphs")
    predict(build_for_tests("protonet", 5), EpisodeSampler(data, "val", 5, 1, 15)[0])  # warm-up
    print("| method | shot | train step (CPU s) | predict (CPU s) |\n|---|---|---|---|")
    for shot in args.shots:
        train = EpisodeSampler(data, "train", 5, shot, 5, seed=0)[0]
        test = EpisodeSampler(data, "val", 5, shot, 15, seed=0)[0]
        for name, hparams in CASES:
            method = build_for_tests(name, 5, **hparams)
            label = name + "".join(f" {k}={v}" for k, v in hparams.items())
            t_train = cpu_seconds(partial(train_step, method, train), args.repeats)
            t_predict = cpu_seconds(partial(predict, method, test), args.repeats)
            print(f"| {label} | {shot} | {t_train:.3f} | {t_predict:.3f} |", flush=True)


if __name__ == "__main__":
    main()
