"""Choose the prior variance (every rule) and the learning rate (bog, blr, bbb) of the online-quick
rows on validation streams only (Jones et al. 2024 tune both on validation NLL, notes §3.1).

Validation streams come from the data set's ``val`` split (digits-stream: the stream pool less
the examples with index 1 mod 5, scored on those; never the test examples). The score is the
plug-in NLPD after the stream, averaged over ``--streams`` orderings. Prints one line per row with
the chosen values, the lines that go into zoo/suites/online-quick.toml.

    nice -n 10 python benchmarks/bong/tune.py --dataset digits-stream --length 500

At one iteration BBB is BOG exactly (the KL's gradient vanishes at the predicted belief), so its
grid repeats BOG's numbers; BLR with ``alpha = 1`` is BONG exactly.
"""

from __future__ import annotations

import argparse
import itertools
import math

import torch
from zoo_bong.beliefs import BeliefError
from zoo_bong.method import Bong

from zoo.metrics import nll
from zoo.plugins import load_dataset, registry

ROWS = {
    "BONG-LIN-HESS-DLR-10": {"rule": "bong", "curvature": "lin-hess", "family": "dlr", "rank": 10},
    "BONG-LIN-HESS-DLR-1": {"rule": "bong", "curvature": "lin-hess", "family": "dlr", "rank": 1},
    "BONG-LIN-HESS-DG": {"rule": "bong", "curvature": "lin-hess", "family": "dg"},
    "BONG-LIN-HESS-DG vd-ekf": {"rule": "bong", "curvature": "lin-hess", "family": "dg",
                                "dg_mean": "vd-ekf"},
    "BONG-LIN-HESS-DG-MOM": {"rule": "bong", "curvature": "lin-hess", "family": "dg-mom"},
    "BONG-LIN-EF-DLR-10": {"rule": "bong", "curvature": "lin-ef", "family": "dlr", "rank": 10},
    "BONG-LIN-EF-DG": {"rule": "bong", "curvature": "lin-ef", "family": "dg"},
    "BONG-MC-EF-DLR-10": {"rule": "bong", "curvature": "mc-ef", "family": "dlr", "rank": 10},
    "BOG-LIN-HESS-DLR-10": {"rule": "bog", "curvature": "lin-hess", "family": "dlr", "rank": 10},
    "BLR-LIN-HESS-DLR-10": {"rule": "blr", "curvature": "lin-hess", "family": "dlr", "rank": 10},
    "BBB-LIN-HESS-DLR-10": {"rule": "bbb", "curvature": "lin-hess", "family": "dlr", "rank": 10},
}
PRIOR_VARS = (0.03, 0.1, 0.3)
ALPHAS = (0.01, 0.1, 0.5)


def validation_nlpd(hparams: dict, data, length: int, streams: int) -> float:
    """Mean plug-in NLPD after ``length`` validation examples, ``inf`` if the rule diverged."""
    task = registry().get("tasks", "sequential")
    get = task.episodes(data, "val", {"stream_length": length, "eval_steps": [length]}, 0,
                        training=False)
    torch.manual_seed(0)  # the suite's cell seed draws the same initial network
    method = Bong(dim=data.dim, classes=data.classes, **hparams)
    scores = []
    for i in range(streams):
        stream = get(i)
        try:
            probs = task.predict(method, stream).probs[-1]
        except BeliefError:
            return math.inf
        scores.append(nll(probs.double(), stream.held_y))
    return sum(scores) / len(scores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="digits-stream")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--length", type=int, default=500)
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--samples", type=int, default=100, help="M of the mc-ef rows")
    parser.add_argument("--prior-vars", default=",".join(map(str, PRIOR_VARS)))
    parser.add_argument("--alphas", default=",".join(map(str, ALPHAS)),
                        help="learning rates of the bog, blr, bbb rows")
    args = parser.parse_args()
    prior_vars = [float(v) for v in args.prior_vars.split(",")]
    alpha_grid = [float(v) for v in args.alphas.split(",")]
    data = load_dataset(args.dataset, data_dir=args.data_dir)
    for name in args.rows.split(","):
        row = dict(ROWS[name])
        if row["curvature"].startswith("mc"):
            row["samples"] = args.samples
        alphas = alpha_grid if row["rule"] != "bong" else (None,)
        results = {}
        for prior_var, alpha in itertools.product(prior_vars, alphas):
            hp = {**row, "prior_var": prior_var, **({"alpha": alpha} if alpha else {})}
            results[(prior_var, alpha)] = validation_nlpd(hp, data, args.length, args.streams)
            print(f"  {name} prior_var={prior_var} alpha={alpha}: val NLPD "
                  f"{results[(prior_var, alpha)]:.4f}", flush=True)
        (prior_var, alpha), best = min(results.items(), key=lambda kv: kv[1])
        print(f"{name}: prior_var = {prior_var}" + (f", alpha = {alpha}" if alpha else "")
              + f" (val NLPD {best:.4f})", flush=True)


if __name__ == "__main__":
    main()
