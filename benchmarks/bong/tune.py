"""Choose the prior variance (every rule), the learning rate (bog, blr, bbb) and, on a regression
stream, the observation noise variance of the online-quick (stream-regression-quick) rows on
validation streams only (Jones et al. 2024 tune on validation NLL; the paper's text does not say
how its regression noise was set).

Validation streams come from the data set's ``val`` split (digits-stream, diabetes-stream: the
stream pool less the examples with index 1 mod 5, scored on those; never the test examples). The
score is the plug-in NLPD after the stream (exact Gaussian NLPD on a regression stream), averaged
over ``--streams`` orderings. Prints one line per row with the chosen values, the lines that go
into the suite.

    nice -n 10 python benchmarks/bong/tune.py --dataset digits-stream --length 500
    nice -n 10 python benchmarks/bong/tune.py --dataset diabetes-stream --length 250 --streams 2

At one iteration BBB is BOG exactly (the KL's gradient vanishes at the predicted belief), so its
grid repeats BOG's numbers; BLR with ``alpha = 1`` is BONG exactly.
"""

from __future__ import annotations

import argparse
import itertools
import math

import torch
from zoo_bong.beliefs import BeliefError

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
#: The regression rows (stream-regression-quick): a one-hidden-layer MLP of 10 units, the network
#: of the paper's code configurations for its regression stream; ``online-blr`` is the core's exact
#: linear baseline, tuned on the same grids.
MLP = {"network": "mlp", "hidden": 10}
REGRESSION_ROWS = {
    "online-blr": {},
    "BONG-LIN-HESS-FC linear": {"rule": "bong", "curvature": "lin-hess", "family": "fc",
                                "network": "linear"},
    "BONG-LIN-HESS-FC": {"rule": "bong", "curvature": "lin-hess", "family": "fc", **MLP},
    "BONG-LIN-HESS-DLR-5": {"rule": "bong", "curvature": "lin-hess", "family": "dlr", "rank": 5,
                            **MLP},
    "BONG-LIN-HESS-DG": {"rule": "bong", "curvature": "lin-hess", "family": "dg", **MLP},
    "BONG-LIN-EF-FC": {"rule": "bong", "curvature": "lin-ef", "family": "fc", **MLP},
    "BONG-LIN-EF-DG": {"rule": "bong", "curvature": "lin-ef", "family": "dg", **MLP},
    "BONG-MC-EF-FC": {"rule": "bong", "curvature": "mc-ef", "family": "fc", **MLP},
    "BOG-LIN-HESS-FC": {"rule": "bog", "curvature": "lin-hess", "family": "fc", **MLP},
    "BLR-LIN-HESS-FC": {"rule": "blr", "curvature": "lin-hess", "family": "fc", **MLP},
}
PRIOR_VARS = (0.03, 0.1, 0.3)
ALPHAS = (0.01, 0.1, 0.5)
NOISE_VARS = (0.3, 0.5, 0.7, 1.0)


def validation_nlpd(hparams: dict, data, length: int, streams: int,
                    method: str = "bong") -> float:
    """Mean plug-in NLPD after ``length`` validation examples, ``inf`` if the rule diverged."""
    task = registry().get("tasks", "sequential")
    get = task.episodes(data, "val", {"stream_length": length, "eval_steps": [length]}, 0,
                        training=False)
    torch.manual_seed(0)  # the suite's cell seed draws the same initial network
    model = registry().get("methods", method)(dim=data.dim, classes=data.classes, **hparams)
    scores = []
    for i in range(streams):
        stream = get(i)
        try:
            scores.append(task.score(task.predict(model, stream), stream)["final_nlpd"])
        except BeliefError:
            return math.inf
    return sum(scores) / len(scores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="digits-stream")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--length", type=int, default=500)
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--rows", default=None, help="comma-separated row names (default: every "
                        "row of the data set's kind)")
    parser.add_argument("--samples", type=int, default=100, help="M of the mc-ef rows")
    parser.add_argument("--prior-vars", default=",".join(map(str, PRIOR_VARS)))
    parser.add_argument("--alphas", default=",".join(map(str, ALPHAS)),
                        help="learning rates of the bog, blr, bbb rows")
    parser.add_argument("--noise-vars", default=",".join(map(str, NOISE_VARS)),
                        help="observation noise variances (regression streams)")
    args = parser.parse_args()
    prior_vars = [float(v) for v in args.prior_vars.split(",")]
    alpha_grid = [float(v) for v in args.alphas.split(",")]
    data = load_dataset(args.dataset, data_dir=args.data_dir)
    table = REGRESSION_ROWS if data.classes == 0 else ROWS
    noise_vars = [float(v) for v in args.noise_vars.split(",")] if data.classes == 0 else [None]
    for name in args.rows.split(",") if args.rows else table:
        row = dict(table[name])
        method = "online-blr" if name == "online-blr" else "bong"
        if row.get("curvature", "").startswith("mc"):
            row["samples"] = args.samples
        alphas = alpha_grid if row.get("rule", "bong") != "bong" else (None,)
        results = {}
        for prior_var, alpha, noise in itertools.product(prior_vars, alphas, noise_vars):
            hp = {**row, "prior_var": prior_var, **({"alpha": alpha} if alpha else {}),
                  **({"noise_var": noise} if noise else {})}
            key = (prior_var, alpha, noise)
            results[key] = validation_nlpd(hp, data, args.length, args.streams, method)
            print(f"  {name} prior_var={prior_var} alpha={alpha} noise_var={noise}: val NLPD "
                  f"{results[key]:.4f}", flush=True)
        (prior_var, alpha, noise), best = min(results.items(), key=lambda kv: kv[1])
        print(f"{name}: prior_var = {prior_var}" + (f", alpha = {alpha}" if alpha else "")
              + (f", noise_var = {noise}" if noise else "") + f" (val NLPD {best:.4f})",
              flush=True)


if __name__ == "__main__":
    main()
