"""What burn-in changes in the Gibbs "marginal likelihood" meta-gradient of OVE and
logistic-softmax, at trained weights, without retraining (a cheap probe; the retraining study is
the suite ``gibbs-burn-in``).

    python benchmarks/gibbs/burn_in_probe.py TRAIN_FOLDER [--sweeps 1,2,5,20] [--reference 50]

For each number of Gibbs sweeps ``k`` (``train_steps`` of OVE, ``gibbs_train_steps`` of
logistic-softmax, whose model is switched to Gibbs inference) the meta-loss gradient with respect
to every trained parameter is taken on validation episodes and compared with the gradient after
``--reference`` sweeps, the closest to Fisher's identity's ``E_{p(w | y)}[grad log p(y | w)]``
here: cosine similarity and norm ratio, averaged over episodes, and seconds per loss + backward.
A one-sweep loss that estimates the same direction as the burnt-in one has a cosine near the
reference's own repeatability (printed as the cosine between two reference draws).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from zoo.episode import Episode
from zoo.plugins import registry
from zoo.runner.cell import DatasetCache
from zoo.runner.cells import Cell
from zoo.runner.train import build_for_cell, load_run

STEPS_KEY = {"ove": "train_steps", "logistic-softmax": "gibbs_train_steps"}


def gradient(method: torch.nn.Module, episode: Episode, task, salt: int = 0) -> tuple[torch.Tensor,
                                                                                      float]:
    """The flattened meta-loss gradient on ``episode`` and the seconds it took; ``salt`` changes
    the episode's seed, hence the chains' random draws."""
    if salt:
        episode = replace(episode, info={**episode.info, "seed": episode.info.get("seed", 0) + salt})
    method.zero_grad(set_to_none=True)
    start = time.perf_counter()
    task.meta_loss(method, episode).backward()
    seconds = time.perf_counter() - start
    grads = [p.grad.flatten() for p in method.parameters() if p.grad is not None]
    return torch.cat(grads).double(), seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a training folder of ove or logistic-softmax")
    parser.add_argument("--sweeps", default="1,2,5,20")
    parser.add_argument("--reference", type=int, default=50)
    parser.add_argument("--episodes", type=int, default=5, help="validation episodes")
    parser.add_argument("--seed", type=int, default=1, help="validation episode seed")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    reg = registry()
    config, blob = load_run(args.run, "cpu")
    name = config["method"]
    if name not in STEPS_KEY:
        raise SystemExit(f"{args.run} holds a {name} model; the probe is for {sorted(STEPS_KEY)}")
    hparams = dict(config["hparams"])
    if name == "logistic-softmax":
        hparams["inference"] = "gibbs"
    task = reg.get("tasks", config.get("task", "classification"))
    cell = Cell.from_config({**config, "hparams": hparams, "shot": config["train_shot"],
                             "query": config["train_query"]}, task,
                            dataset=config["train_dataset"], test_episodes=args.episodes)
    data = DatasetCache(args.data_dir, "cpu", reg).get(config["train_dataset"])
    method = build_for_cell(cell, data, "cpu", reg)
    method.load_state_dict(blob["state_dict"])
    method.train()
    get = task.episodes(data, "val", cell.shape, args.seed, training=True)
    episodes = [get(i) for i in range(args.episodes)]
    key = STEPS_KEY[name]

    def at(steps: int, salt: int = 0) -> tuple[list[torch.Tensor], float]:
        method.hparams[key] = steps
        out = [gradient(method, e, task, salt) for e in episodes]
        return [g for g, _ in out], sum(s for _, s in out) / len(out)

    reference, ref_seconds = at(args.reference)
    again, _ = at(args.reference, salt=1)
    cos = torch.nn.functional.cosine_similarity

    def compare(grads: list[torch.Tensor]) -> tuple[float, float]:
        c = sum(float(cos(g, r, dim=0)) for g, r in zip(grads, reference)) / len(grads)
        ratio = sum(float(g.norm() / r.norm()) for g, r in zip(grads, reference)) / len(grads)
        return c, ratio

    sys.stdout.write(f"{name} {config['train_shot']}-shot, {args.episodes} validation episodes; "
                     f"reference: {args.reference} sweeps\n| sweeps | cosine with reference | "
                     "norm ratio | s per loss + backward |\n|---|---|---|---|\n")
    for steps in (int(s) for s in args.sweeps.split(",")):
        grads, seconds = at(steps)
        c, ratio = compare(grads)
        sys.stdout.write(f"| {steps} | {c:.3f} | {ratio:.2f} | {seconds:.2f} |\n")
    c, ratio = compare(again)
    sys.stdout.write(f"| {args.reference} (other draws) | {c:.3f} | {ratio:.2f} | "
                     f"{ref_seconds:.2f} |\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
