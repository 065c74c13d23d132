"""Whether a larger kernel output scale would remove a trained GP classifier's raw under-confidence,
and whether meta-training pushes the scale that way, without retraining (a cheap probe; the
retraining study is the suite ``gp-outputscale``).

    python benchmarks/gp_calibration/outputscale_probe.py TRAIN_FOLDER [--factors 1,4,16,64]

For each factor the trained model's output scale is multiplied by it at prediction time and the
model is scored on validation episodes (a seed other than the run's, whose validation episodes
chose its checkpoint): accuracy, NLL and raw ECE. Then the meta-loss gradient with respect to the
log output scale, averaged over training episodes at the trained weights: negative means that
gradient descent grows the scale (how fast is set by the kernel's learning rate).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

from zoo.metrics import ece_mce, nll
from zoo.plugins import registry
from zoo.runner.cell import DatasetCache
from zoo.runner.cells import Cell
from zoo.runner.train import build_for_cell, load_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a training or cell folder of a GP method")
    parser.add_argument("--factors", default="1,4,16,64")
    parser.add_argument("--episodes", type=int, default=20, help="validation episodes")
    parser.add_argument("--grad-episodes", type=int, default=10, help="training episodes")
    parser.add_argument("--seed", type=int, default=1, help="validation episode seed")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    reg = registry()
    config, blob = load_run(args.run, "cpu")
    task = reg.get("tasks", config.get("task", "classification"))
    cell = Cell.from_config({**config, "shot": config["train_shot"], "query": 15}, task,
                            dataset=config["train_dataset"], test_episodes=args.episodes)
    data = DatasetCache(args.data_dir, "cpu", reg).get(config["train_dataset"])
    method = build_for_cell(cell, data, "cpu", reg)
    method.load_state_dict(blob["state_dict"])
    kernel = method.kernel
    trained = kernel.raw_outputscale.detach().clone()
    scale = float(torch.nn.functional.softplus(trained).mean())
    sys.stdout.write(f"{config['method']} {config['train_shot']}-shot, trained output scale "
                     f"{scale:.4f}\n| factor | val acc % | NLL | raw ECE % | mean conf. % |\n"
                     "|---|---|---|---|---|\n")
    get = task.episodes(data, "val", cell.shape, args.seed, training=False)
    episodes = [get(i) for i in range(args.episodes)]
    method.eval()
    for factor in (float(f) for f in args.factors.split(",")):
        target = factor * torch.nn.functional.softplus(trained)
        with torch.no_grad():
            kernel.raw_outputscale.copy_(target + torch.log(-torch.expm1(-target)))
            probs = torch.cat([method.predict(e).probs.double() for e in episodes])
        y = torch.cat([e.query_y for e in episodes])
        conf, pred = probs.max(1)
        correct = (pred == y).double()
        ece = ece_mce(conf.numpy(), correct.numpy())[0]
        sys.stdout.write(f"| {factor:g} | {100 * float(correct.mean()):.1f} | {nll(probs, y):.3f} "
                         f"| {100 * ece:.1f} | {100 * float(conf.mean()):.1f} |\n")
    with torch.no_grad():
        kernel.raw_outputscale.copy_(trained)
    method.train()
    sample = task.episodes(data, "train", cell.shape, cell.seed, training=True)
    grads = []
    for i in range(args.grad_episodes):
        method.zero_grad(set_to_none=True)
        task.meta_loss(method, sample(i)).backward()
        # d/d log s = d/d raw * (d raw / d log s) = grad * s / sigmoid(raw)
        raw = kernel.raw_outputscale.detach()
        factor = torch.nn.functional.softplus(raw) / torch.sigmoid(raw)
        grads.append(float((kernel.raw_outputscale.grad * factor).sum()))
    mean = sum(grads) / len(grads)
    sd = math.sqrt(sum((g - mean) ** 2 for g in grads) / max(len(grads) - 1, 1))
    sys.stdout.write(f"meta-loss gradient wrt log output scale: {mean:+.4f} (sd {sd:.4f} over "
                     f"{len(grads)} training episodes; negative: descent grows the scale)\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
