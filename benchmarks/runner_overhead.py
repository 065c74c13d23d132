"""Runner overhead vs a ProtoNet cell's time, measured in one run.

Runs one quick-suite ProtoNet cell (glyphs, 5-way 1-shot, trained and scored on the held-out
alphabets) through the runner's own unit of work, and times the model's work inside it:
``meta_loss``, the backward pass, the optimizer step and ``predict``. Everything else the cell
spends (loading data, sampling episodes, checkpoints, validation bookkeeping, metrics, atomic
writes, env.json) is the runner's overhead. Prints both and their ratio (target: <= 10%).

    .venv/bin/python benchmarks/runner_overhead.py [--train-episodes 100] [--test-episodes 60]
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from pathlib import Path

import torch

from zoo.io import atomic_write_json
from zoo.plugins import registry
from zoo.runner.cell import run_unit
from zoo.runner.cells import expand_cells
from zoo.runner.storage.layout import FORMAT, MARKER
from zoo.runner.suite import apply_overrides, load_suite

MODEL_TIME = [0.0]


def timed(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            MODEL_TIME[0] += time.perf_counter() - start
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-episodes", type=int, default=None)
    parser.add_argument("--test-episodes", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    sets = ["shots=1", "test_datasets=['glyphs']"]
    if args.train_episodes:
        sets.append(f"train_episodes={args.train_episodes}")
    if args.test_episodes:
        sets.append(f"test_episodes={args.test_episodes}")
    suite = apply_overrides(load_suite("quick", registry=registry()), sets, ["protonet"], registry=registry())
    cells = expand_cells(suite, ["protonet"], registry=registry())

    cls = registry().get("methods", "protonet")
    cls.meta_loss = timed(cls.meta_loss)
    cls.predict = timed(cls.predict)
    torch.Tensor.backward = timed(torch.Tensor.backward)
    torch.optim.Adam.step = timed(torch.optim.Adam.step)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        atomic_write_json(root / MARKER, FORMAT)
        start = time.perf_counter()
        (outcome,) = run_unit(cells, root, None, "cpu", threads=args.threads, registry=registry())
        total = time.perf_counter() - start
    assert outcome.result is not None, outcome.error
    overhead = total - MODEL_TIME[0]
    c = cells[0]
    print(f"ProtoNet cell (glyphs {c.shape['way']}-way {c.shape['shot']}-shot, {c.train_episodes} training + "
          f"{c.val_episodes} x {c.train_episodes // c.val_every} validation + "
          f"{c.test_episodes} test episodes, {args.threads} thread(s)):")
    print(f"  cell total     {total:8.2f} s")
    print(f"  model work     {MODEL_TIME[0]:8.2f} s  (meta_loss, backward, Adam step, predict)")
    print(f"  runner overhead {overhead:7.2f} s  = {100 * overhead / total:.1f}% of the cell "
          "(data, sampling, checkpoints, metrics, writing; target <= 10%)")


if __name__ == "__main__":
    main()
