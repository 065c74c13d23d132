"""The runner at scale: a suite of many small cells, runner overhead against the cells' own time,
and the time ``zoo report`` takes on the folder (issue 16; goals: overhead < 10% of the cells'
time at 10,000 cells, report < 10 s).

The cells' method is synthetic and defined here only (registered in a private copy of the plugin
registry, never globally): nearest prototype of 4x4-pooled pixels with one learnable scale, so a
training step or a test episode takes well under a millisecond of model work. Its backbone is the
flattened pixels (``pixels``, registered likewise): the method uses none, and building an unused
MLP per training would be work neither of the runner nor of the cell. Cells are glyphs
2-way 1-shot over ``cells / 2`` seeds and two test data sets (glyphs and digits), each training
``--train-episodes`` episodes (validated twice on 5) and testing ``--test-episodes``. A cell's own
time is its model's work (``meta_loss`` + backward + the optimizer step + ``predict``) and drawing
its episodes (``EpisodeSampler``), timed around those calls; the rest of the wall time of
``run_suite`` is the runner's overhead: suite expansion and hashing, data loading, folders,
configs, checkpoints, the temperature fit, metrics, results.jsonl, environment records. Printed:
the overhead against the cells' time and against the model's alone, and per cell; in wall time
and in CPU time (the process's, against the cells' own threads' CPU time), which a machine
shared with other work inflates less.

    python benchmarks/runner_many_cells.py [--cells 10000] [--train-episodes 100]
        [--test-episodes 50] [--out DIR] [--profile FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from zoo import Episode, Method, Prediction
from zoo.backbones import Backbone
from zoo.episode import EpisodeSampler
from zoo.plugins import registry
from zoo.runner.bench import run_suite
from zoo.runner.report import write_report
from zoo.runner.suite import suite_from_dict

WALL, CPU = [0.0, 0.0], [0.0, 0.0]  # [model, sampling] seconds


def timed(fn, slot: int = 0):
    """``fn`` with its wall and thread CPU time added to ``WALL[slot]`` and ``CPU[slot]``."""
    def wrapper(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            WALL[slot] += time.perf_counter() - wall
            CPU[slot] += time.thread_time() - cpu
    return wrapper


class Pixels(Backbone):
    """Flattened pixels (the synthetic method pools the images itself)."""

    def __init__(self, in_channels: int = 1, image_size: int = 28):
        super().__init__()
        self.feature_dim = in_channels * image_size * image_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)


class PooledPrototypes(Method):
    """Nearest class mean of 4x4 average-pooled images, logits scaled by one parameter."""

    name = "pooled-prototypes"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scale = nn.Parameter(torch.ones(()))

    def logits(self, episode: Episode) -> torch.Tensor:
        def pool(x: torch.Tensor) -> torch.Tensor:
            return F.adaptive_avg_pool2d(x, 4).flatten(1)

        s, q = pool(episode.support_x), pool(episode.query_x)
        onehot = F.one_hot(episode.support_y, episode.way).to(s.dtype)
        prototypes = (onehot.T @ s) / onehot.sum(0)[:, None]
        return -self.scale * torch.cdist(q, prototypes).pow(2)

    def meta_loss(self, episode: Episode) -> torch.Tensor:
        return F.cross_entropy(self.logits(episode), episode.query_y)

    def predict(self, episode: Episode) -> Prediction:
        return Prediction(torch.softmax(self.logits(episode), -1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cells", type=int, default=10_000)
    p.add_argument("--train-episodes", type=int, default=100)
    p.add_argument("--test-episodes", type=int, default=50)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--profile", type=Path, default=None, metavar="FILE",
                   help="profile run_suite (cProfile, CPU time): print its top functions, save "
                   "the stats")
    args = p.parse_args()
    torch.set_num_threads(1)
    reg = registry()
    if PooledPrototypes.name not in reg.names("methods"):
        reg.register("methods", PooledPrototypes.name, PooledPrototypes, "benchmark")
        reg.register("backbones", "pixels", Pixels, "benchmark")
    PooledPrototypes.meta_loss = timed(PooledPrototypes.meta_loss)
    PooledPrototypes.predict = timed(PooledPrototypes.predict)
    torch.Tensor.backward = timed(torch.Tensor.backward)
    torch.optim.Adam.step = timed(torch.optim.Adam.step)
    EpisodeSampler.__getitem__ = timed(EpisodeSampler.__getitem__, 1)
    suite = suite_from_dict("many-cells", {"suite": {
        "description": "many millisecond cells", "methods": [PooledPrototypes.name],
        "train_datasets": ["glyphs"], "test_datasets": ["glyphs", "digits"], "ways": [2],
        "shots": [1], "query": 2, "train_query": 2, "seeds": list(range(args.cells // 2)),
        "backbone": "pixels", "train_episodes": args.train_episodes, "val_episodes": 5,
        "val_every": max(1, args.train_episodes // 2), "test_episodes": args.test_episodes,
        "checkpoint_every": max(1, args.train_episodes // 2)}}, "benchmark", reg)
    out = args.out or Path(tempfile.mkdtemp(prefix="zoo-many-cells-"))
    profiler = cProfile.Profile(time.process_time) if args.profile else None  # CPU time
    start, start_cpu = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    outcome = run_suite(suite, out=out, device="cpu", progress=False, registry=reg)
    if profiler:
        profiler.disable()
    total = {"wall": (time.perf_counter() - start, WALL),
             "CPU": (time.process_time() - start_cpu, CPU)}
    n = max(len(outcome.finished), 1)
    print(f"{len(outcome.finished)} cells ({len(outcome.failed)} failed), {args.train_episodes} "
          f"training + {args.test_episodes} test episodes each")
    for kind, (spent, (model, sampling)) in total.items():
        own = model + sampling
        overhead = spent - own
        print(f"{kind}: run_suite {spent:.1f} s, cells' own time {own:.1f} s (model {model:.1f} "
              f"s, sampling {sampling:.1f} s), runner overhead {overhead:.1f} s = "
              f"{100 * overhead / own:.1f}% of the cells' time ({100 * overhead / model:.0f}% of "
              f"the model's), {overhead / n * 1e3:.2f} ms per cell (own "
              f"{own / n * 1e3:.2f} ms)")
    start = time.perf_counter()
    write_report(out, plots=False, registry=reg)
    print(f"zoo report on {out}: {time.perf_counter() - start:.1f} s")
    if profiler:
        profiler.dump_stats(args.profile)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
