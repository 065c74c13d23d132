"""Every classification prediction is checked before it is scored: a malformed one is an error
naming the method and the episode, never a number in the results."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.errors import EpisodeError
from zoo.method import Prediction
from zoo.tasks import PredictionError
from zoo.tasks.base import SIMPLEX_TOLERANCE
from zoo.tasks.classification import Classification
from zoo.testing import toy_episode

TASK = Classification()


@pytest.fixture
def episode():
    return toy_episode(3, 1, query=2)


def test_a_proper_prediction_passes(episode):
    TASK.check(Prediction(torch.softmax(torch.randn(6, 3), -1)), episode, "ok")


@pytest.mark.parametrize("probs, problem", [
    (torch.full((6, 3), 2 / 3), "sums to 1"),                       # rows summing to 2
    (torch.full((6, 4), 0.25), r"shape \(6, 4\), expected"),        # [Q, way + 1]
    (torch.full((5, 3), 1 / 3), r"shape \(5, 3\)"),                  # a query missing
    (torch.tensor([[1.5, -0.5, 0.0]] * 6), "negative"),
    (torch.tensor([[float("nan"), 0.5, 0.5]] * 6), "non-finite"),
])
def test_malformed_predictions_are_rejected(episode, probs, problem):
    with pytest.raises(PredictionError, match=problem) as info:
        TASK.check(Prediction(probs), episode, "sloppy")
    assert "'sloppy'" in str(info.value) and episode.id in str(info.value)
    assert "zoo.Prediction(probs)" in str(info.value)


def test_a_prediction_of_another_type_says_what_predict_must_return(episode):
    with pytest.raises(PredictionError) as info:
        TASK.check(torch.full((6, 3), 1 / 3), episode, "raw")
    assert str(info.value) == (
        f"method 'raw' in episode {episode.id}: returned a Tensor, not a zoo.Prediction; its "
        "predict must return zoo.Prediction(probs) with one row of class probabilities per query "
        "(e.g. torch.softmax(logits, -1))")


def test_float32_softmax_rounding_is_within_tolerance(episode):
    logits = 30 * torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    TASK.check(Prediction(torch.softmax(logits.float(), -1)), episode, "ok")
    with pytest.raises(PredictionError):
        TASK.check(Prediction(torch.full((6, 3), 1 / 3 + 1e-3)), episode, "off")


def test_round_off_below_zero_is_accepted_and_scored(episode):
    """An estimate's round-off below 0 (``1 - sum`` of the others: -1e-17) is no reason to lose
    a cell: it passes, alone and batched, and its scores are finite; an entry further below 0
    than the tolerance is refused, naming it."""
    probs = torch.tensor([[1.0 + 1e-17, -1e-17, 0.0]] * 6, dtype=torch.float64)
    TASK.check(Prediction(probs), episode, "ok")
    TASK.check_many([Prediction(probs)] * 2, [episode] * 2, "ok")
    record = TASK.score(Prediction(probs), episode)
    assert all(math.isfinite(record[k]) for k in ("accuracy", "nll", "brier"))
    beyond = torch.tensor([[1.0 + 2 * SIMPLEX_TOLERANCE, -2 * SIMPLEX_TOLERANCE, 0.0]] * 6)
    with pytest.raises(PredictionError, match="negative probabilities .smallest -0.0002"):
        TASK.check(Prediction(beyond.double()), episode, "sloppy")


@pytest.mark.parametrize("probs, problem", [
    (torch.full((6, 3), 2 / 3), "sums to 1"),
    (torch.full((6, 4), 0.25), r"shape \(6, 4\), expected"),
    (torch.tensor([[1.5, -0.5, 0.0]] * 6), "negative"),
    (torch.tensor([[float("nan"), 0.5, 0.5]] * 6), "non-finite"),
])
def test_checking_many_at_once_names_the_first_bad_episode(probs, problem):
    """The batched check refuses what the one-by-one check refuses, naming the first bad episode
    of the group (not the first of the group, not a later bad one)."""
    episodes = [numbered(toy_episode(3, 1, query=2, seed=s), s) for s in range(4)]
    good = [Prediction(torch.softmax(torch.randn(6, 3), -1)) for _ in episodes]
    TASK.check_many(good, episodes, "ok")
    bad = good[:1] + [Prediction(probs), Prediction(probs)] + good[3:]
    with pytest.raises(PredictionError, match=problem) as info:
        TASK.check_many(bad, episodes, "sloppy")
    assert episodes[1].id in str(info.value) and episodes[2].id not in str(info.value)


def numbered(episode, index: int):
    episode.info["index"] = index  # its id, toy/test#index
    return episode


def test_scoring_many_at_once_equals_scoring_one_by_one():
    """One batched call gives the records of the episodes scored one at a time (float64, to the
    last bits of a reduction order), with their seeds and classes; episodes of other shapes in the
    group are scored alone."""
    episodes = [toy_episode(3, 1, query=2, seed=s) for s in range(5)] + [toy_episode(4, 1, query=1)]
    g = torch.Generator().manual_seed(0)
    predictions = [Prediction(torch.softmax(torch.randn(e.query_y.shape[0], e.way, generator=g), -1))
                   for e in episodes]
    many = TASK.score_many(predictions, episodes, temperature=0.5)
    for prediction, episode, record in zip(predictions, episodes, many, strict=True):
        alone = TASK.score_many([prediction], [episode], temperature=0.5)[0]
        assert record.keys() == alone.keys()
        assert record["seed"] == episode.info.get("seed") and record["classes"] == alone["classes"]
        for key, value in alone.items():
            if key not in ("seed", "classes"):
                assert record[key] == pytest.approx(value, rel=1e-14, abs=1e-15), key


def test_scoring_an_unchecked_malformed_prediction_is_an_error_not_a_loop(episode):
    with pytest.raises(PredictionError, match="check it first"):
        TASK.score(Prediction(torch.full((5, 3), 1 / 3)), episode)


def test_nll_and_brier_of_a_summary_are_over_all_queries():
    """Episodes of other query counts pooled (a report cell of two ``query`` settings): NLL and
    Brier are means over every query, as ECE is, not means of the episodes' means."""
    from zoo.metrics import brier, nll

    episodes = [toy_episode(3, 1, query=1), toy_episode(3, 1, query=4, seed=1)]
    g = torch.Generator().manual_seed(0)
    probs = [torch.softmax(3 * torch.randn(e.query_y.shape[0], 3, generator=g, dtype=torch.float64),
                           -1) for e in episodes]
    records = [r | {"seconds": 0.0} for r in
               TASK.score_many([Prediction(p) for p in probs], episodes)]
    summary = TASK.summarise(records)
    every_p, every_y = torch.cat(probs), torch.cat([e.query_y for e in episodes])
    assert summary["nll"] == pytest.approx(nll(every_p, every_y), rel=1e-12)
    assert summary["brier"] == pytest.approx(brier(every_p, every_y), rel=1e-12)


def test_seeds_repeated_on_fixed_episodes_do_not_narrow_the_interval():
    """Fixed published episodes (Lake's runs) scored by three seeds' models: the interval is over
    the 8 distinct episodes, each at its mean over the seeds; three identical seeds give the
    interval of one. Sampled episodes (each its own seed) keep the interval over records."""
    from zoo.metrics import mean_ci

    g = torch.Generator().manual_seed(0)
    accuracy = torch.rand(3, 8, generator=g, dtype=torch.float64)  # [seed, episode]

    def records(acc: torch.Tensor, episode_seed) -> list[dict]:
        return [{"seed": episode_seed(s, e), "index": e, "accuracy": float(acc[s, e]),
                 "correct": [1], "confidence": [0.5], "confidence_calibrated": [0.5],
                 "nll": 0.7, "brier": 0.5, "seconds": 0.0}
                for s in range(acc.shape[0]) for e in range(acc.shape[1])]

    fixed = TASK.summarise(records(accuracy, lambda s, e: 1000 + e))
    mean, ci = mean_ci(accuracy.mean(0).numpy())
    assert (fixed["accuracy"], fixed["ci95"]) == pytest.approx((mean, ci), rel=1e-12)
    same = TASK.summarise(records(accuracy[:1].expand(3, -1), lambda s, e: 1000 + e))
    alone = TASK.summarise(records(accuracy[:1], lambda s, e: 1000 + e))
    assert same["ci95"] == pytest.approx(alone["ci95"], rel=1e-12)
    sampled = TASK.summarise(records(accuracy, lambda s, e: 100 * s + e))
    assert (sampled["accuracy"], sampled["ci95"]) == pytest.approx(
        mean_ci(accuracy.flatten().numpy()), rel=1e-12)


def test_a_shape_other_than_the_fixed_episodes_names_both_forms_of_the_fix():
    class Fixed:
        name, device = "fixed-runs", "cpu"

        def fixed_episodes(self, split):
            return [toy_episode(20, 1, query=1)]

    shape = {"way": 5, "shot": 1}
    with pytest.raises(EpisodeError, match=r"fixed 20-way 1-shot episodes, but the model is 5-way "
                                           r"1-shot: use way 20 and shot 1 \(zoo bench: --set "
                                           r"ways=20 --set shots=1; zoo train and zoo evaluate: "
                                           r"--way 20 --shot 1\)"):
        TASK.test_episodes(Fixed(), shape, seed=0, count=1)
