"""OVE's predictives side by side on validation episodes of a trained model: ``conditional`` (on
each chain's last Polya-Gamma draws ``w``) against ``samples`` (on the chains' Gibbs states of
``f``), and other test-time settings, paired on the same episodes (chosen on validation, never on
test).

    python benchmarks/gp_baselines/ove_predictive.py TRAIN_FOLDER [--episodes 100] [--seed 101]
        [--way W] [--shot S] [--variant predictive=conditional --variant predictive=samples ...]

``TRAIN_FOLDER`` is a training folder of ``ove`` (``RESULTS/train/<hash>``, from ``zoo bench``);
each ``--variant`` is comma-separated ``key=value`` test-time hyper-parameters
(``predictive``, ``keep``, ``chains``, ``test_steps``, ``quadrature``), the first the reference.
Per variant: accuracy, NLL, raw ECE (15 bins, pooled over the episodes' queries), NLL and ECE
after a temperature fitted on these episodes (in-sample), CPU seconds per episode (one thread);
and each variant's paired difference to the reference over episodes (mean and 95% CI half-width;
for ECE, a paired bootstrap over episodes). The episodes are the validation split's, ``--way`` x
``--shot`` (default: the trained ``way`` x ``train_shot``) with 15 queries per class, drawn with
``--seed`` (not the seed training validated on). Another way or shot needs no other model: the
GP classifier has no per-class parameters (the backbone and kernel are shared by the classes,
each episode's class functions are a GP over its own support), so a 5-way model scores 20-way
episodes as it is; the way is bounded by the validation split's class count (refused beyond).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from zoo.episode import EpisodeSampler
from zoo.errors import EpisodeError
from zoo.metrics import apply_temperature, ece_mce, fit_temperature, mean_ci, paired_difference
from zoo.plugins import registry
from zoo.runner.cell import DatasetCache
from zoo.runner.cells import Cell
from zoo.runner.train import build_for_cell, load_run
from zoo.tasks.classification import train_way


def parse_variant(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if item)


def ece(probs: torch.Tensor, y: torch.Tensor) -> float:
    conf, pred = probs.max(1)
    return ece_mce(conf.numpy(), (pred == y).double().numpy())[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=101)
    parser.add_argument("--query", type=int, default=15)
    parser.add_argument("--way", type=int, default=None, help="default: the trained way")
    parser.add_argument("--shot", type=int, default=None, help="default: the trained shot")
    parser.add_argument("--variant", action="append", default=None)
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    variants = args.variant or ["predictive=conditional", "predictive=samples"]
    torch.set_num_threads(1)
    reg = registry()
    config, blob = load_run(args.run, "cpu")
    if config["method"] != "ove":
        raise SystemExit(f"{args.run} holds a {config['method']} model, not ove")
    task = reg.get("tasks", config.get("task", "classification"))
    data = DatasetCache(args.data_dir, "cpu", reg).get(config["train_dataset"])
    methods = []
    for text in variants:
        cell = Cell.from_config({**config, "hparams": {**config["hparams"], **parse_variant(text)},
                                 "shot": config["train_shot"], "query": args.query}, task,
                                dataset=config["train_dataset"], test_episodes=args.episodes)
        method = build_for_cell(cell, data, "cpu", reg)
        method.load_state_dict(blob["state_dict"])
        methods.append(method.eval())
    trained_way, trained_shot = train_way(cell.shape), int(cell.shape["train_shot"])
    way = trained_way if args.way is None else args.way
    shot = trained_shot if args.shot is None else args.shot
    try:
        get = EpisodeSampler(data, "val", way, shot, args.query, seed=args.seed).__getitem__
    except EpisodeError as error:  # e.g. a way beyond the split's class count
        raise SystemExit(f"cannot draw {way}-way {shot}-shot validation episodes: {error}") from None
    probs: list[list[torch.Tensor]] = [[] for _ in variants]
    seconds = [0.0 for _ in variants]
    labels = []
    for i in range(args.episodes):
        episode = get(i)
        labels.append(episode.query_y)
        for k, method in enumerate(methods):  # interleaved: the load is shared alike
            start = time.process_time()
            with torch.no_grad():
                probs[k].append(method.predict(episode).probs.double())
            seconds[k] += time.process_time() - start
    y = torch.cat(labels)
    per_episode = []
    rows = []
    rng = np.random.default_rng(0)
    boot = rng.integers(0, args.episodes, size=(args.bootstrap, args.episodes))
    for k, text in enumerate(variants):
        p = torch.stack(probs[k])  # [E, Q, C]
        ys = torch.stack(labels)
        nll_e = -p.gather(-1, ys[..., None]).clamp_min(1e-12).log()[..., 0].mean(-1).numpy()
        acc_e = (p.argmax(-1) == ys).double().mean(-1).numpy()
        flat = p.reshape(-1, p.shape[-1])
        temperature = fit_temperature(flat.clamp_min(1e-12).log(), y)
        calibrated = apply_temperature(flat, temperature)
        nll_cal = float(-calibrated.gather(1, y[:, None]).clamp_min(1e-12).log().mean())
        eces = np.array([ece(p[b].reshape(-1, p.shape[-1]), ys[b].reshape(-1)) for b in boot])
        per_episode.append((acc_e, nll_e, eces))
        rows.append((text, acc_e, nll_e, ece(flat, y), temperature, nll_cal,
                     ece(calibrated, y), seconds[k] / args.episodes))
    out = sys.stdout
    out.write(f"ove {trained_way}-way {trained_shot}-shot model {args.run}; "
              f"{args.episodes} {way}-way {shot}-shot validation episodes (seed {args.seed}), "
              f"{args.query} queries per class\n\n"
              "| variant | acc | NLL | ECE | T | NLL (T) | ECE (T) | CPU s/episode |\n"
              "|---|---|---|---|---|---|---|---|\n")
    for text, acc_e, nll_e, e, t, nll_cal, e_cal, s in rows:
        a, a_ci = mean_ci(acc_e)
        n, n_ci = mean_ci(nll_e)
        out.write(f"| {text} | {a:.3f} ± {a_ci:.3f} | {n:.3f} ± {n_ci:.3f} | {e:.3f} | {t:.3f} "
                  f"| {nll_cal:.3f} | {e_cal:.3f} | {s:.3f} |\n")
    out.write("\npaired differences to the first variant (95% CI half-width; ECE: bootstrap over "
              "episodes)\n\n| variant | d acc | d NLL | d ECE |\n|---|---|---|---|\n")
    ref = per_episode[0]
    for text, (acc_e, nll_e, eces) in zip(variants[1:], per_episode[1:], strict=True):
        da, da_ci = paired_difference(acc_e, ref[0])
        dn, dn_ci = paired_difference(nll_e, ref[1])
        de = eces - ref[2]
        lo, hi = np.percentile(de, [2.5, 97.5])
        out.write(f"| {text} | {da:+.4f} ± {da_ci:.4f} | {dn:+.4f} ± {dn_ci:.4f} | "
                  f"{de.mean():+.4f} [{lo:+.4f}, {hi:+.4f}] |\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
