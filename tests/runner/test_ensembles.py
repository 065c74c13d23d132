"""Ensembles of a cell's trained seeds: averaged probabilities, an ensemble of identical members is
the member, its own rows in the report (members named) paired with the members on their own
episodes, resumable, without retraining."""

from __future__ import annotations

import json

import pytest
import torch

from zoo.data.glyphs import load_glyphs
from zoo.ensemble import Ensemble
from zoo.episode import EpisodeSampler
from zoo.method import Prediction
from zoo.runner import evaluate as evaluation
from zoo.runner.bench import run_suite
from zoo.runner.collect import load_report
from zoo.runner.report import markdown
from zoo.tasks.classification import Classification

from .conftest import tiny_suite


class Fixed(torch.nn.Module):
    """Softmax of ``scale`` times negative pixel distances to the class means."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def predict(self, episode):
        s, q = episode.support_x.flatten(1), episode.query_x.flatten(1)
        means = torch.stack([s[episode.support_y == c].mean(0) for c in range(episode.way)])
        return Prediction(torch.softmax(-self.scale * torch.cdist(q, means), -1))


def test_ensemble_averages_and_identical_members_are_the_member():
    episode = EpisodeSampler(load_glyphs(), "test", 5, 1, 3, seed=0)[0]
    a, b = Fixed(0.2), Fixed(0.05)
    both = Ensemble([a, b]).predict(episode)
    assert torch.allclose(both.probs, (a.predict(episode).probs + b.predict(episode).probs) / 2)
    assert (both.extras["uncertainty"] > 0).all()  # members that disagree
    same = Ensemble([a, Fixed(0.2), Fixed(0.2)]).predict(episode)
    assert torch.equal(same.probs, a.predict(episode).probs)
    assert torch.equal(same.extras["uncertainty"], torch.zeros(15))
    with pytest.raises(ValueError, match="two members"):
        Ensemble([a])


def test_identical_members_score_as_the_member():
    glyphs, task = load_glyphs(), Classification()
    shape = {"way": 3, "shot": 1, "query": 2, "train_shot": 1, "train_query": 2,
             "unknown_fraction": 0.5}

    def run(method):
        return evaluation.evaluate(task, method, "fixed", glyphs, shape=shape, seed=1, count=6,
                                   temperature=0.8)

    one, three = run(Fixed(0.1)), run(Ensemble([Fixed(0.1), Fixed(0.1), Fixed(0.1)]))
    for a, b in zip(one, three, strict=True):
        for key in ("accuracy", "nll", "brier", "confidence", "correct", "confidence_calibrated",
                    "auroc_entropy", "aupr_maxprob"):
            assert a[key] == b[key], key
        assert b["auroc_uncertainty"] == 0.5  # no disagreement anywhere: every pair tied


@pytest.fixture(scope="module")
def ensembled(tmp_path_factory):
    out = tmp_path_factory.mktemp("ensemble") / "results"
    suite = tiny_suite(seeds=[0, 1, 2], ensemble=2, test_datasets=["glyphs"],
                       unknown_fraction=0.5)
    outcome = run_suite(suite, out=out, device="cpu", progress=False)
    return out, outcome, suite


def test_suite_scores_its_ensemble_as_rows_of_its_own(ensembled):
    out, outcome, suite = ensembled
    assert not outcome.failed and len(outcome.finished) == 3 + 2  # 3 seeds, 2 ensemble cells
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    ensembles = [r for r in lines if r.get("members")]
    assert sorted(r["seed"] for r in ensembles) == [0, 1] and all(r["members"] == [0, 1]
                                                                  for r in ensembles)
    assert {r["variant"] for r in ensembles} == {"ensemble of seeds 0,1"}
    members = {r["seed"]: r for r in lines if not r.get("members")}
    for r in ensembles:  # no retraining: the members' training time, summed
        assert r["train_seconds"] == pytest.approx(members[0]["train_seconds"]
                                                   + members[1]["train_seconds"])
        assert "auroc_uncertainty" in r and r["temperature"] > 0
    report = load_report(out)
    assert "protonet ensemble of seeds 0,1" in report.methods
    pairs = [p for p in report.paired() if "ensemble" in p["a"] + p["b"]]
    assert pairs and pairs[0]["seeds"] == 2 and pairs[0]["unit"] == "seeds"
    text = markdown(report)
    assert "protonet ensemble of seeds 0,1" in text and "AUROC" in text
    row = next(r for r in report.rows() if r["method"] == "protonet")
    assert "aurc_seed_ci95" in row and "auroc_entropy_seed_mean" in row


def test_ensembles_are_not_scored_twice(ensembled):
    out, _, suite = ensembled
    again = run_suite(suite, out=out, device="cpu", progress=False)
    assert not again.finished and not again.failed


def test_each_ensemble_cell_is_a_unit_of_its_own(ensembled):
    from zoo.plugins import registry
    from zoo.runner.bench import prepare_suite
    from zoo.runner.cells import expand_cells
    from zoo.runner.ensembles import ensemble_groups, ensemble_units, unit_ensemble

    _, _, suite = ensembled
    prepared, names = prepare_suite(suite, (), None, registry=registry())
    groups = ensemble_groups(expand_cells(prepared, names, registry()))
    units = ensemble_units(groups)
    assert [[c.seed for c in u] for u in units] == [[0, 1], [1, 0]]  # scored on the first's episodes
    cells = [unit_ensemble(u) for u in units]
    assert [c.seed for c in cells] == [0, 1] and len({c.hash for c in cells}) == 2
    assert all(c.shape["members"] == [0, 1] for c in cells)


class Noisy(Fixed):
    """:class:`Fixed` with noise from the global RNG added to its logits: a member whose
    predictions depend on what was drawn before it."""

    def predict(self, episode):
        p = super().predict(episode).probs
        return Prediction(torch.softmax(p.log() + torch.randn_like(p), -1))


def test_kept_predictions_of_a_member_are_the_ones_it_gives_again():
    from zoo.ensemble import Recorded
    from zoo.runner.ensembles import by_member
    from zoo.seeds import seed_everything

    glyphs, task = load_glyphs(), Classification()
    shape = {"way": 3, "shot": 1, "query": 2, "train_shot": 1, "train_query": 2,
             "unknown_fraction": 0.5}

    def test_pass(method):
        seed_everything(3)
        return evaluation.evaluate(task, method, "noisy", glyphs, shape=shape, seed=3, count=5,
                                   temperature=0.8)

    models = [Noisy(0.1), Noisy(0.05), Noisy(0.2)]
    kept = Recorded(models[1])  # the member's own cell, which kept its predictions
    test_pass(kept)
    assert len(kept.probs) == 2 * 5  # known and unknown queries of each episode
    given, _ = by_member(models, test_pass, {1: kept.probs})
    again, passes = by_member(models, test_pass)
    assert passes[1] is not None
    for a, b in zip(given, again, strict=True):
        a.pop("seconds"), b.pop("seconds")
        assert a == b
    with pytest.raises(ValueError, match="recorded predictions"):
        by_member(models, test_pass, {1: kept.probs[:-1]})


def test_ensemble_takes_the_predictions_its_members_kept(ensembled, tmp_path):
    import shutil

    from zoo.runner.storage import PREDICTIONS

    out, _, suite = ensembled
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    ensembles = {r["config_hash"]: r for r in lines if r.get("members")}
    members = {r["seed"]: r["config_hash"] for r in lines if not r.get("members")}
    assert all((out / "cells" / h / PREDICTIONS).exists() for h in members.values())

    def records(root, h):
        rows = [json.loads(line) for line in (root / "cells" / h / "episodes.jsonl").open()]
        return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]

    again = tmp_path / "again"  # the ensembles scored anew, their members asked again
    shutil.copytree(out, again)
    for h in ensembles:
        shutil.rmtree(again / "cells" / h)
    for h in members.values():
        (again / "cells" / h / PREDICTIONS).unlink()
    redone = run_suite(suite, out=again, device="cpu", progress=False)
    assert len(redone.finished) == 2 and not redone.failed
    for h in ensembles:
        assert records(again, h) == records(out, h)

    broken = tmp_path / "broken"  # a kept file of other episodes is refused, not averaged
    shutil.copytree(out, broken)
    for h in ensembles:
        shutil.rmtree(broken / "cells" / h)
    path = broken / "cells" / members[0] / PREDICTIONS
    torch.save({"probs": torch.load(path)["probs"][:-1]}, path)
    failed = run_suite(suite, out=broken, device="cpu", progress=False)
    assert len(failed.failed) == 1 and "recorded predictions" in failed.failed[0].error
