"""Training-step time and page faults with glibc's default malloc against the runner's setting
(``GLIBC_TUNABLES`` = :data:`zoo.runner.malloc.RETAIN`), side by side in one run.

Each measurement is a fresh child process (glibc reads the setting when a process starts), one
thread, a method's training step (meta_loss + backward + Adam) on a fixed glyphs episode, 5-way,
80 images; the children alternate between the two settings, ``--rounds`` times. Prints the median
CPU time per step, minor page faults per step, and the ratio default / retain per method.

    .venv/bin/python benchmarks/allocator.py [--methods protonet,md-bfsc] [--shot 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from zoo.runner.malloc import RETAIN, VARIABLE

CHILD = r"""
import json, resource, sys, time
import torch
from zoo.runner.malloc import malloc_setting
setting = malloc_setting()
torch.set_num_threads(1)
from zoo import EpisodeSampler, build_method
from zoo.plugins import load_dataset
name, shot, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
episode = EpisodeSampler(load_dataset("glyphs"), "train", 5, shot, 16 - shot, seed=0)[0]
method = build_method(name, way=5, in_channels=1, image_size=28, seed=0, backbone="conv4s").train()
opt = torch.optim.Adam(method.param_groups())
def step():
    opt.zero_grad()
    method.meta_loss(episode).backward()
    opt.step()
for _ in range(3):
    step()
times, faults = [], []
for _ in range(steps):
    f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
    step()
    times.append(time.process_time() - t0)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
print(json.dumps({"setting": setting, "times": times, "faults": faults}))
"""


SETTINGS = {"default": None, "retain": RETAIN}


def measure(method: str, shot: int, steps: int, setting: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    if SETTINGS[setting]:
        env[VARIABLE] = SETTINGS[setting]
    out = subprocess.run([sys.executable, "-c", CHILD, method, str(shot), str(steps)], env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default="protonet,md-bfsc")
    p.add_argument("--shot", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()
    methods = args.methods.split(",")
    runs: dict[tuple[str, str], dict[str, list[float]]] = {}
    for _ in range(args.rounds):
        for method in methods:
            for setting in ("default", "retain"):
                r = measure(method, args.shot, args.steps, setting)
                acc = runs.setdefault((method, setting), {"times": [], "faults": []})
                acc["times"] += r["times"]
                acc["faults"] += r["faults"]
    print(f"5-way {args.shot}-shot training step, conv4s, one thread; median over "
          f"{args.rounds} x {args.steps} steps (CPU time)")
    print(f"  {'method':<10} {'default ms':>11} {'faults':>7} {'retain ms':>10} {'faults':>7} "
          f"{'default/retain':>15}")
    medians = {}
    for method in methods:
        d, r = runs[(method, "default")], runs[(method, "retain")]
        td, tr = statistics.median(d["times"]), statistics.median(r["times"])
        medians[method] = (td, tr)
        print(f"  {method:<10} {td * 1e3:>11.1f} {statistics.median(d['faults']):>7.0f} "
              f"{tr * 1e3:>10.1f} {statistics.median(r['faults']):>7.0f} {td / tr:>15.2f}")
    if len(methods) == 2:
        (a, b) = methods
        print(f"  {b} / {a}: default {medians[b][0] / medians[a][0]:.2f}x, "
              f"retain {medians[b][1] / medians[a][1]:.2f}x")


if __name__ == "__main__":
    main()
