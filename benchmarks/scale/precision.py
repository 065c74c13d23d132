"""How much precision the GP algebra needs: the predictive of md-bfsc and dkt on the same episodes
with the algebra (:mod:`zoo.gp`, kernel matrices, inner loops) in float64, float32, and float32
with TF32 matrix products (on a GPU), against float64.

The algebra's dtype is the module constant ``DTYPE`` that every GP module imports; this script
rebinds it in every loaded module for the lower precisions (a measurement, not a setting the zoo
offers). Printed per method, way/shot, route and precision: the largest absolute difference of the
class probabilities from float64, the share of queries whose argmax changes, the jitter uses, and
the seconds per test episode.

    python benchmarks/scale/precision.py [--device cuda] [--episodes 4]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from zoo import build_method
from zoo.plugins import registry
from zoo.testing import toy_episode

PRECISIONS = ("float64", "float32", "tf32")


def set_precision(name: str) -> None:
    dtype = torch.float64 if name == "float64" else torch.float32
    for module in list(sys.modules.values()):
        if getattr(module, "DTYPE", None) in (torch.float64, torch.float32):
            module.DTYPE = dtype
    torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
    torch.backends.cudnn.allow_tf32 = name == "tf32"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--cells", default="5x1,5x5,20x5,50x20")
    args = p.parse_args()
    device = torch.device(args.device)
    precisions = PRECISIONS if device.type == "cuda" else PRECISIONS[:2]
    print(f"device {device}; max |p - p64|, argmax changes, jitter uses, seconds per episode")
    for method_name, kernel in (("md-bfsc", "cosine"), ("md-bfsc", "rbf"), ("dkt", "bncosine")):
        for spec in args.cells.split(","):
            way, shot = map(int, spec.split("x"))
            episodes = [toy_episode(way, shot, query=15, seed=i).to(device)
                        for i in range(args.episodes)]
            reference = None
            for precision in precisions:
                set_precision(precision)
                method = build_method(method_name, way=way, in_channels=1, image_size=28,
                                      backbone="conv4s", seed=0, kernel=kernel,
                                      registry=registry()).to(device).eval()
                probs, t = [], time.perf_counter()
                try:
                    with torch.no_grad():
                        probs = [method.predict(ep).probs.double() for ep in episodes]
                except Exception as exc:  # a lower precision may fail to factorise: report it
                    print(f"  {method_name:8} {kernel:8} {way:>2}x{shot:<2} {precision:8} "
                          f"failed: {type(exc).__name__}: {exc}")
                    continue
                if device.type == "cuda":
                    torch.cuda.synchronize()
                seconds = (time.perf_counter() - t) / len(episodes)
                probs_t = torch.stack(probs)
                if reference is None:
                    reference = probs_t
                err = (probs_t - reference).abs().max().item()
                flips = (probs_t.argmax(-1) != reference.argmax(-1)).double().mean().item()
                print(f"  {method_name:8} {kernel:8} {way:>2}x{shot:<2} {precision:8} "
                      f"{err:9.2e} {flips:6.1%} jitter {method.jitter.uses:3d} {seconds:8.3f} s",
                      flush=True)
            set_precision("float64")


if __name__ == "__main__":
    main()
