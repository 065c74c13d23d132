"""Scoring a trained model on test episodes (or, for studies that must not read the test split,
validation episodes), resumably.

The cell's task kind gives the test episodes (identical for every method with the same seed, so
results can be compared pairwise), lets the method prepare them together (a batched inference;
its time is shared out over the episodes), asks for each prediction, and checks and scores the
predictions in groups (the kind's ``score_batch``: one batched call where the kind allows, not
~15 tensor calls per episode). Every prediction is checked before it is scored: a malformed one
stops the cell with an error naming the method and the episode, the episodes before it kept.
Records are written to ``episodes.jsonl`` atomically every few seconds; a resumed evaluation
continues after the last recorded episode. The summary of the records is the task kind's
(:meth:`zoo.tasks.Task.summarise`), the same one the report uses.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from zoo.io import json_line
from zoo.runner.storage import read_jsonl, write_jsonl
from zoo.tasks.base import PredictionError, Shape, Task

FLUSH_SECONDS = 5.0


def evaluate(task: Task, method: nn.Module, method_name: str, dataset: Any, *, shape: Shape,
             seed: int, count: int, temperature: float, records_path: Path | None = None,
             progress: bool = False, label: str = "", split: str = "test", cell: str = ""
             ) -> list[dict[str, Any]]:
    """Per-episode records for the test episodes (``split="val"``: ``count`` validation episodes
    of the trained shape, drawn with ``seed``); resumes from ``records_path`` if given. With
    ``cell`` (the hash of the cell they belong to) each record names it, so that records copied
    into another cell are recognised (:mod:`zoo.runner.storage.layout`)."""
    if split == "test":
        n, get = task.test_episodes(dataset, shape, seed, count)
    else:
        n, get = count, task.episodes(dataset, split, shape, seed, training=False)
    records: list[dict[str, Any]] = []
    if records_path is not None and records_path.exists():
        records = read_jsonl(records_path)[:n]
    lines = [json_line(r) for r in records]
    running = sum(r[task.headline] for r in records)
    cuda = getattr(dataset, "device", torch.device("cpu")).type == "cuda"
    method.eval()
    bar = tqdm(total=n, initial=len(records), desc=f"test {label}", leave=False,
               disable=not progress, unit="ep")
    pending: list[tuple[int, Any, Any, float]] = []  # (index, episode, prediction, seconds)

    def keep(items: Sequence[tuple[int, Any, Any, float]]) -> None:
        nonlocal running
        indices, episodes, predictions, seconds = zip(*items, strict=True)
        scored = task.score_many(predictions, episodes, temperature)
        for i, episode_seconds, prediction, score in zip(indices, seconds, predictions, scored,
                                                         strict=True):
            record = ({"cell": cell} if cell else {}) | {"index": i} | score
            record["seconds"] = episode_seconds
            inner = getattr(prediction, "extras", {}).get("inner_objective")
            if inner is not None:
                record["inner_objective"] = [float(v) for v in inner]
            records.append(record)
            lines.append(json_line(record))
            running += record[task.headline]

    def settle() -> None:
        """Check the pending predictions (at once) and keep their records."""
        items = pending[:]
        pending.clear()
        if not items:
            return
        try:
            task.check_many([it[2] for it in items], [it[1] for it in items], method_name)
        except PredictionError:
            for item in items:  # the episodes before the bad one are kept, then it raises again
                task.check(item[2], item[1], method_name)
                keep([item])
            raise
        keep(items)
        if progress:
            bar.set_postfix({task.headline: f"{running / len(records):.3f}"})

    last_flush = start = time.perf_counter()
    try:
        with torch.no_grad():  # a method that adapts at test time enables gradients itself
            task.prepare(method, get, range(len(records), n))
            prepared = (time.perf_counter() - start) / max(1, n - len(records))
            for i in range(len(records), n):
                episode = get(i)
                start = time.perf_counter()
                prediction = task.predict(method, episode)
                if cuda:
                    torch.cuda.synchronize()
                pending.append((i, episode, prediction, time.perf_counter() - start + prepared))
                bar.update(1)
                due = time.perf_counter() - last_flush > FLUSH_SECONDS
                if len(pending) >= task.score_batch or due:
                    settle()
                if due:
                    if records_path is not None:
                        write_jsonl(records_path, lines)
                    last_flush = time.perf_counter()
            settle()
    finally:  # what was scored is saved, also when a prediction is refused
        bar.close()
        if records_path is not None:
            write_jsonl(records_path, lines)
    return records
