"""Unknown-class queries: a pure function of the episode, from classes outside its support, scored
for detection without changing a bit of the known queries' records; selective-prediction scores
in every summary."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from zoo.data.digits import load_digits
from zoo.data.glyphs import load_glyphs
from zoo.episode import EpisodeSampler, unknown_count, with_unknown_queries
from zoo.errors import EpisodeError, ZooError
from zoo.method import Prediction
from zoo.ranking import aurc, excess_aurc
from zoo.runner import evaluate as evaluation
from zoo.tasks.classification import Classification, detection

TASK = Classification()
SHAPE = {"way": 3, "shot": 1, "query": 2, "train_shot": 1, "train_query": 2}
KNOWN = ("accuracy", "nll", "brier", "confidence", "correct", "confidence_calibrated", "seed",
         "classes", "index")


class NoisyNearest(torch.nn.Module):
    """Softmax of negative pixel distances to the class means, sharpened by a draw from the
    global RNG (a method that uses it: the unknown queries' call must not shift it), with its
    own uncertainty, the distance to the nearest class mean."""

    uncertainty_name = "distance to the nearest class mean"

    def predict(self, episode):
        s, q = episode.support_x.flatten(1), episode.query_x.flatten(1)
        means = torch.stack([s[episode.support_y == c].mean(0) for c in range(episode.way)])
        d = torch.cdist(q, means)
        scale = 1 + torch.rand(())
        return Prediction(torch.softmax(-scale * d, -1), {"uncertainty": d.min(-1).values})


@pytest.fixture(scope="module")
def glyphs():
    return load_glyphs()


def test_unknown_queries_are_a_pure_function_outside_the_support(glyphs):
    episode = EpisodeSampler(glyphs, "test", 5, 1, 3, seed=4)[2]
    a = with_unknown_queries(episode, glyphs, "test", 0.5)
    b = with_unknown_queries(EpisodeSampler(glyphs, "test", 5, 1, 3, seed=4)[2], glyphs, "test", 0.5)
    assert a.unknown_x.shape == (unknown_count(15, 5, 0.5), *episode.query_x.shape[1:]) == (15, 1, 28, 28)
    assert torch.equal(a.unknown_x, b.unknown_x)
    for field in ("support_x", "support_y", "query_x", "query_y"):
        assert torch.equal(getattr(a, field), getattr(episode, field))
    assert a.info == episode.info and a.known().unknown_x is None
    # every unknown image is an example of a test class that is not one of the episode's
    own = set(episode.info["classes"])

    def images(c):
        return glyphs.gather(torch.tensor([c]), torch.arange(int(glyphs.class_sizes[c]))[None])[0]

    test = [int(c) for c in glyphs.split_classes("test")]
    allowed = torch.cat([images(c) for c in test if glyphs.class_names[c] not in own])
    excluded = torch.cat([images(c) for c in test if glyphs.class_names[c] in own])
    for x in a.unknown_x:
        assert (allowed == x).flatten(1).all(1).any()
        assert not (excluded == x).flatten(1).all(1).any()
    other = with_unknown_queries(EpisodeSampler(glyphs, "test", 5, 1, 3, seed=4)[3], glyphs, "test", 0.5)
    assert not torch.equal(other.unknown_x, a.unknown_x)


def test_unknown_count_and_errors(glyphs):
    assert unknown_count(75, 5, 0.5) == 75 and unknown_count(75, 5, 0.2) == 20
    assert unknown_count(6, 3, 0.01) == 3  # at least one per class
    with pytest.raises(EpisodeError, match="unknown_fraction"):
        unknown_count(75, 5, 1.0)
    episode = EpisodeSampler(glyphs, "test", 5, 1, 3, seed=0)[0]
    with pytest.raises(EpisodeError, match="lower unknown_fraction"):
        with_unknown_queries(episode, load_digits(), "test", 0.999)


def test_suite_settings_are_checked():
    base = dict(TASK.settings, seeds=[0])
    assert "unknown_fraction" not in TASK.shapes(base)[0]  # off: the shape is as before
    on = TASK.shapes(base | {"unknown_fraction": 0.5, "unknown_dataset": "digits"})[0]
    assert on["unknown_fraction"] == 0.5 and TASK.auxiliary_datasets(on) == ["digits"]
    for bad in ({"unknown_fraction": 1.0}, {"unknown_dataset": "digits"}, {"ensemble": 1},
                {"ensemble": 3}):
        with pytest.raises(ZooError):
            TASK.shapes(base | bad)


def run(glyphs, shape, auxiliary=None):
    torch.manual_seed(0)
    return evaluation.evaluate(TASK, NoisyNearest(), "noisy", glyphs, shape=shape, seed=3,
                               count=12, temperature=0.7, auxiliary=auxiliary)


@pytest.mark.parametrize("source", ["glyphs", "digits"])
def test_known_records_are_bit_identical_with_unknown_queries(glyphs, source):
    off = run(glyphs, SHAPE)
    shape = SHAPE | {"unknown_fraction": 0.5} | ({"unknown_dataset": source} if source != "glyphs" else {})
    on = run(glyphs, shape, {"digits": load_digits()})
    for a, b in zip(off, on, strict=True):
        assert {k: a[k] for k in KNOWN} == {k: b[k] for k in KNOWN}
        assert b["unknown_queries"] == 6
        for key in ("auroc_entropy", "aupr_entropy", "auroc_maxprob", "aupr_maxprob",
                    "auroc_uncertainty", "aupr_uncertainty"):
            assert 0 <= b[key] <= 1, key
    summary = TASK.summarise(on)
    assert summary["accuracy"] == TASK.summarise(off)["accuracy"]
    assert summary["ece"] == TASK.summarise(off)["ece"]
    assert summary["auroc_entropy"] == pytest.approx(np.mean([r["auroc_entropy"] for r in on]))
    assert not math.isnan(summary["auroc_uncertainty_ci95"])
    assert "auroc_entropy" not in TASK.summarise(off)
    with pytest.raises(EpisodeError, match="not loaded"):
        TASK.test_episodes(glyphs, SHAPE | {"unknown_fraction": 0.5, "unknown_dataset": "digits"},
                           3, 2)[1](0)


def test_detection_of_a_prediction():
    sure = torch.tensor([[0.9, 0.05, 0.05], [0.05, 0.9, 0.05]])
    unsure = torch.full((3, 3), 1 / 3)
    p = Prediction(sure, {"unknown": Prediction(unsure)})
    out = detection(p)
    assert out["unknown_queries"] == 3
    assert out["auroc_entropy"] == out["auroc_maxprob"] == out["aupr_entropy"] == 1.0
    assert "auroc_uncertainty" not in out  # neither prediction gives its own
    flipped = detection(Prediction(unsure[:2], {"unknown": Prediction(sure)}))
    assert flipped["auroc_entropy"] == 0.0


def test_every_summary_scores_selective_prediction(glyphs):
    records = run(glyphs, SHAPE)
    summary = TASK.summarise(records)
    conf = np.array([r["confidence"] for r in records])
    right = np.array([r["correct"] for r in records])
    assert summary["aurc"] == pytest.approx(aurc(conf, right).mean(), abs=1e-15)
    assert summary["eaurc"] == pytest.approx(excess_aurc(conf, right).mean(), abs=1e-15)
    assert 0 <= summary["eaurc"] <= summary["aurc"] <= 1 and summary["aurc_ci95"] > 0
    assert "AURC" not in TASK.view.cell_text(summary)  # shown only where unknown queries were scored
