"""Seconds and peak memory per test episode and per training step of the GP methods at large way
x shot, side by side with ProtoNet.

For way in {5, 20, 50} x shot in {1, 5, 20} (15 queries per class in training and test, random
28x28 images: the cost depends only on the sizes), every method on the same Conv4S backbone and
the same episode: a test episode is ``predict`` under ``no_grad``, a training step is ``meta_loss``
+ backward + an Adam step. Methods of one cell are interleaved, ``--repeat`` rounds, and the
fastest round is reported with its ratio to ProtoNet's (``--stat min``, the default: on a machine
shared with other work the least disturbed estimate of the cost; ``--stat median`` is the other
choice; the JSON has both). On the CPU the clock is the process's CPU time (``--clock cpu``, the
default there; with one thread it is the call's own cost, which other processes on the same
cores inflate in wall time only), on a GPU the synchronised wall time. The calls run under the
runner's malloc setting (:data:`zoo.runner.malloc.RETAIN`, as every cell does: the script runs
itself again with it; ``--malloc default`` without it, glibc's): with glibc's defaults a call's
page faults depend on what the methods before it left in the heap, so a ratio moves with the
order of the methods (card ``gp-scale.md``). Peak memory is, on the CPU, the growth of the peak
resident set during each method's first call in a child process per cell started with
:data:`zoo.runner.malloc.RETURN` (``/proc/self/clear_refs`` resets the peak; freed buffers go
back to the kernel, so the growth is the call's own), and ``max_memory_allocated`` on a GPU.
GP methods use the cosine kernel unless ``--kernel`` names another (``default``: each method's
own); ``--algebra`` overrides the route (default ``auto``, :mod:`zoo.gram`).

``--methods`` takes registered names or specs with test-time hyper-parameters,
``name[key=value,...]`` (:mod:`zoo.spec`), e.g. ``ove[predictive=samples]`` beside ``ove``: each
spec is one row.

``--max-pairs`` skips OVE cells whose training pair space (``M = N (C - 1)`` one-vs-each
differences) is larger (default: none skipped; with the cosine kernel OVE conditions on its
Polya-Gamma draws in the ``C D`` class weights, :mod:`zoo_ove.weights`, at any way).

Then the Nystrom study: md-bfsc with the RBF kernel at 50-way 20-shot, exact (dense route) against
``--inducing`` points, seconds and the largest error of the predictive probabilities.

    python benchmarks/scale/gp_scale.py [--repeat 3] [--ways 5,20,50] [--shots 1,5,20]
        [--device cuda] [--kernel cosine] [--methods ...] [--skip-nystrom] [--json out.json]
        [--stat min|median] [--clock wall|cpu] [--phases test,train] [--malloc retain|default]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from zoo import build_method
from zoo.plugins import registry
from zoo.runner.malloc import RETAIN, RETURN, VARIABLE, exec_with, malloc_setting
from zoo.spec import parse_spec
from zoo.testing import toy_episode

log = logging.getLogger("gp_scale")
METHODS = ("protonet", "md-bfsc", "dkt", "ove", "logistic-softmax")


class Peak:
    """Peak memory growth of one call: device bytes on a GPU, resident set on the CPU."""

    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self) -> Peak:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            Path("/proc/self/clear_refs").write_text("5")
            self.base = _status("VmRSS")
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.bytes = torch.cuda.max_memory_allocated() - self.base
        else:
            self.bytes = _status("VmHWM") - self.base


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


def timed(fn: Callable[[], object], device: torch.device, clock: str = "wall") -> float:
    """Seconds of one call: wall time (synchronised on a GPU), or the process's CPU time
    (``clock="cpu"``: with one thread, the call's own cost, whatever else shares the cores)."""
    now = time.process_time if clock == "cpu" else time.perf_counter
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = now()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return now() - t


def skip_reason(name: str, way: int, shot: int, query: int, max_pairs: int | None) -> str | None:
    if parse_spec(name, "method")[0] == "ove" and max_pairs is not None:
        pairs = way * (shot + query) * (way - 1)  # the training objective's pair space
        if pairs > max_pairs:
            return f"pair space M={pairs} > {max_pairs}"
    return None


def build(spec: str, way: int, kernel: str, algebra: str, device: torch.device, **hparams):
    """The method a spec names (``name`` or ``name[key=value,...]``), on this cell's sizes."""
    name, given = parse_spec(spec, "method")
    options = given if name == "protonet" else {"algebra": algebra, **hparams, **given}
    k = None if name == "protonet" or kernel == "default" else kernel
    return build_method(name, way=way, in_channels=1, image_size=28, backbone="conv4s", seed=0,
                        kernel=k, **options, registry=registry()).to(device)


def cell(way: int, shot: int, args, device: torch.device) -> dict:
    """One cell of the grid: every method's median seconds and peak bytes, test and train."""
    episode = toy_episode(way, shot, query=args.query).to(device)
    runs: dict[str, dict[str, Callable[[], object]]] = {}
    out: dict[str, dict] = {}
    for name in args.methods:
        reason = skip_reason(name, way, shot, args.query, args.max_pairs)
        if reason:
            out[name] = {"skipped": reason}
            continue
        method = build(name, way, args.kernel, args.algebra, device)
        opt = torch.optim.Adam(method.param_groups())

        def test(m=method) -> None:
            m.eval()
            with torch.no_grad():
                m.predict(episode)

        def train(m=method, o=opt) -> None:
            m.train()
            o.zero_grad()
            m.meta_loss(episode).backward()
            o.step()

        runs[name] = {"test": test, "train": train}
        out[name] = {f"{phase}_s": [] for phase in args.phases}
    if args.peaks:
        return {name: {phase: _peak(fns[phase], device) for phase in args.phases}
                for name, fns in runs.items()}
    peaks = child_peaks(way, shot) if device.type == "cpu" else None
    for phase in args.phases:
        for name, fns in runs.items():  # warm-up and, on a GPU, peak memory
            out[name][f"{phase}_peak_mb"] = (peaks[name][phase] if peaks is not None
                                            else _peak(fns[phase], device))
        for _ in range(args.repeat):
            for name, fns in runs.items():
                out[name][f"{phase}_s"].append(timed(fns[phase], device, args.clock))
    for name in runs:
        for phase in args.phases:
            times = out[name].pop(f"{phase}_s")
            out[name][f"{phase}_median_s"] = statistics.median(times)
            out[name][f"{phase}_min_s"] = min(times)
            out[name][f"{phase}_s"] = out[name][f"{phase}_{args.stat}_s"]
    return out


def _peak(fn: Callable[[], object], device: torch.device) -> float:
    """MB of peak memory growth of one call."""
    with Peak(device) as peak:
        fn()
    return peak.bytes / 2**20


def child_peaks(way: int, shot: int) -> dict[str, dict[str, float]]:
    """Each method's peak memory (MB) of its first call of each phase in this cell, measured by
    this script in a child process started with glibc's thresholds (:data:`RETURN`)."""
    out = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--peaks", f"{way},{shot}"],
                          env=dict(os.environ, **{VARIABLE: RETURN}), check=True,
                          capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def nystrom_study(args, device: torch.device) -> list[dict]:
    """md-bfsc, RBF kernel, 50-way 20-shot test episode: dense against Nystrom factors."""
    episode = toy_episode(50, 20, query=args.query).to(device)
    rows, exact = [], None
    for route, m in [("dense", None), *(("nystrom", m) for m in args.inducing)]:
        hp = {"inducing": m} if m else {}
        method = build("md-bfsc", 50, "rbf", route, device, **hp).eval()
        with torch.no_grad():
            seconds = timed(lambda: method.predict(episode), device, args.clock)  # noqa: B023
            mats = method.kernel_matrices(episode)
            probs, _ = method.query_probs(episode, steps=method.hparams["steps_test"],
                                          rho=method.hparams["rho_test"],
                                          samples=method.hparams["samples_test"])
        if exact is None:
            exact = probs
        rows.append({"route": route, "inducing": m, "seconds": seconds,
                     "max_abs_prob_error": float((probs - exact).abs().max()),
                     "rank": getattr(mats.Kss, "rank", None)})
        print(f"  {route:>8} {m or '':>5}  {seconds:8.2f} s  max |p - p_exact| = "
              f"{rows[-1]['max_abs_prob_error']:.2e}", flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--stat", choices=("min", "median"), default="min",
                   help="statistic of the rounds that is printed")
    p.add_argument("--clock", choices=("wall", "cpu"), default=None,
                   help="wall time, or the process's CPU time (default: cpu on the CPU, wall on "
                        "a GPU)")
    p.add_argument("--ways", default="5,20,50")
    p.add_argument("--shots", default="1,5,20")
    p.add_argument("--query", type=int, default=15)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--phases", default="test,train", help="test episode, training step, or both")
    p.add_argument("--kernel", default="cosine", help="GP kernel, or 'default' (each method's)")
    p.add_argument("--algebra", default="auto", help="GP algebra route (zoo.gram)")
    p.add_argument("--max-pairs", type=int, default=None, help="largest OVE pair space to run")
    p.add_argument("--inducing", default="64,256", help="Nystrom inducing points to compare")
    p.add_argument("--skip-nystrom", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path)
    p.add_argument("--malloc", choices=("retain", "default"), default="retain",
                   help="the runner's malloc setting (default) or glibc's own")
    p.add_argument("--peaks", default=None, metavar="WAY,SHOT",
                   help="print the peak memory of one cell's calls as JSON (the child's part)")
    args = p.parse_args()
    if not args.peaks:
        exec_with(RETAIN if args.malloc == "retain" else None)
    malloc = {RETAIN: "retain", "default": "default"}.get(malloc_setting(), malloc_setting())
    args.methods = re.split(r",(?![^\[]*\])", args.methods)  # commas outside [...]
    args.phases = args.phases.split(",")
    args.inducing = [int(m) for m in args.inducing.split(",")]
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    args.clock = args.clock or ("cpu" if device.type == "cpu" else "wall")
    if args.peaks:
        way, shot = map(int, args.peaks.split(","))
        print(json.dumps(cell(way, shot, args, device)))
        return
    print(f"device {device}, {args.threads} thread(s), {args.clock} clock, kernel {args.kernel}, algebra "
          f"{args.algebra}, {args.stat} of {args.repeat} interleaved rounds, {args.query} "
          f"queries/class, malloc {malloc}")
    print(f"{'way':>4} {'shot':>4} {'method':>24} {'test s':>8} {'x proto':>7} {'MB':>7} "
          f"{'train s':>8} {'x proto':>7} {'MB':>7}")
    results = []
    for way in map(int, args.ways.split(",")):
        for shot in map(int, args.shots.split(",")):
            res = cell(way, shot, args, device)
            proto = res.get("protonet", {})
            for name, r in res.items():
                results.append({"way": way, "shot": shot, "method": name, **r})
                if "skipped" in r:
                    print(f"{way:>4} {shot:>4} {name:>24}  skipped: {r['skipped']}")
                    continue
                cols = []
                for phase in ("test", "train"):
                    if phase not in args.phases:
                        cols.append(f"{'-':>8} {'-':>7} {'-':>7}")
                        continue
                    ratio = r[f"{phase}_s"] / proto[f"{phase}_s"] if proto else float("nan")
                    cols.append(f"{r[f'{phase}_s']:8.3f} {ratio:7.2f} "
                                f"{r[f'{phase}_peak_mb']:7.0f}")
                print(f"{way:>4} {shot:>4} {name:>24} {' '.join(cols)}", flush=True)
    nystrom = []
    if not args.skip_nystrom:
        print("md-bfsc, RBF kernel, 50-way 20-shot test episode: exact (dense) vs Nystrom")
        nystrom = nystrom_study(args, device)
    if args.json:
        args.json.write_text(json.dumps({"grid": results, "nystrom": nystrom, "malloc": malloc,
                                         "argv": sys.argv[1:]}, indent=1))


if __name__ == "__main__":
    main()
