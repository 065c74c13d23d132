"""The runner at scale: a suite of many small cells, runner overhead against the cells' own time,
and the time ``zoo report`` takes on the folder, both printed by one run (goals:
overhead < 10% of the cells' time at 10,000 cells, ``zoo report`` < 10 s).

The cells' method is synthetic and defined here only (registered in a private copy of the plugin
registry, never globally): nearest prototype of 4x4-pooled pixels with one learnable scale, so a
training step or a test episode takes well under a millisecond of model work. Its backbone is the
flattened pixels (``pixels``, registered likewise): the method uses none, and building an unused
MLP per training would be work neither of the runner nor of the cell. Cells are glyphs
``--way``-way 1-shot with ``--query`` queries per class (default 2 and 2: the smallest episodes,
where the runner's share is largest; 5 and 15 is the common few-shot episode) over ``cells / 2``
seeds and two test data sets (glyphs and digits), each training ``--train-episodes`` episodes
(validated twice on 5) and testing ``--test-episodes``.

Overhead, exactly: ``(T - own - timing) / own``, where ``T`` is the time of ``run_suite`` (the
whole suite: expansion, hashes, data, every cell, every file) and ``own`` the sum over cells of
their own train and test time, which is the model's work (``meta_loss``, backward, the optimizer
step as ``optimizer.step()`` runs it, torch's wrapper included, ``predict``, validation
predictions included) and the drawing of their episodes (``EpisodeSampler``), timed around each
call; ``timing`` is what that timing itself costs outside the intervals it measures (~300 calls a
cell, each reading two clocks, ~1.4 us), measured in the same run on a no-op (:func:`timer_cost`)
and printed. Everything else is the runner's: building the model, seeding, checking and scoring
predictions, checkpoints, the temperature fit, summaries, files, flushes, results.jsonl, imports
paid in the run. Printed in wall time and in CPU time (the
process's, against the cells' own threads' CPU time), which a machine shared with other work
inflates less, with the load average. Then ``zoo report DIR`` runs in a fresh process as a user
runs it (imports included), without and with the figures: its wall and CPU time.

    python benchmarks/runner_many_cells.py [--cells 10000] [--train-episodes 100]
        [--test-episodes 50] [--way 2] [--query 2] [--threads 1] [--out DIR] [--profile FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import math
import os
import pstats
import resource
import subprocess
import sys
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
from zoo.runner.suite import suite_from_dict

WALL, CPU = [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]  # [model, sampling, calibration] seconds
CALLS = [0]  # timed calls made


def timed(fn, slot: int = 0):
    """``fn`` with its wall and thread CPU time added to ``WALL[slot]`` and ``CPU[slot]``. The
    clocks are read nested (CPU outside wall), so the wall interval holds ``fn`` and the two
    cheap wall-clock reads only; the reads' cost outside the intervals is :func:`timer_cost`."""
    def wrapper(*args, **kwargs):
        CALLS[0] += 1
        cpu = time.thread_time()
        wall = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            WALL[slot] += time.perf_counter() - wall
            CPU[slot] += time.thread_time() - cpu
    return wrapper


def timer_cost(n: int = 200_000) -> tuple[float, float]:
    """Seconds of wall and CPU time one :func:`timed` call adds outside the interval it
    measures (the clocks' reads, the wrapper's call and bookkeeping): ``n`` timed calls of a
    no-op, less the intervals they measured, less ``n`` plain calls of it. The benchmark's own
    cost, not the runner's: the overhead is printed without it and with it."""
    def noop() -> None:
        return None

    timed_noop = timed(noop, slot=2)
    calls = CALLS[0]
    best = (math.inf, math.inf)
    for _ in range(3):  # least of three: the machine's noise only ever adds
        WALL[2] = CPU[2] = 0.0
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            timed_noop()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        plain_wall, plain_cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            noop()
        plain_wall, plain_cpu = time.perf_counter() - plain_wall, time.process_time() - plain_cpu
        best = (min(best[0], (wall - WALL[2] - plain_wall) / n),
                min(best[1], (cpu - CPU[2] - plain_cpu) / n))
    CALLS[0] = calls
    return best


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


def timed_report(out: Path, *flags: str) -> tuple[float, float]:
    """Wall and CPU time (user + system) of ``zoo report out *flags`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys; from zoo.cli import main; "
                    "sys.exit(main(sys.argv[1:]))", "report", str(out), *flags], check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cells", type=int, default=10_000)
    p.add_argument("--train-episodes", type=int, default=100)
    p.add_argument("--test-episodes", type=int, default=50)
    p.add_argument("--way", type=int, default=2)
    p.add_argument("--query", type=int, default=2, help="queries per class")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--profile", type=Path, default=None, metavar="FILE",
                   help="profile run_suite (cProfile, CPU time): print its top functions, save "
                   "the stats")
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads of the cells (the runner's default too: a second thread "
                   "only waits at each tiny op, and its spinning would count as overhead in CPU "
                   "time)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    reg = registry()
    if PooledPrototypes.name not in reg.names("methods"):
        reg.register("methods", PooledPrototypes.name, PooledPrototypes, "benchmark")
        reg.register("backbones", "pixels", Pixels, "benchmark")
    PooledPrototypes.meta_loss = timed(PooledPrototypes.meta_loss)
    PooledPrototypes.predict = timed(PooledPrototypes.predict)
    torch.Tensor.backward = timed(torch.Tensor.backward)
    # the optimizer step as every training loop calls it: torch's own wrapper around a step
    # (a profiler record and the step hooks, ~20 us) included, as it is in any user's loop
    hook = torch.optim.Optimizer.profile_hook_step
    torch.optim.Optimizer.profile_hook_step = staticmethod(lambda step: timed(hook(step)))
    EpisodeSampler.__getitem__ = timed(EpisodeSampler.__getitem__, 1)
    suite = suite_from_dict("many-cells", {"suite": {
        "description": "many millisecond cells", "methods": [PooledPrototypes.name],
        "train_datasets": ["glyphs"], "test_datasets": ["glyphs", "digits"], "ways": [args.way],
        "shots": [1], "query": args.query, "train_query": args.query, "seeds": list(range(args.cells // 2)),
        "backbone": "pixels", "train_episodes": args.train_episodes, "val_episodes": 5,
        "val_every": max(1, args.train_episodes // 2), "test_episodes": args.test_episodes,
        "checkpoint_every": max(1, args.train_episodes // 2)}}, "benchmark", reg, registry=registry())
    out = args.out or Path(tempfile.mkdtemp(prefix="zoo-many-cells-"))
    load = os.getloadavg()[0]
    profiler = cProfile.Profile(time.process_time) if args.profile else None  # CPU time
    start, start_cpu = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    outcome = run_suite(suite, out=out, device="cpu", progress=False, registry=reg,
                        threads=args.threads)
    if profiler:
        profiler.disable()
    total = {"wall": (time.perf_counter() - start, WALL),
             "CPU": (time.process_time() - start_cpu, CPU)}
    n = max(len(outcome.finished), 1)
    ratio: dict[str, float] = {}
    print(f"{len(outcome.finished)} cells ({len(outcome.failed)} failed), {args.train_episodes} "
          f"training + {args.test_episodes} test episodes each, {args.way}-way 1-shot, "
          f"{args.query} queries per class")
    calls = CALLS[0]
    cost = dict(zip(("wall", "CPU"), timer_cost(), strict=True))
    for kind, (spent, (model, sampling, _)) in total.items():
        own = model + sampling
        timing = calls * cost[kind]
        overhead = spent - own - timing
        ratio[kind] = overhead / own
        print(f"{kind}: run_suite {spent:.1f} s, cells' own time {own:.1f} s (model {model:.1f} "
              f"s, sampling {sampling:.1f} s), the benchmark's timing {timing:.1f} s ({calls} "
              f"timed calls x {cost[kind] * 1e6:.2f} us), runner overhead {overhead:.1f} s = "
              f"{100 * overhead / own:.1f}% of the cells' time ({100 * overhead / model:.0f}% of "
              f"the model's; {100 * (overhead + timing) / own:.1f}% with the timing), "
              f"{overhead / n * 1e3:.2f} ms per cell (own {own / n * 1e3:.2f} ms)")
    print(f"load average during the run: {load:.1f} at its start, "
          f"{os.getloadavg()[0]:.1f} at its end (1 min)")
    report = {}
    for flags in (["--no-plots"], []):
        report[bool(flags)] = wall, cpu = timed_report(out, *flags)
        print(f"zoo report {out} {' '.join(flags)}: {wall:.1f} s wall, {cpu:.1f} s CPU (a fresh "
              f"process; load average {os.getloadavg()[0]:.1f})")
    print(f"goals at {n} cells: runner overhead {100 * ratio['wall']:.0f}% (wall) / "
          f"{100 * ratio['CPU']:.0f}% (CPU) of the cells' own time, goal < 10%; zoo report "
          f"{report[True][0]:.1f} s wall ({report[True][1]:.1f} s CPU) without figures, "
          f"{report[False][0]:.1f} s ({report[False][1]:.1f} s CPU) with, goal < 10 s")
    if profiler:
        profiler.dump_stats(args.profile)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
