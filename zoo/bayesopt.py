"""Bayesian optimisation with meta-learned regression models as surrogates: GMM-NP's BO track
(Volpp et al. 2023, Sec. 5, Figs. 4, 7, 8), run as the ``np-bo`` suite (``zoo bench np-bo``).

For every function family (``forrester``, ``branin``, ``hartmann3``: :mod:`zoo.data.optimisation`)
and every regression method in ``surrogates`` (a method not registered is skipped with a warning):

1. meta-train the method on the family with the runner's own training (:func:`train_model`:
   ``train_tasks`` functions of ``train_targets`` points, validation-selected checkpoint), into
   ``<out>/models``, so a re-run reuses the models;
2. on each of ``tasks`` test functions of the family, run discrete Thompson sampling: the
   candidates are ``candidates`` uniform points of the unit cube (seeded per task), the first
   ``initial`` evaluations are random candidates, then each iteration asks the method for its
   prediction at every candidate given the evaluations so far (the evaluations are the context),
   takes one of its latent draws (one ``z``, bootstrap context or GP function, chosen by a
   generator seeded by task and iteration) and evaluates the candidate that minimises that
   draw's mean; observations carry the family's noise;
3. the simple regret after each evaluation: the smallest noise-free value evaluated so far minus
   the smallest over the candidates (the optimum of the discrete problem, so regret reaches 0).

``random`` (uniform random candidates) is the reference every surrogate should beat. Writes
``bo.json`` (per function and method: the regret curve of every task, their median and 25%/75%
percentiles) and ``regret.png``. The candidate set, initial points, noise and test functions are
identical for every method (paired comparison). Runs on the CPU (BO steps are tiny).

A suite entry rather than a script: ``zoo bench np-bo`` gives it the runner's results folder,
provenance, ``--set`` overrides and resumable, cached surrogate training, for every registered
regression method (plugins included) without a second CLI.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from zoo.io import atomic_write_json
from zoo.tasks.regression import RegressionEpisode, sample_task, task_seed

if TYPE_CHECKING:
    from zoo.plugins import Registry

log = logging.getLogger(__name__)

RANDOM = "random"


def train_surrogate(method: str, family: str, out: Path, settings: Mapping[str, Any],
                    data_dir: str | None, device: str, registry: Registry) -> torch.nn.Module:
    """``method`` meta-trained on ``family`` by the runner (resumed or loaded from ``out``), with
    the entries of ``settings["hparams"]`` that it declares."""
    from zoo.runner.cells import expand_cells
    from zoo.runner.suite import suite_from_dict
    from zoo.runner.train import train_model

    declared = registry.get("methods", method).all_hparams()
    suite = suite_from_dict("np-bo-training", {"suite": {
        "task": "regression", "methods": [method], "train_datasets": [family],
        "seeds": [int(settings["seed"])], "context_sizes": [0],
        "hparams": {k: v for k, v in settings["hparams"].items() if k in declared},
        **{k: settings[k] for k in ("train_episodes", "train_tasks", "train_targets",
                                     "train_max_context", "val_episodes", "val_every")}},
    }, "zoo.bayesopt", registry=registry)
    cell = expand_cells(suite, [method], registry)[0]
    dataset = registry.get("datasets", family)(data_dir=data_dir).to(device)
    trained = train_model(cell, out / family / method, dataset, device, registry)
    return trained.method


def thompson_regret(model: torch.nn.Module | None, family: Any, params: Mapping[str, float],
                    seed: int, iterations: int, candidates: int, initial: int) -> list[float]:
    """Simple regret after each of ``initial + iterations`` evaluations of one test function;
    ``model=None``: random search."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand((candidates, family.x_dim), generator=g)
    f = family.function(params)(x.double()).float()
    noise = family.noise * torch.randn(initial + iterations, generator=g)
    best = float(f.min())
    chosen: list[int] = torch.randperm(candidates, generator=g)[:initial].tolist()
    for t in range(iterations):
        if model is None:
            chosen.append(int(torch.randint(0, candidates, (), generator=g)))
            continue
        index = torch.tensor(chosen)
        context_y = (f[index] + noise[:len(chosen)])[:, None]
        episode = RegressionEpisode(x[index], context_y, x, f[:, None],
                                    info={"dataset": family.name, "split": "bo", "index": t,
                                          "seed": task_seed(seed, family.name, "bo", t, 0)})
        with torch.no_grad():
            mean = model.predict(episode).mean[..., 0]  # [S, candidates]
        draw = int(torch.randint(0, mean.shape[0], (), generator=g))
        chosen.append(int(mean[draw].argmin()))
    values = f[torch.tensor(chosen)]
    return (torch.cummin(values, 0).values - best).tolist()


def summarise(curves: list[list[float]]) -> dict[str, Any]:
    a = np.asarray(curves, dtype=np.float64)
    p25, median, p75 = np.percentile(a, [25, 50, 75], axis=0)
    return {"median": median.tolist(), "p25": p25.tolist(), "p75": p75.tolist(),
            "tasks": a.tolist()}


def run(out: Path, data_dir: str | None, device: str, settings: Mapping[str, Any]) -> dict:
    """The ``np-bo`` suite's entry: writes ``bo.json`` and ``regret.png`` into ``out``. An entry
    runs a whole experiment as the bench would, so it loads the process's plugin registry."""
    from zoo.plugins import registry as process_registry

    registry = process_registry()
    known = set(registry.names("methods"))
    results: dict[str, dict[str, Any]] = {}
    for name in settings["functions"]:
        family = registry.get("datasets", name)(data_dir=data_dir)
        tasks = [sample_task(family, "test", int(settings["seed"]), 1, i, 0).info["function"]
                 for i in range(int(settings["tasks"]))]
        results[name] = {}
        for method in [RANDOM, *settings["surrogates"]]:
            if method != RANDOM and method not in known:
                log.warning("np-bo: method %r is not registered; skipped", method)
                continue
            model = None if method == RANDOM else train_surrogate(
                method, name, out / "models", settings, data_dir, "cpu", registry)
            curves = [thompson_regret(model, family, params,
                                      task_seed(int(settings["seed"]), name, "bo", i, 0),
                                      int(settings["iterations"]), int(settings["candidates"]),
                                      int(settings["initial"]))
                      for i, params in enumerate(tasks)]
            results[name][method] = summarise(curves)
            log.info("np-bo %s %s: median final regret %.4g", name, method,
                     results[name][method]["median"][-1])
    payload = {"settings": dict(settings), "regret": results}
    atomic_write_json(Path(out) / "bo.json", payload)
    plot(payload, Path(out) / "regret.png")
    return payload


def plot(payload: Mapping[str, Any], path: Path) -> None:
    """Median simple regret (25%-75% band) against evaluations, one panel per function."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(payload["regret"])
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names):
        for method, s in payload["regret"][name].items():
            steps = np.arange(1, len(s["median"]) + 1)
            ax.plot(steps, np.maximum(s["median"], 1e-4), label=method,
                    linestyle="--" if method == RANDOM else "-")
            ax.fill_between(steps, np.maximum(s["p25"], 1e-4), np.maximum(s["p75"], 1e-4),
                            alpha=0.15)
        ax.set(yscale="log", title=name, xlabel="evaluations", ylabel="simple regret")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
