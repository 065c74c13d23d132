"""A trained classifier's ECE under each temperature protocol, on the same test episodes, labelled:
the zoo's (a temperature fitted by NLL on validation episodes, held out) beside the papers'
reference protocols, each stated exactly:

- DKT's: one temperature fitted by NLL on episodes of the test split: other episodes of the test
  classes than those scored, or, in-sample, the scored ones themselves.
- MD-BFSC's (its reference code's calibration script): two temperatures grid-searched on
  validation episodes to minimise the ECE. ``T_lik`` divides the latent function before the
  link, ``p = E[link(f / T_lik)]`` under the method's latent Gaussian marginals; ``T_ece`` then
  tempers those probabilities, ``softmax(log p / T_ece)``. Both run over the same grid,
  ``0.05, 0.055, ..., 0.345`` and ``1, 1.005, ..., 1.995`` (260 values, 67,600 pairs); the
  pair with the smallest 15-bin ECE on the validation queries is kept (the first in grid order
  on ties) and the test queries are scored with it. Held out from the test split, but tuned on
  the metric it reports, with two parameters and no temperature between 0.35 and 1.

    python benchmarks/gp_calibration/temperature_protocols.py CELL_FOLDER [--episodes 100]

``CELL_FOLDER`` is a cell (or training) folder of a classification run; its validation
temperature is the one the run fitted. The scored episodes are the test split's episodes of the
run's seed; the fitting episodes of the test-split protocol are drawn with the next seed (the
same classes, other images and class draws); MD-BFSC's grid search uses the first ``--episodes``
validation episodes of the run's seed (those the run fitted its temperature on, when it
validated on as many). Rows: raw, the run's validation temperature, the test-split temperature
on other episodes, the test-split temperature in-sample, MD-BFSC's two temperatures. The last
needs the latent marginals: it is given for a method whose prediction goes through
``probabilities(mean, var)`` once per episode (the zoo's latent-Gaussian methods), not for one
that computes its probabilities otherwise (OVE's pairwise likelihood).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from zoo.metrics import N_BINS, calibrated_confidence, ece_mce, fit_temperature

MD_BFSC_GRID = tuple([0.05 + 0.005 * k for k in range(60)] + [1 + 0.005 * k for k in range(200)])
"""The temperatures MD-BFSC's calibration script searches, for each of its two temperatures."""

ProbsAt = Callable[[float], Tensor]
"""``T_lik -> E[link(f / T_lik)]`` of some queries, ``[Q, C]``."""


def ece_per_temperature(probs: Tensor, correct: Tensor, temperatures: Tensor) -> Tensor:
    """15-bin ECE (:func:`zoo.metrics.ece_mce`) of ``probs [Q, C]`` tempered by each of
    ``temperatures [G]`` at once, ``[G]``; ``correct [Q]``: whether the argmax is right."""
    log_p = probs.clamp_min(1e-12).log()
    log_p = log_p - log_p.max(-1, keepdim=True).values
    conf = (log_p[None] / temperatures[:, None, None]).exp().sum(-1).reciprocal()  # [G, Q]
    edges = torch.linspace(0, 1, N_BINS + 1, dtype=conf.dtype)
    idx = (torch.searchsorted(edges, conf, side="left") - 1).clamp(0, N_BINS - 1)
    rows = idx + N_BINS * torch.arange(len(temperatures))[:, None]
    size = len(temperatures) * N_BINS
    conf_sum = torch.bincount(rows.flatten(), conf.flatten(), size).view(-1, N_BINS)
    right = torch.bincount(rows.flatten(), correct.double().expand_as(conf).flatten(),
                           size).view(-1, N_BINS)
    return (conf_sum - right).abs().sum(-1) / len(correct)


def md_bfsc_temperatures(probs_at: ProbsAt, y: Tensor,
                         grid: Sequence[float] = MD_BFSC_GRID) -> tuple[float, float, float]:
    """MD-BFSC's grid search on validation queries (labels ``y``): ``(T_lik, T_ece, ECE)`` of the
    pair with the smallest ECE of ``softmax(log probs_at(T_lik) / T_ece)``, the first in grid
    order (``T_lik`` outer) on ties."""
    temperatures = torch.tensor(grid, dtype=torch.float64)
    best = (math.inf, math.nan, math.nan)
    for t_lik in grid:
        probs = probs_at(t_lik)
        eces = ece_per_temperature(probs, probs.argmax(1) == y, temperatures)
        j = int(torch.argmin(eces))
        if float(eces[j]) < best[0]:
            best = (float(eces[j]), t_lik, grid[j])
    return best[1], best[2], best[0]


def protocol_eces(probs: Tensor, y: Tensor, validation_temperature: float, fit_probs: Tensor,
                  fit_y: Tensor, md_bfsc: tuple[ProbsAt, ProbsAt, Tensor] | None = None,
                  grid: Sequence[float] = MD_BFSC_GRID) -> dict[str, tuple[tuple[float, ...], float]]:
    """``{protocol: (temperatures, ECE)}`` on the scored queries ``probs [Q, C]``, ``y [Q]``: raw
    (``T = 1``), the validation temperature, a temperature fitted by NLL on ``fit_probs``,
    ``fit_y`` (other test-split queries), one fitted on the scored queries themselves, and, with
    ``md_bfsc = (test probs_at, validation probs_at, validation labels)``, MD-BFSC's two
    temperatures searched over ``grid`` on the validation queries (``probs_at(1)`` must be
    ``probs``)."""
    correct = (probs.argmax(1) == y).double().numpy()

    def ece(t: float, p: Tensor = probs, right=correct) -> float:
        return ece_mce(calibrated_confidence(p, t).numpy(), right)[0]

    other = fit_temperature(fit_probs.clamp_min(1e-12).log(), fit_y, what="test-split episodes")
    own = fit_temperature(probs.clamp_min(1e-12).log(), y, what="the scored episodes")
    rows = {"raw": ((1.0,), ece(1.0)),
            "validation temperature (the zoo)": ((validation_temperature,),
                                                 ece(validation_temperature)),
            "test-split temperature, other episodes (DKT's code)": ((other,), ece(other)),
            "test-split temperature, in-sample": ((own,), ece(own))}
    if md_bfsc is not None:
        test_at, val_at, val_y = md_bfsc
        t_lik, t_ece, _ = md_bfsc_temperatures(val_at, val_y, grid)
        tempered = test_at(t_lik)
        right = (tempered.argmax(1) == y).double().numpy()
        rows["T_lik, T_ece grid-searched on validation by ECE (MD-BFSC's code)"] = (
            (t_lik, t_ece), ece(t_ece, tempered, right))
    return rows


def latent_probabilities(method: Any, episodes: Sequence[Any]) -> tuple[Tensor, ProbsAt | None]:
    """The method's probabilities of the queries of ``episodes`` (``[Q, C]``), and, where its
    :meth:`predict` calls ``probabilities(mean, var, ...)`` once per episode, ``T ->`` the same
    with the latent marginals divided by ``T`` (``mean / T``, ``var / T^2``: the draws ``f / T``),
    averaged over a mixture's posterior samples as its prediction is; ``None`` otherwise."""
    calls: list[tuple[Tensor, Tensor, dict[str, Any]]] = []
    original = method.probabilities

    def record(mean: Tensor, var: Tensor, **options: Any) -> Tensor:
        calls.append((mean, var, options))
        return original(mean, var, **options)

    method.probabilities = record
    try:
        with torch.no_grad():
            probs = torch.cat([method.predict(e).probs.double() for e in episodes])
    finally:
        del method.probabilities
    if len(calls) != len(episodes):
        return probs, None

    def at(t: float) -> Tensor:
        with torch.no_grad():
            out = [original(mean / t, var / t**2, **options) for mean, var, options in calls]
        return torch.cat([p.mean(0) if p.ndim == 3 else p for p in out]).double()

    if not torch.allclose(at(1.0), probs, atol=1e-5):
        return probs, None  # the prediction is not these calls' probabilities as they are
    return probs, at


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

    def episodes(split: str, seed: int) -> list[Any]:
        get = task.episodes(data, split, cell.shape, seed, training=False)
        return [get(i) for i in range(args.episodes)]

    scored = episodes("test", cell.seed)
    probs, test_at = latent_probabilities(method, scored)
    y = torch.cat([e.query_y for e in scored])
    others = episodes("test", cell.seed + 1)
    fit_probs, _ = latent_probabilities(method, others)
    fit_y = torch.cat([e.query_y for e in others])
    md_bfsc = None
    if test_at is not None:
        validation = episodes("val", cell.seed)
        _, val_at = latent_probabilities(method, validation)
        if val_at is not None:
            md_bfsc = (test_at, val_at, torch.cat([e.query_y for e in validation]))
    rows = protocol_eces(probs, y, float(blob["temperature"]), fit_probs, fit_y, md_bfsc)
    sys.stdout.write(f"{config['method']} on {dataset}, {cell.shape}, {args.episodes} test "
                     f"episodes, accuracy {100 * float((probs.argmax(1) == y).double().mean()):.1f}%"
                     "\n| protocol | T | ECE % |\n|---|---:|---:|\n")
    for name, (ts, ece) in rows.items():
        sys.stdout.write(f"| {name} | {' & '.join(f'{t:.3f}' for t in ts)} | {100 * ece:.1f} |\n")
    if md_bfsc is None:
        sys.stdout.write(f"MD-BFSC's two temperatures: not applicable to {config['method']} "
                         "(its prediction does not go through latent Gaussian marginals)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
