"""Scoring a trained model on test episodes, resumably, and summarising the per-episode records.

Test episodes are the data set's fixed published ones when it has them (Lake's runs), else
``EpisodeSampler(dataset, "test", way, shot, query, seed)``: identical for every method with the
same seed, so results can be compared pairwise. Records are written to ``episodes.jsonl``
atomically every few seconds; a resumed evaluation continues after the last recorded episode.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from zoo.data.base import FewShotDataset
from zoo.episode import Episode, EpisodeSampler
from zoo.errors import EpisodeError, NumericalError
from zoo.method import Method
from zoo.metrics import apply_temperature, ece_mce, episode_record, mean_ci
from zoo.runner.storage import read_jsonl, write_jsonl

FLUSH_SECONDS = 5.0


def test_episodes(dataset: FewShotDataset, way: int, shot: int, query: int, seed: int,
                  count: int) -> tuple[int, Callable[[int], Episode]]:
    """How many test episodes there are and how to get the i-th (fixed ones take precedence)."""
    fixed = dataset.fixed_episodes("test")
    if fixed is not None:
        if not fixed:
            raise EpisodeError(f"data set {dataset.name!r} has an empty list of fixed test episodes")
        first = fixed[0]
        if (first.way, first.shot) != (way, shot):
            raise EpisodeError(
                f"data set {dataset.name!r} is scored on fixed {first.way}-way {first.shot}-shot "
                f"episodes, but the model is {way}-way {shot}-shot: use --way {first.way} "
                f"--shot {first.shot}")
        device = dataset.device
        return len(fixed), lambda i: fixed[i].to(device)
    sampler = EpisodeSampler(dataset, "test", way, shot, query, seed=seed)
    return count, sampler.__getitem__


def check_compatible(train: dict[str, Any], dataset: FewShotDataset, in_channels: int,
                     image_size: int) -> None:
    if (dataset.in_channels, dataset.image_size) != (in_channels, image_size):
        raise EpisodeError(
            f"data set {dataset.name!r} has {dataset.in_channels}-channel {dataset.image_size}px "
            f"images, but the model of {train['method']} was trained on {in_channels}-channel "
            f"{image_size}px ones ({train['train_dataset']}); choose a test data set of the same "
            "image shape")


def evaluate(method: Method, dataset: FewShotDataset, *, way: int, shot: int, query: int,
             seed: int, count: int, temperature: float, records_path: Path | None = None,
             progress: bool = False, label: str = "") -> list[dict[str, Any]]:
    """Per-episode records for the test episodes; resumes from ``records_path`` if given."""
    n, get = test_episodes(dataset, way, shot, query, seed, count)
    lines: list[str] = []
    if records_path is not None and records_path.exists():
        lines = [json.dumps(r) + "\n" for r in read_jsonl(records_path)][:n]
    records = [json.loads(line) for line in lines]
    running = sum(r["accuracy"] for r in records)
    cuda = dataset.device.type == "cuda"
    method.eval()
    bar = tqdm(total=n, initial=len(records), desc=f"test {label}", leave=False,
               disable=not progress, unit="ep")
    last_flush = time.perf_counter()
    for i in range(len(records), n):
        episode = get(i)
        start = time.perf_counter()
        with torch.no_grad():
            prediction = method.predict(episode)
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        probs = prediction.probs
        if not torch.isfinite(probs).all():
            raise NumericalError(f"non-finite probabilities from {type(method).name} in episode "
                                 f"{episode.id}")
        record = {"index": i, "seed": episode.info.get("seed"),
                  "classes": episode.info.get("classes")}
        record |= episode_record(probs, episode.query_y)
        calibrated = apply_temperature(probs.double(), temperature).max(1).values
        record["confidence_calibrated"] = calibrated.cpu().tolist()
        record["seconds"] = seconds
        inner = prediction.extras.get("inner_objective")
        if inner is not None:
            record["inner_objective"] = [float(v) for v in inner]
        records.append(record)
        lines.append(json.dumps(record) + "\n")
        running += record["accuracy"]
        bar.update(1)
        bar.set_postfix(acc=f"{running / len(records):.3f}")
        if records_path is not None and time.perf_counter() - last_flush > FLUSH_SECONDS:
            write_jsonl(records_path, lines)
            last_flush = time.perf_counter()
    bar.close()
    if records_path is not None:
        write_jsonl(records_path, lines)
    return records


def summarise(records: Sequence[dict[str, Any]], temperature: float) -> dict[str, Any]:
    """Accuracy with its 95% CI over episodes; ECE/MCE/NLL/Brier over all queries (fractions)."""
    confidence = np.concatenate([r["confidence"] for r in records])
    calibrated = np.concatenate([r["confidence_calibrated"] for r in records])
    correct = np.concatenate([r["correct"] for r in records])
    accuracy, ci95 = mean_ci([r["accuracy"] for r in records])
    ece, mce = ece_mce(confidence, correct)
    ece_cal, mce_cal = ece_mce(calibrated, correct)
    return {"accuracy": accuracy, "ci95": ci95, "ece": ece, "mce": mce,
            "nll": float(np.mean([r["nll"] for r in records])),
            "brier": float(np.mean([r["brier"] for r in records])),
            "temperature": temperature, "ece_calibrated": ece_cal, "mce_calibrated": mce_cal,
            "test_episodes": len(records),
            "eval_seconds_per_episode": float(np.mean([r["seconds"] for r in records])),
            "error_percent": 100.0 * (1.0 - accuracy) if not math.isnan(accuracy) else math.nan}
