"""Where an OVE test episode's time goes: cProfile over one ``predict`` (CPU time, one thread),
split into the Gibbs sweeps and Polya-Gamma draws, the conditioning of the query functions (on
each chain's ``w``: ``WeightPosterior.predictive`` or the pair-space ``joint_predictive``; on the
Gibbs states: ``state_predictive``), the quadrature (``estimator.expect``) and the kernel
matrices; the method and episode are those of ``gp_scale.py`` (conv4s, cosine kernel, random
28x28 images, 15 queries per class), after one warm-up ``predict`` of the same episode.

    python benchmarks/scale/ove_profile.py 5x20,20x5,50x1 [predictive=samples ...]

Cells are ``WAYxSHOT``; further arguments are hyper-parameters of ``ove``.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from gp_scale import build  # noqa: E402

from zoo.testing import toy_episode  # noqa: E402

PARTS = {"Gibbs": ("gibbs",), "sweeps": ("_sweep",), "PG draws": ("sample_polyagamma",),
         "conditioning": ("predictive", "joint_predictive", "state_predictive"),
         "quadrature": ("expect",), "kernel": ("kernel_matrices",)}


def cumulative(stats: pstats.Stats, names: tuple[str, ...]) -> float:
    """Cumulative seconds of the functions named ``names`` in the zoo's code (outermost calls:
    ``expect`` calls nested in another ``expect`` are not counted twice)."""
    total = 0.0
    for (file, _, name), (_, _, _, cum, callers) in stats.stats.items():
        if name in names and ("zoo" in file) and not any(c[2] in names for c in callers):
            total += cum
    return total


def main() -> None:
    torch.set_num_threads(1)
    cells = [tuple(map(int, c.split("x"))) for c in sys.argv[1].split(",")]
    hparams = dict(kv.split("=", 1) for kv in sys.argv[2:])
    print(f"ove {hparams or 'defaults'}; CPU seconds of one test episode")
    print("| cell | total | " + " | ".join(PARTS) + " |")
    print("|---|" + "---:|" * (len(PARTS) + 1))
    for way, shot in cells:
        episode = toy_episode(way, shot, query=15)
        method = build("ove", way, "cosine", "auto", torch.device("cpu"), **hparams).eval()
        with torch.no_grad():
            method.predict(episode)  # warm-up: lazy imports, allocator
            profile = cProfile.Profile(timer=time.process_time)
            start = time.process_time()
            profile.enable()
            method.predict(episode)
            profile.disable()
            total = time.process_time() - start
        stats = pstats.Stats(profile)
        parts = " | ".join(f"{cumulative(stats, names):.2f}" for names in PARTS.values())
        print(f"| {way}w{shot}s | {total:.2f} | {parts} |", flush=True)


if __name__ == "__main__":
    main()
