"""The runner at scale: a suite of many small cells, runner overhead against the cells' own time,
and the time ``zoo report`` takes on the folder (issue 16; goals: overhead < 10% of the cells'
time at 10,000 cells, report < 10 s).

The cells' method is synthetic and defined here only (registered in a private copy of the plugin
registry, never globally): nearest prototype of 4x4-pooled pixels with one learnable scale, so a
training step or a test episode takes well under a millisecond of model work. Cells are glyphs
2-way 1-shot over ``cells / 2`` seeds and two test data sets (glyphs and digits), each training
``--train-episodes`` episodes (validated twice on 5) and testing ``--test-episodes``. A cell's own
time is its model's work (``meta_loss`` + backward + the optimizer step + ``predict``) and drawing
its episodes (``EpisodeSampler``), timed around those calls; the rest of the wall time of
``run_suite`` is the runner's overhead: suite expansion and hashing, data loading, folders,
configs, checkpoints, the temperature fit, metrics, results.jsonl, environment records. Printed:
the overhead against the cells' time and against the model's alone, and per cell.

    python benchmarks/runner_many_cells.py [--cells 10000] [--train-episodes 100]
        [--test-episodes 50] [--out DIR] [--profile]
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
from runner_overhead import MODEL_TIME, timed  # the same model-time accounting (this folder)
from torch import nn

from zoo import Episode, Method, Prediction
from zoo.episode import EpisodeSampler
from zoo.plugins import registry
from zoo.runner.bench import run_suite
from zoo.runner.report import write_report
from zoo.runner.suite import suite_from_dict


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
    p.add_argument("--profile", action="store_true", help="print the runner's top functions")
    args = p.parse_args()
    torch.set_num_threads(1)
    reg = registry()
    if PooledPrototypes.name not in reg.names("methods"):
        reg.register("methods", PooledPrototypes.name, PooledPrototypes, "benchmark")
    PooledPrototypes.meta_loss = timed(PooledPrototypes.meta_loss)
    PooledPrototypes.predict = timed(PooledPrototypes.predict)
    torch.Tensor.backward = timed(torch.Tensor.backward)
    torch.optim.Adam.step = timed(torch.optim.Adam.step)
    sample, sampling = EpisodeSampler.__getitem__, [0.0]

    def timed_sample(self: EpisodeSampler, index: int) -> Episode:
        start = time.perf_counter()
        try:
            return sample(self, index)
        finally:
            sampling[0] += time.perf_counter() - start

    EpisodeSampler.__getitem__ = timed_sample
    suite = suite_from_dict("many-cells", {"suite": {
        "description": "many millisecond cells", "methods": [PooledPrototypes.name],
        "train_datasets": ["glyphs"], "test_datasets": ["glyphs", "digits"], "ways": [2],
        "shots": [1], "query": 2, "train_query": 2, "seeds": list(range(args.cells // 2)),
        "backbone": "mlp", "train_episodes": args.train_episodes, "val_episodes": 5,
        "val_every": max(1, args.train_episodes // 2), "test_episodes": args.test_episodes,
        "checkpoint_every": max(1, args.train_episodes // 2)}}, "benchmark", reg)
    out = args.out or Path(tempfile.mkdtemp(prefix="zoo-many-cells-"))
    profiler = cProfile.Profile() if args.profile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    outcome = run_suite(suite, out=out, device="cpu", progress=False, registry=reg)
    if profiler:
        profiler.disable()
    wall = time.perf_counter() - start
    model = MODEL_TIME[0]
    own = model + sampling[0]
    overhead = wall - own
    n = max(len(outcome.finished), 1)
    print(f"{len(outcome.finished)} cells ({len(outcome.failed)} failed) in {wall:.1f} s "
          f"({args.train_episodes} training + {args.test_episodes} test episodes each): cells' own "
          f"time {own:.1f} s (model {model:.1f} s, sampling {sampling[0]:.1f} s), runner overhead "
          f"{overhead:.1f} s = {100 * overhead / own:.1f}% of the cells' time "
          f"({100 * overhead / model:.0f}% of the model's), {overhead / n * 1e3:.1f} ms per cell")
    start = time.perf_counter()
    write_report(out, plots=False, registry=reg)
    print(f"zoo report on {out}: {time.perf_counter() - start:.1f} s")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
