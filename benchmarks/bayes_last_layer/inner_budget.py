"""bayes-last-layer's test-time inner budget on validation episodes: a trained cell's model (its
``model.pt``, from ``zoo bench quick --methods bayes-last-layer``) fits the head's belief on each
validation episode's support with ``steps_test`` = each of ``--budgets`` and scores its queries.

Printed per budget: the ELBO per support point at the last step (how far the inner VI is from its
optimum; the longest budget's value is the reference), query accuracy, NLL and ECE (15 bins) of
the raw predictive, means over the episodes with the NLL's 95% CI, and the mean difference in NLL
from the default budget paired over the episodes. Validation episodes only (split ``val``, an
episode seed other than the run's, whose validation episodes chose its checkpoint), never the
test split.

    python benchmarks/bayes_last_layer/inner_budget.py RESULTS/CELL --budgets 10 50 200 800 \\
        --episodes 30
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch

from zoo.metrics import ece_mce, mean_ci, paired_difference, query_nll
from zoo.plugins import registry
from zoo.runner.cell import DatasetCache
from zoo.runner.cells import Cell
from zoo.runner.train import build_for_cell, load_run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cell", type=Path, help="a finished bayes-last-layer cell or training folder, "
                   "or a training folder's best.pt")
    p.add_argument("--budgets", type=int, nargs="+", default=[10, 50, 200, 800])
    p.add_argument("--episodes", type=int, default=30)
    p.add_argument("--seed", type=int, default=1, help="validation episode seed (not the run's)")
    p.add_argument("--dataset", default="glyphs")
    args = p.parse_args()
    torch.set_num_threads(1)
    reg = registry()
    if args.cell.name == "best.pt":  # a training folder's best checkpoint so far
        config = json.loads((args.cell.parent / "config.json").read_text())
        blob = {"state_dict": torch.load(args.cell, map_location="cpu", weights_only=False)["model"]}
    else:
        config, blob = load_run(args.cell, "cpu")
    if args.seed == config["seed"]:
        raise SystemExit(f"--seed {args.seed} is the run's: its validation episodes chose the "
                         "checkpoint; pass another")
    task = reg.get("tasks", "classification")
    cell = Cell.from_config({**config, "shot": config["train_shot"], "query": 15}, task,
                            dataset=args.dataset, test_episodes=args.episodes)
    data = DatasetCache(None, "cpu", reg)
    method = build_for_cell(cell, data.get(config["train_dataset"]), "cpu", reg)
    method.load_state_dict(blob["state_dict"])
    method.eval()
    test = data.get(args.dataset)
    get = task.episodes(test, "val", cell.shape, args.seed, training=False)
    episodes = [get(i) for i in range(args.episodes)]
    default = method.hparams["steps_test"]
    print(f"{config['method']} {config['train_shot']}-shot, {len(episodes)} {args.dataset} "
          f"validation episodes (seed {args.seed}); default steps_test {default}")
    rows = {}
    for budget in sorted(set(args.budgets) | {default}):
        method.hparams["steps_test"] = budget
        elbo, acc, nll, conf, correct = [], [], [], [], []
        for ep in episodes:
            with torch.no_grad():
                pred = method.predict(ep)
            probs = pred.probs.double()
            elbo.append(pred.extras["inner_objective"][-1] if budget else math.nan)
            hit = (probs.argmax(-1) == ep.query_y).double()
            acc.append(float(hit.mean()))
            nll.append(float(query_nll(probs, ep.query_y).mean()))
            conf += probs.max(-1).values.tolist()
            correct += hit.tolist()
        rows[budget] = nll
        m, ci = mean_ci(nll)
        ece = ece_mce(conf, correct)[0]
        print(f"steps_test {budget:5d}: ELBO/point {np.mean(elbo):8.3f}  accuracy "
              f"{np.mean(acc):.4f}  NLL {m:.4f} +- {ci:.4f}  ECE {ece:.4f}", flush=True)
    for budget, nll in rows.items():
        if budget != default:
            d, ci = paired_difference(nll, rows[default])
            print(f"NLL(steps_test {budget}) - NLL(steps_test {default}): {d:+.4f} +- {ci:.4f}")


if __name__ == "__main__":
    main()
