"""Validation accuracy, NLL and ECE (raw and after the fitted temperature) of every trained model
of a results folder, and its seconds per training step, from what training saved: no episode is
drawn again and no test episode is read.

    python benchmarks/selection/validation_metrics.py RESULTS_DIR

The log-probabilities are those of the selected checkpoint on the suite's validation episodes
(``train/<hash>/best.pt``). A suite with ``val_every = train_episodes`` validates once, at the end:
nothing is chosen on those episodes, so they score the final model without selection bias (with
several validations they score the chosen checkpoint, optimistically). The calibrated ECE uses the
temperature fitted on these same episodes (in-sample: a lower bound of what temperature scaling
gives). Seconds per step exclude validation (``val_seconds``, recorded by the runner).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zoo.io import load_checkpoint
from zoo.metrics import apply_temperature, ece_mce, nll
from zoo.plugins import registry
from zoo.runner.cells import Cell, row_name
from zoo.runner.storage import Results


def metrics(folder: Path) -> dict[str, float]:
    """Validation numbers of the model trained in ``folder`` (a ``train/<hash>`` folder)."""
    best = load_checkpoint(folder / "best.pt")
    model = load_checkpoint(folder / "model.pt")
    probs, y = best["val_logp"].double().exp(), best["val_y"].long()
    calibrated = apply_temperature(probs, model["temperature"])
    info = model["info"]
    out = {"val_accuracy": float((probs.argmax(1) == y).double().mean()), "nll": nll(probs, y),
           "nll_calibrated": nll(calibrated, y), "temperature": model["temperature"],
           "mean_confidence": float(probs.max(1).values.mean())}
    for key, p in (("ece", probs), ("ece_calibrated", calibrated)):
        conf, pred = p.max(1)
        out[key] = ece_mce(conf.numpy(), (pred == y).double().numpy())[0]
    steps, val_seconds = info.get("training_steps"), info.get("val_seconds")
    out["seconds_per_step"] = ((info["train_seconds"] - val_seconds) / steps
                               if steps and val_seconds is not None else float("nan"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path)
    args = parser.parse_args(argv)
    results = Results(args.results)
    reg = registry()
    seen: set[str] = set()
    sys.stdout.write("| model | shot | val acc % | NLL (cal.) | ECE % raw / cal. | mean conf. % "
                     "| T | s/step |\n|---|---|---|---|---|---|---|---|\n")
    rows = []
    for r in results.results():
        cell = Cell.from_config(r["config"], reg.get("tasks", r.get("task", "classification")))
        if cell.train_hash in seen:
            continue
        seen.add(cell.train_hash)
        m = metrics(results.train_dir(cell.train_hash))
        rows.append((row_name(r["method"], r.get("variant", "")), r.get("train_shot", r["shot"]), m))
    for name, shot, m in sorted(rows, key=lambda row: (row[0].split()[0], row[1], row[0])):
        sys.stdout.write(
            f"| {name} | {shot} | {100 * m['val_accuracy']:.1f} | {m['nll']:.3f} "
            f"({m['nll_calibrated']:.3f}) | {100 * m['ece']:.1f} / {100 * m['ece_calibrated']:.1f} "
            f"| {100 * m['mean_confidence']:.1f} | {m['temperature']:.3g} "
            f"| {m['seconds_per_step']:.2f} |\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
