"""LMLHD of the trained gmm-np models of a results folder (every row: ablations included) against
the number of test-time TRNG steps, on the same test tasks: does a row's rank depend on how long
its test contexts are fitted? (np-paper card, "The paper's claims".)

    python benchmarks/gmm_np/fit_budget.py RESULTS [--steps 20 200] [--contexts 1 4 16]
        [--tasks 64] [--dataset sinusoid]

Prints, per row and context size, the median over tasks of the LMLHD of all targets for each
step budget (test tasks of the run's seed, batched with ``prepare``).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from zoo.plugins import registry
from zoo.runner.cell import DatasetCache
from zoo.runner.train import load_run
from zoo.tasks.regression import Regression, sample_task


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path)
    p.add_argument("--dataset", default="sinusoid")
    p.add_argument("--steps", type=int, nargs="+", default=[20, 200])
    p.add_argument("--contexts", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--tasks", type=int, default=64)
    p.add_argument("--targets", type=int, default=64)
    a = p.parse_args()
    reg = registry()
    family = DatasetCache(None, "cpu", reg).get(a.dataset)
    task = Regression()
    print("| row | ctx | " + " | ".join(f"{s} steps" for s in a.steps) + " |")
    print("|---|---|" + "---|" * len(a.steps))
    for folder in sorted((a.results / "train").iterdir()):
        if not (folder / "model.pt").exists():
            continue
        config, blob = load_run(folder, "cpu")
        if config["method"] != "gmm-np" or config["train_dataset"] != a.dataset:
            continue
        h = config["hparams"]
        row = f"gmm-np {h['covariance']} K={h['components']} {h['update']}"
        method = reg.get("methods", "gmm-np")(x_dim=family.x_dim, y_dim=family.y_dim, **h)
        method.load_state_dict(blob["state_dict"])
        method.eval()
        for c in a.contexts:
            episodes = [sample_task(family, "test", config["seed"], a.targets, i, c)
                        for i in range(a.tasks)]
            medians = []
            for steps in a.steps:
                method.hparams["test_trng_steps"] = steps
                with torch.no_grad():
                    method.prepare(episodes)
                    medians.append(statistics.median(
                        task.score(method.predict(e), e)["lmlhd"] for e in episodes))
            print(f"| {row} | {c} | " + " | ".join(f"{m:.1f}" for m in medians) + " |")


if __name__ == "__main__":
    main()
