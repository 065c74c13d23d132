"""The ``md-convergence`` suite: inner- and outer-loop convergence, MD vs GD (paper Figs. 3 and 4).

``run(out_dir, data_dir, device, settings)`` writes ``convergence.json``::

    {"inner": {"md": {"1-shot": [...], "5-shot": [...]},     # ELBO per labelled point after
               "gd": {...}, "gd_moment": {...}},             #   t = 0..inner_iterations steps
     "inner_rho": {"md": ..., "gd": ..., "gd_moment": ...},  # the step size of those curves
     "inner_best": {"md": {"1-shot": {"rho": r, "elbo": [...]}, ...}, "gd": ..., "gd_moment": ...},
     "outer": {"md": {"1-shot": [...], "5-shot": [...]}, "gd": {...}},  # predictive loss per
                                                                        #   outer iteration
     "outer_val": {"md": {"1-shot": [{"iteration": i, "loss": l, "loss_ci": c,
                                      "accuracy": a, "accuracy_ci": c}, ...]}, ...},
     "outer_val_diff": {"1-shot": [{"iteration": i, "loss": d, "loss_ci": c,   # md - gd on the
                                    "accuracy": d, "accuracy_ci": c}, ...]},   #   same episodes
     "settings": {...}}

Inner: on fixed ``split`` (validation) episodes of ``glyphs`` with a fixed kernel (a seeded,
untrained backbone): each method's best step size is a choice, so it is made on validation
episodes, never on test ones,
the ELBO on all labelled points (as in the authors' experiment), averaged over ``episodes``, at the
paper's common step size 0.005 and at each method's best step size from a grid. ``gd`` is the
``gd-bfsc`` default (whitened coordinates); ``gd_moment`` is the paper's GD on ``(m, Sigma)``,
whose curve becomes ``null`` from the step where it diverges. Outer: 30 Adam steps from the same
initialisation on the same training episodes, predictive-likelihood loss with 2 inner steps
(rho 0.1 for 1-shot, 0.02 for 5-shot; ``outer_inner = "paper"``, Fig. 4's setting) or with each
method's own training inner loop (``outer_inner = "defaults"``: md 3 steps at rho 1, gd 3 at
0.02, what the suites train with); every ``val_every`` iterations the model's predictive loss
(NLL per query) and accuracy on ``val_episodes`` fixed validation episodes, with the method's
test-time inner loop, each with the 95% CI over episodes, and MD minus GD paired on the same
episodes. Also writes ``inner.png`` and ``outer.png``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomllib
import torch

from zoo import (
    EpisodeSampler,
    NumericalError,
    atomic_write_json,
    build_method,
    load_dataset,
    parse_spec,
    registry,
)
from zoo.metrics import mean_ci, paired_difference
from zoo_md_bfsc.method import MDBFSC

log = logging.getLogger(__name__)

#: The settings, from the suite file: one source for ``zoo bench md-convergence`` and ``main``.
DEFAULTS: dict[str, Any] = tomllib.loads(
    (Path(__file__).with_name("md-convergence.toml")).read_text())["settings"]
VARIANTS = {"md": ("md-bfsc", {}), "gd": ("gd-bfsc", {}),
            "gd_moment": ("gd-bfsc", {"gd_parameterisation": "moment"})}
OUTER_INNER = ("paper", "defaults")


def _inner_curve(method: MDBFSC, episodes: list, rho: float, steps: int) -> list[float | None]:
    """Mean ELBO per labelled point over episodes; ``None`` from a divergence on."""
    curves = []
    for ep in episodes:
        with torch.no_grad():
            K, both_y = method.labelled_kernel(ep)
            try:
                elbo = method.run_inner(K, both_y, ep, steps=steps, rho=rho,
                                        samples=method.hparams["samples_test"], trace=True).elbo
            except NumericalError as exc:
                log.info("%s diverged at rho=%g: %s", method.name, rho, exc)
                elbo = _partial_trace(method, K, both_y, ep, rho, steps)
        curves.append([e / both_y.numel() if e is not None else None for e in elbo])
    return [None if any(c[t] is None or not math.isfinite(c[t]) for c in curves)
            else sum(c[t] for c in curves) / len(curves) for t in range(steps + 1)]


def _partial_trace(method: MDBFSC, K, labels, ep, rho: float, steps: int) -> list[float | None]:
    """The ELBO trace up to the last step that did not diverge, then ``None``."""
    for done in range(steps - 1, -1, -1):
        try:
            elbo = method.run_inner(K, labels, ep, steps=done, rho=rho,
                                    samples=method.hparams["samples_test"], trace=True).elbo
        except NumericalError:
            continue
        return elbo + [None] * (steps - done)
    return [None] * (steps + 1)


def _final(curve: list[float | None]) -> float:
    return curve[-1] if curve[-1] is not None else -math.inf


def run(out_dir: Path, data_dir: Any = None, device: str = "cpu",
        settings: Mapping[str, Any] | None = None) -> None:
    """Run both studies and write ``convergence.json``, ``inner.png`` and ``outer.png``."""
    cfg = {**DEFAULTS, **(settings or {})}
    if cfg["outer_inner"] not in OUTER_INNER:
        raise ValueError(f"outer_inner = {cfg['outer_inner']!r}: choose one of {OUTER_INNER}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    name, options = parse_spec(cfg["dataset"])
    ds = load_dataset(name, data_dir=data_dir, **options)
    build = {"way": cfg["way"], "in_channels": ds.in_channels, "image_size": ds.image_size,
             "seed": cfg["seed"], "registry": registry()}  # an entry: the process's plugins
    result: dict[str, Any] = {"inner": {v: {} for v in VARIANTS}, "inner_best": {v: {} for v in VARIANTS},
                              "inner_rho": dict.fromkeys(VARIANTS, cfg["common_rho"]),
                              "outer": {"md": {}, "gd": {}}, "outer_val": {"md": {}, "gd": {}},
                              "outer_val_diff": {}, "settings": cfg}
    for shot in cfg["shots"]:
        key = f"{shot}-shot"
        if cfg["split"] == "test":
            raise ValueError("md-convergence chooses step sizes on these episodes: use "
                             "split = 'val', never the test split")
        sampler = EpisodeSampler(ds, cfg["split"], cfg["way"], shot, cfg["query"], seed=cfg["seed"])
        episodes = [sampler[i].to(device) for i in range(cfg["episodes"])]
        for variant, (name, extra) in VARIANTS.items():
            method = build_method(name, **build, **extra).to(device).eval()
            steps = cfg["inner_iterations"]
            result["inner"][variant][key] = _inner_curve(method, episodes, cfg["common_rho"], steps)
            grid = cfg[f"{variant}_rhos"]
            curves = {rho: _inner_curve(method, episodes, rho, steps) for rho in grid}
            best = max(curves, key=lambda r: _final(curves[r]))
            result["inner_best"][variant][key] = {"rho": best, "elbo": curves[best],
                                                  "final_by_rho": {str(r): _final(c)
                                                                   for r, c in curves.items()}}
            log.info("inner %s %s: best rho %g", variant, key, best)
        scores = {}
        for variant in ("md", "gd"):
            result["outer"][variant][key], scores[variant] = _outer_curve(
                variant, ds, shot, cfg, build, device)
            result["outer_val"][variant][key] = [_summary(i, s) for i, s in scores[variant]]
        result["outer_val_diff"][key] = [
            _difference(i, md, gd) for (i, md), (_, gd) in zip(scores["md"], scores["gd"])]
    atomic_write_json(out_dir / "convergence.json", result)
    _plot(result, out_dir)


Scores = tuple[list[float], list[float]]
"""Per validation episode: predictive NLL per query, accuracy."""


def _validation(method: MDBFSC, episodes: list) -> Scores:
    """Predictive NLL per query and accuracy on each of fixed validation episodes."""
    was_training = method.training
    method.eval()
    nll, accuracy = [], []
    with torch.no_grad():
        for ep in episodes:
            probs = method.predict(ep).probs.double()
            rows = torch.arange(len(ep.query_y))
            nll.append(-float(probs[rows, ep.query_y].clamp_min(1e-12).log().mean()))
            accuracy.append(float((probs.argmax(1) == ep.query_y).double().mean()))
    method.train(was_training)
    return nll, accuracy


def _summary(iteration: int, scores: Scores) -> dict[str, float]:
    """Mean NLL and accuracy over the validation episodes with their 95% CI half-widths."""
    (loss, loss_ci), (accuracy, accuracy_ci) = mean_ci(scores[0]), mean_ci(scores[1])
    return {"iteration": iteration, "loss": loss, "loss_ci": loss_ci,
            "accuracy": accuracy, "accuracy_ci": accuracy_ci}


def _difference(iteration: int, a: Scores, b: Scores) -> dict[str, float]:
    """``a - b`` in NLL and accuracy, paired on the same validation episodes, with 95% CIs."""
    (loss, loss_ci), (accuracy, accuracy_ci) = (paired_difference(a[0], b[0]),
                                                 paired_difference(a[1], b[1]))
    return {"iteration": iteration, "loss": loss, "loss_ci": loss_ci,
            "accuracy": accuracy, "accuracy_ci": accuracy_ci}


def _outer_curve(variant: str, ds, shot: int, cfg: Mapping[str, Any], build: dict,
                 device: str) -> tuple[list[float | None], list[tuple[int, Scores]]]:
    inner = {} if cfg["outer_inner"] == "defaults" else {
        "steps_train": cfg["outer_inner_steps"], "rho_train": float(cfg["outer_rho"][str(shot)])}
    method = build_method(VARIANTS[variant][0], **build, loss="predictive", lr=cfg["lr"],
                          **inner).to(device).train()
    optimizer = torch.optim.Adam(method.param_groups())
    sampler = EpisodeSampler(ds, "train", cfg["way"], shot, cfg["query"], seed=cfg["seed"])
    val_sampler = EpisodeSampler(ds, "val", cfg["way"], shot, cfg["query"], seed=cfg["seed"])
    val_episodes = [val_sampler[i].to(device) for i in range(cfg["val_episodes"])]
    losses: list[float | None] = []
    curve: list[tuple[int, Scores]] = []

    def validate(i: int) -> None:
        scores = _validation(method, val_episodes)
        curve.append((i, scores))
        summary = _summary(i, scores)
        log.info("outer %s %d-shot, iteration %d: validation loss %.4f +- %.4f, accuracy "
                 "%.3f +- %.3f", variant, shot, i, summary["loss"], summary["loss_ci"],
                 summary["accuracy"], summary["accuracy_ci"])

    for i in range(cfg["outer_iterations"]):
        if cfg["val_every"] and i % cfg["val_every"] == 0:
            validate(i)
        optimizer.zero_grad()
        try:
            loss = method.meta_loss(sampler[i].to(device))
        except NumericalError as exc:
            log.info("outer %s diverged: %s", variant, exc)
            losses.append(None)
            continue
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    if cfg["val_every"]:
        validate(cfg["outer_iterations"])
    return losses, curve


def _plot(result: Mapping[str, Any], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shots = list(result["inner"]["md"])
    colours = {"md": "C0", "gd": "C1", "gd_moment": "C2"}
    fig, axes = plt.subplots(1, len(shots), figsize=(5 * len(shots), 3.6), squeeze=False)
    for ax, key in zip(axes[0], shots):
        for v, c in colours.items():
            rho = result["inner_rho"][v]
            ax.plot(_nan(result["inner"][v][key]), color=c, label=f"{v} rho={rho:g}")
            best = result["inner_best"][v][key]
            ax.plot(_nan(best["elbo"]), color=c, ls="--", label=f"{v} best rho={best['rho']:g}")
        ax.set(title=f"inner loop, {key}", xlabel="iteration", ylabel="ELBO per point")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "inner.png", dpi=120)
    plt.close(fig)
    fig, axes = plt.subplots(1, len(shots), figsize=(5 * len(shots), 3.6), squeeze=False)
    for ax, key in zip(axes[0], shots):
        for v in ("md", "gd"):
            ax.plot(_nan(result["outer"][v][key]), color=colours[v], label=v)
        ax.set(title=f"outer loop, {key}", xlabel="iteration", ylabel="predictive loss")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "outer.png", dpi=120)
    plt.close(fig)


def _nan(values: list[float | None]) -> list[float]:
    return [math.nan if v is None else v for v in values]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m zoo_md_bfsc.convergence", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                   help="override a setting, e.g. --set episodes=1 --set 'shots=[1]'")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    overrides = {}
    for item in args.set:
        k, _, v = item.partition("=")
        overrides[k] = json.loads(v)
    run(args.out, args.data_dir, args.device, overrides)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
