"""Scoring a model on test episodes: predictions are checked and scored in groups, with the same
records as one by one; a refused prediction keeps the records of the episodes before it."""

from __future__ import annotations

import json

import pytest
import torch

from zoo.data.glyphs import load_glyphs
from zoo.method import Prediction
from zoo.runner import evaluate as evaluation
from zoo.tasks import PredictionError
from zoo.tasks.classification import Classification

TASK = Classification()
SHAPE = {"way": 3, "shot": 1, "query": 2, "train_shot": 1, "train_query": 2}


class Nearest(torch.nn.Module):
    """Softmax of negative distances of flattened pixels to the class means; from episode
    ``bad_from`` on, rows summing to 2."""

    def __init__(self, bad_from: int | None = None):
        super().__init__()
        self.bad_from, self.calls = bad_from, 0

    def forward(self, episode):
        return self.predict(episode)

    def predict(self, episode):
        s, q = episode.support_x.flatten(1), episode.query_x.flatten(1)
        means = torch.stack([s[episode.support_y == c].mean(0) for c in range(episode.way)])
        probs = torch.softmax(-torch.cdist(q, means), -1)
        self.calls += 1
        bad = self.bad_from is not None and self.calls > self.bad_from
        return Prediction(2 * probs if bad else probs)


@pytest.fixture(scope="module")
def glyphs():
    return load_glyphs()


def run(glyphs, method, path=None, count=10):
    return evaluation.evaluate(TASK, method, "nearest", glyphs, shape=SHAPE, seed=3, count=count,
                               temperature=0.7, records_path=path)


@pytest.mark.parametrize("batch", [1, 4, 32])
def test_records_do_not_depend_on_how_many_are_scored_together(glyphs, monkeypatch, batch):
    reference = run(glyphs, Nearest())
    monkeypatch.setattr(Classification, "score_batch", batch)
    records = run(glyphs, Nearest())
    assert [r["index"] for r in records] == list(range(10))
    for a, b in zip(reference, records, strict=True):
        for key in a.keys() - {"seconds"}:
            assert a[key] == (pytest.approx(b[key], rel=1e-14) if key in ("nll", "brier")
                              else b[key]), key


def test_a_refused_prediction_keeps_the_episodes_before_it(glyphs, tmp_path, monkeypatch):
    monkeypatch.setattr(Classification, "score_batch", 4)  # the bad one (index 6) in the second group
    path = tmp_path / "episodes.jsonl"
    with pytest.raises(PredictionError, match=r"'nearest' in episode .*#6.*sums to 1"):
        run(glyphs, Nearest(bad_from=6), path)
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["index"] for r in kept] == list(range(6))
    resumed = run(glyphs, Nearest(), path)  # a fixed method resumes after them
    reference = run(glyphs, Nearest())
    assert [r["accuracy"] for r in resumed] == [r["accuracy"] for r in reference]
