"""A trained classifier's ECE under each temperature protocol, on the same test episodes, labelled:
the zoo's (a temperature fitted by NLL on validation episodes, held out) beside DKT's reference
protocol (a temperature fitted by NLL on episodes of the test split: other episodes of the test
classes than those scored, or, in-sample, the scored ones themselves).

    python benchmarks/gp_calibration/temperature_protocols.py CELL_FOLDER [--episodes 100]

``CELL_FOLDER`` is a cell (or training) folder of a classification run; its validation
temperature is the one the run fitted. The scored episodes are the test split's episodes of the
run's seed; the fitting episodes of the test-split protocol are drawn with the next seed (the
same classes, other images and class draws). Rows: raw, the run's validation temperature, the
test-split temperature on other episodes, the test-split temperature in-sample. MD-BFSC's own
protocol (two temperatures grid-searched on validation episodes to minimise the ECE) is not
reproduced: its code is the only description of it, and it is not reimplemented here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import Tensor

from zoo.metrics import calibrated_confidence, ece_mce, fit_temperature


def protocol_eces(probs: Tensor, y: Tensor, validation_temperature: float, fit_probs: Tensor,
                  fit_y: Tensor) -> dict[str, tuple[float, float]]:
    """``{protocol: (temperature, ECE)}`` on the scored queries ``probs [Q, C]``, ``y [Q]``: raw
    (``T = 1``), the validation temperature, a temperature fitted by NLL on ``fit_probs``,
    ``fit_y`` (other test-split queries), and one fitted on the scored queries themselves."""
    correct = (probs.argmax(1) == y).double().numpy()

    def ece(t: float) -> float:
        return ece_mce(calibrated_confidence(probs, t).numpy(), correct)[0]

    other = fit_temperature(fit_probs.clamp_min(1e-12).log(), fit_y, what="test-split episodes")
    own = fit_temperature(probs.clamp_min(1e-12).log(), y, what="the scored episodes")
    return {"raw": (1.0, ece(1.0)),
            "validation temperature (the zoo)": (validation_temperature, ece(validation_temperature)),
            "test-split temperature, other episodes (DKT's code)": (other, ece(other)),
            "test-split temperature, in-sample": (own, ece(own))}


def main(argv: list[str] | None = None) -> int:
    from zoo.plugins import registry
    from zoo.runner.cell import DatasetCache
    from zoo.runner.cells import Cell
    from zoo.runner.train import build_for_cell, load_run

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a cell or training folder of a classification run")
    parser.add_argument("--episodes", type=int, default=100, help="test episodes scored (and fitted)")
    parser.add_argument("--dataset", default=None, help="test data set (default: the training one)")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    reg = registry()
    config, blob = load_run(args.run, "cpu")
    task = reg.get("tasks", config.get("task", "classification"))
    dataset = args.dataset or config.get("dataset") or config["train_dataset"]
    cell = Cell.from_config({**config, "shot": config.get("shot", config["train_shot"]),
                             "query": config.get("query", 15)}, task, dataset=dataset,
                            test_episodes=args.episodes)
    data = DatasetCache(args.data_dir, "cpu", reg).get(dataset)
    method = build_for_cell(cell, data, "cpu", reg)
    method.load_state_dict(blob["state_dict"])
    method.eval()

    def predictions(seed: int) -> tuple[Tensor, Tensor]:
        get = task.episodes(data, "test", cell.shape, seed, training=False)
        episodes = [get(i) for i in range(args.episodes)]
        with torch.no_grad():
            probs = torch.cat([method.predict(e).probs.double() for e in episodes])
        return probs, torch.cat([e.query_y for e in episodes])

    probs, y = predictions(cell.seed)
    fit_probs, fit_y = predictions(cell.seed + 1)
    rows = protocol_eces(probs, y, float(blob["temperature"]), fit_probs, fit_y)
    sys.stdout.write(f"{config['method']} on {dataset}, {cell.shape}, {args.episodes} test "
                     f"episodes, accuracy {100 * float((probs.argmax(1) == y).double().mean()):.1f}%"
                     "\n| protocol | T | ECE % |\n|---|---:|---:|\n")
    for name, (t, ece) in rows.items():
        sys.stdout.write(f"| {name} | {t:.3f} | {100 * ece:.1f} |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
