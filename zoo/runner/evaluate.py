"""Scoring a trained model on test episodes (or, for studies that must not read the test split,
validation episodes), resumably.

The cell's task kind gives the test episodes (identical for every method with the same seed, so
results can be compared pairwise), lets the method prepare them together (a batched inference;
its time is shared out over the episodes), asks for each prediction, checks it and scores it.
Every prediction is checked before it is scored: a malformed one stops the cell with an error
naming the method and the episode. Records are written to ``episodes.jsonl`` atomically every few
seconds; a resumed evaluation continues after the last recorded episode. The summary of the
records is the task kind's (:meth:`zoo.tasks.Task.summarise`), the same one the report uses.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from zoo.runner.storage import read_jsonl, write_jsonl
from zoo.tasks.base import Shape, Task

FLUSH_SECONDS = 5.0


def evaluate(task: Task, method: nn.Module, method_name: str, dataset: Any, *, shape: Shape,
             seed: int, count: int, temperature: float, records_path: Path | None = None,
             progress: bool = False, label: str = "", split: str = "test"
             ) -> list[dict[str, Any]]:
    """Per-episode records for the test episodes (``split="val"``: ``count`` validation episodes
    of the trained shape, drawn with ``seed``); resumes from ``records_path`` if given."""
    if split == "test":
        n, get = task.test_episodes(dataset, shape, seed, count)
    else:
        n, get = count, task.episodes(dataset, split, shape, seed, training=False)
    lines: list[str] = []
    if records_path is not None and records_path.exists():
        lines = [json.dumps(r) + "\n" for r in read_jsonl(records_path)][:n]
    records = [json.loads(line) for line in lines]
    running = sum(r[task.headline] for r in records)
    cuda = getattr(dataset, "device", torch.device("cpu")).type == "cuda"
    method.eval()
    bar = tqdm(total=n, initial=len(records), desc=f"test {label}", leave=False,
               disable=not progress, unit="ep")
    last_flush = start = time.perf_counter()
    with torch.no_grad():
        task.prepare(method, get, range(len(records), n))
    prepared = (time.perf_counter() - start) / max(1, n - len(records))
    for i in range(len(records), n):
        episode = get(i)
        start = time.perf_counter()
        with torch.no_grad():
            prediction = task.predict(method, episode)
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start + prepared
        task.check(prediction, episode, method_name)
        record = {"index": i} | task.score(prediction, episode, temperature)
        record["seconds"] = seconds
        inner = getattr(prediction, "extras", {}).get("inner_objective")
        if inner is not None:
            record["inner_objective"] = [float(v) for v in inner]
        records.append(record)
        lines.append(json.dumps(record) + "\n")
        running += record[task.headline]
        if progress:
            bar.update(1)
            bar.set_postfix({task.headline: f"{running / len(records):.3f}"})
        if records_path is not None and time.perf_counter() - last_flush > FLUSH_SECONDS:
            write_jsonl(records_path, lines)
            last_flush = time.perf_counter()
    bar.close()
    if records_path is not None:
        write_jsonl(records_path, lines)
    return records
